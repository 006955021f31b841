"""End-to-end benchmark: jobs of P parallel no-op tasks, submission to FINISHED, on jobledger
(services + Spark runner already running) and on an already running Apache Flink MiniCluster,
in the same run.

    python bench/e2e.py [--parallelism 1 8 32 128] [--repeats 3] [--bootstrap HOST:PORT]

jobledger's figure is the time from committing JobSubmitted to reading the job's FINISHED
JobStatusChanged; Flink's is submitJob to its job result (bench/flink_minicluster.py). Both
are warmed up first with one job of P=1 and one of the largest P. The Spark micro-batch floor
(a record produced to a topic until a foreachBatch of a streaming query over it sees it, same
source and trigger as the runner) is printed as its own figure: every job waits for at least
one micro-batch.

Where jobledger's time goes is printed per parallelism as a table of hops, medians over the
repeats. After each job its records are read back from the topics: a hop ends when the last
record of its kind is produced (its Kafka timestamp), so it includes committing the
transaction of the hop before and the next service polling it. Inside the runner, where the
log has no record, the runner's own timings (`SparkJobs.timings`) split the wait for the
micro-batch from the Spark job. The hops add up to the job's time. Below the hops, the
micro-batches that read the job's acceptances are split as Spark's progress reports split them
(`StreamingQueryProgress.durationMs`: asking the source for offsets, planning, writing the
offsets to the checkpoint, the runner's `foreachBatch`, writing the commit), beside the Spark
job that ran the tasks. The last line is one JSON object; `hops_ms` holds the medians per
parallelism, `microbatch_ms` those of the split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from brokers import bench_broker
from flink_minicluster import measure_flink

from jobledger.cli.demo import Cluster, now_ms
from jobledger.projections.log.log_file import LogRecord
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.schemas.tasks import TaskExecutionStateChanged
from jobledger.schemas.types import JobVertex
from jobledger.services.kafka import transactional_producer
from jobledger.services.runner.exchange import create_result_topics
from jobledger.services.runner.kafka_source import FORMAT, register
from jobledger.services.runner.spark_jobs import GroupTiming

HOPS = (
    ("client -> JobMaster", "SlotRequested", "job started, slots asked for"),
    ("JobMaster -> ResourceManager", "SlotAllocationRequested", "slots assigned"),
    ("ResourceManager -> TaskExecutor", "SlotAllocated", "slots allocated"),
    ("TaskExecutor -> JobMaster", "JobMasterRegistrationAccepted", "TaskExecutor registered"),
    ("JobMaster -> TaskExecutor", "SlotOffered", "slots offered"),
    ("TaskExecutor -> JobMaster", "TaskDeploymentRequested", "offers accepted, tasks deployed"),
    ("JobMaster -> TaskExecutor", "TaskSubmissionAccepted", "deployments accepted"),
    ("TaskExecutor -> runner micro-batch", "batch_read", "trigger, plan, read (runner's timing)"),
    ("micro-batch -> Spark job -> reports", "reported", "last task's FINISHED produced"),
    ("reports -> JobMaster", "FINISHED", "JobStatusChanged FINISHED produced"),
    ("FINISHED -> client", "client", "the client read it"),
)
"""(hop, milestone that ends it, what happened in it): a milestone is the last record of that
event type for the job, or one of the runner's timings, or the client's own clock."""

BATCH_PARTS = (
    ("latestOffset", "the source's offsets (records fetched, batchOnHeader)"),
    ("queryPlanning", "planning the batch"),
    ("walCommit", "its offsets written to the checkpoint"),
    ("addBatch", "foreachBatch: rows read, deployments handed on"),
    ("commitOffsets", "the batch's commit written (the next batch waits)"),
    ("triggerExecution", "the whole micro-batch"),
)
"""Parts of `StreamingQueryProgress.durationMs` (each a micro-batch's milliseconds)."""


def noop_job(job_id: str, parallelism: int) -> JobSubmitted:
    vertex = JobVertex(
        vertex_id="noop", name="noop", invokable_class_name="noop", parallelism=parallelism
    )
    return JobSubmitted(
        event_id=uuid.uuid4().hex, event_time=now_ms(), producer="bench", job_id=job_id,
        job_name=f"noop x{parallelism}", vertices=[vertex],
    )  # fmt: skip


def time_job(cluster: Cluster, parallelism: int) -> tuple[float, dict[str, int], dict[str, int]]:
    """The job's seconds from submission to FINISHED, its hops and the split of its first
    micro-batch (milliseconds)."""
    job_id = f"noop-{parallelism}-{uuid.uuid4().hex[:6]}"
    start_ms = now_ms()
    start = time.perf_counter()
    cluster.submit(noop_job(job_id, parallelism))
    end = cluster.wait_for_end(job_id, 300)
    elapsed = time.perf_counter() - start
    if end.to_status.value != "FINISHED":
        raise RuntimeError(f"{job_id} ended {end.to_status.value}: {end.cause}")
    end_ms = start_ms + round(elapsed * 1000)
    timings = runner_timings(cluster, job_id)
    records = [r for r in cluster.log() if getattr(r.event, "job_id", None) == job_id]
    return elapsed, hops(records, timings, start_ms, end_ms), batch_split(cluster, timings)


def runner_timings(cluster: Cluster, job_id: str, timeout_s: float = 10.0) -> list[GroupTiming]:
    """The runner's timings of the job. Its driver notes them once a Spark job has returned,
    which can be after the tasks' reports made the job FINISHED and the client read it."""
    deadline = time.monotonic() + timeout_s
    while True:
        timings = [t for t in cluster.runner.jobs.timings if t.job_id == job_id]
        if timings or time.monotonic() > deadline:
            return timings
        time.sleep(0.01)


def batch_split(cluster: Cluster, timings: list[GroupTiming]) -> dict[str, int]:
    """The job's first micro-batch as its progress report splits it, and its Spark job."""
    if not timings:
        return {part: 0 for part in (*(p for p, _ in BATCH_PARTS), "sparkJob")}
    first = min(timings, key=lambda t: t.batch_id)
    reports = (json.loads(p.json) for p in cluster.runner.query.recentProgress)
    report = next((r for r in reports if r["batchId"] == first.batch_id), {})
    durations = report.get("durationMs", {})
    split = {part: durations.get(part, 0) for part, _ in BATCH_PARTS}
    split["sparkJob"] = first.spark_job_ended_ms - first.spark_job_started_ms
    return split


def milestones(records: list[LogRecord], timings: list[GroupTiming], end_ms: int) -> dict[str, int]:
    """When each milestone of HOPS was reached: the latest record (or runner timing) of it."""
    reached: dict[str, int] = {}

    def mark(name: str, at: int) -> None:
        reached[name] = max(reached.get(name, at), at)

    for record in records:
        event = record.event
        if isinstance(event, JobStatusChanged):
            mark(event.to_status.value, record.timestamp)
        elif isinstance(event, TaskExecutionStateChanged):
            if event.producer == "runner" and event.execution_state.value == "FINISHED":
                mark("reported", record.timestamp)
        else:
            mark(type(event).__name__, record.timestamp)
    for timing in timings:
        mark("batch_read", timing.batch_read_ms)
    reached["client"] = end_ms
    return reached


def hops(
    records: list[LogRecord], timings: list[GroupTiming], start_ms: int, end_ms: int
) -> dict[str, int]:
    """Milliseconds per hop, from the client's submission on. A milestone reached before the
    one before it (hops overlap when the tasks of one job go through them at different
    times) counts as reached with it, so no hop is negative and they add up to the whole."""
    reached = milestones(records, timings, end_ms)
    result: dict[str, int] = {}
    previous = start_ms
    for i, (_, milestone, _) in enumerate(HOPS):
        at = max(previous, min(reached.get(milestone, previous), end_ms))
        result[f"{i + 1:02d} {milestone}"] = at - previous
        previous = at
    return result


def print_hops(parallelism: int, medians: dict[str, float]) -> None:
    print(f"P={parallelism}: where the time goes (median ms over the repeats)")
    for (hop, _, what), ms in zip(HOPS, medians.values(), strict=True):
        print(f"  {hop:<36} {ms:>7.0f}  {what}")
    print(f"  {'sum of the medians':<36} {sum(medians.values()):>7.0f}")


def print_batch_split(medians: dict[str, float]) -> None:
    print("  the runner's micro-batch (median ms):")
    parts = (*BATCH_PARTS, ("sparkJob", "then the Spark job that ran the tasks"))
    for part, what in parts:
        print(f"    {part:<34} {medians[part]:>7.0f}  {what}")


def median_hops(samples: list[dict[str, int]]) -> dict[str, float]:
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def microbatch_floor(cluster: Cluster, samples: int = 5) -> float:
    """Produce one record, time until a foreachBatch over the topic has it."""
    spark = cluster.runner.spark
    topic = f"{cluster.prefix}floor"
    create_result_topics(cluster.bootstrap, {topic: 1})
    seen: dict[bytes, float] = {}
    arrived = threading.Condition()

    def on_batch(batch, _batch_id) -> None:
        now = time.perf_counter()
        with arrived:
            for row in batch.select("value").collect():
                seen[bytes(row.value)] = now
            arrived.notify_all()

    kafka = register(spark)
    reader = (
        spark.readStream.format(kafka)
        .option("kafka.bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
        .option("startingOffsets", "latest")
    )  # fmt: skip
    if kafka == FORMAT:  # as the runner reads
        reader = reader.option("readOnDriver", "true")
    query = (
        reader.load().writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="jobledger-floor-"))
        .trigger(processingTime=cluster.runner.config.trigger_interval).start()
    )  # fmt: skip
    while query.lastProgress is None:
        time.sleep(0.1)
    producer = transactional_producer(cluster.bootstrap, "bench-floor")
    floors = []
    for i in range(samples + 1):
        key = f"probe-{i}".encode()
        sent = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, value=key)
        producer.commit_transaction(30)
        with arrived:
            arrived.wait_for(lambda k=key: k in seen, timeout=60)
        if i:  # the first probe also pays for the query's Python workers starting
            floors.append(seen[key] - sent)
    query.stop()
    return statistics.median(floors)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bootstrap", help="a running Kafka (default: start one)")
    args = parser.parse_args()

    flink = measure_flink(args.parallelism, args.repeats)
    print(f"Flink MiniCluster: {json.dumps(flink)}", file=sys.stderr)

    work = Path(tempfile.mkdtemp(prefix="jobledger-e2e-"))
    with bench_broker(args.bootstrap, work / "broker") as bootstrap:
        prefix = f"e2e-{uuid.uuid4().hex[:8]}."
        cluster = Cluster(bootstrap, prefix, work, slots=max(args.parallelism))
        try:
            # warm-up, as Flink's MiniCluster is warmed (one job of P=1 and one of the largest
            # P): Python workers, producers, consumer fetch sessions
            for p in sorted({1, max(args.parallelism)}):
                time_job(cluster, p)
            runs = {
                p: [time_job(cluster, p) for _ in range(args.repeats)] for p in args.parallelism
            }
            floor = microbatch_floor(cluster)
        finally:
            cluster.close()

    ours = {p: statistics.median(s for s, _, _ in samples) for p, samples in runs.items()}
    hop_medians = {p: median_hops([h for _, h, _ in samples]) for p, samples in runs.items()}
    splits = {p: median_hops([b for _, _, b in samples]) for p, samples in runs.items()}
    for p in args.parallelism:
        print_hops(p, hop_medians[p])
        print_batch_split(splits[p])
    result: dict[str, object] = {}
    print(f"{'P':>5} {'jobledger s':>12} {'Flink s':>9} {'ratio':>7}")
    for p in args.parallelism:
        ratio = ours[p] / flink[p]
        print(f"{p:>5} {ours[p]:>12.2f} {flink[p]:>9.3f} {ratio:>7.1f}")
        result[str(p)] = {
            "jobledger_s": round(ours[p], 3), "flink_s": round(flink[p], 3),
            "ratio": round(ratio, 2),
        }  # fmt: skip
    print(f"Spark micro-batch floor (produce -> foreachBatch): {floor:.2f} s")
    result["spark_microbatch_floor_s"] = round(floor, 3)
    result["hops_ms"] = {
        str(p): {k.split(" ", 1)[1]: round(v) for k, v in hop_medians[p].items()}
        for p in args.parallelism
    }
    result["microbatch_ms"] = {
        str(p): {k: round(v) for k, v in splits[p].items()} for p in args.parallelism
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
