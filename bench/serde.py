"""Serde cost: jobledger's encode/decode (single-object header + pydantic models) against bare
fastavro schemaless encode/decode of the same records, measured in the same run."""

from __future__ import annotations

import argparse
import io
import json
import time

from fastavro import schemaless_reader, schemaless_writer

from jobledger.schemas import EventSerde
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.types import ExecutionState


def sample(n: int) -> list[TaskExecutionStateChanged]:
    states = list(ExecutionState)[:-1]
    return [
        TaskExecutionStateChanged(
            event_id=f"ev-{i}",
            event_time=1_700_000_000_000 + i,
            producer="bench",
            job_id=f"job-{i % 500}",
            execution_attempt_id=f"att-{i}",
            execution_state=states[i % len(states)],
            resource_id=f"tm-{i % 1000}",
        )
        for i in range(n)
    ]


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    n = parser.parse_args().events
    serde = EventSerde()
    events = sample(n)
    schema = serde.catalog.reader(TaskExecutionStateChanged)
    records = [e.model_dump(mode="json") for e in events]

    def raw_encode() -> list[bytes]:
        out = []
        for record in records:
            buf = io.BytesIO()
            schemaless_writer(buf, schema, record)
            out.append(buf.getvalue())
        return out

    bodies = raw_encode()
    encoded = [serde.encode(e, "bench") for e in events]
    raw_enc = timed(raw_encode)
    jl_enc = timed(lambda: [serde.encode(e, "bench") for e in events])
    raw_dec = timed(lambda: [schemaless_reader(io.BytesIO(b), schema, None) for b in bodies])
    jl_dec = timed(lambda: [serde.decode(b, "bench") for b in encoded])

    result = {
        "events": n,
        "fastavro_encode_events_per_s": round(rate(n, raw_enc)),
        "jobledger_encode_events_per_s": round(rate(n, jl_enc)),
        "fastavro_decode_events_per_s": round(rate(n, raw_dec)),
        "jobledger_decode_events_per_s": round(rate(n, jl_dec)),
        "ratio_encode": round(raw_enc / jl_enc, 3),
        "ratio_decode": round(raw_dec / jl_dec, 3),
    }
    print(
        f"encode: jobledger {result['jobledger_encode_events_per_s']:,}/s vs fastavro "
        f"{result['fastavro_encode_events_per_s']:,}/s (ratio {result['ratio_encode']})"
    )
    print(
        f"decode: jobledger {result['jobledger_decode_events_per_s']:,}/s vs fastavro "
        f"{result['fastavro_decode_events_per_s']:,}/s (ratio {result['ratio_decode']})"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
