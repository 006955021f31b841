"""What every producer of jobledger is made with (`services/kafka.py`), over a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from jobledger.services import kafka


@pytest.mark.broker
def test_every_producer_is_transactional_one_request_at_a_time_and_retries_soon(
    kafka_bootstrap, monkeypatch
):
    """A transaction begun right after the last committed is refused until the coordinator
    has written the last one's markers: retried after librdkafka's default 100 ms, most hops
    of a job waited that long for a commit of ~15 ms (`kafka.RETRY_BACKOFF`)."""
    made: list[dict] = []

    class Noted(Producer):
        def __init__(self, config: dict) -> None:
            made.append(dict(config))
            super().__init__(config)

    monkeypatch.setattr(kafka, "Producer", Noted)
    kafka.producer(kafka_bootstrap, "clients-test", extra={"linger.ms": 1}).close()
    kafka.transactional_producer(kafka_bootstrap, "clients-test").close()
    assert len(made) == 2
    for config in made:
        assert config["retry.backoff.ms"] == 10
        assert config["max.in.flight.requests.per.connection"] == 1
        assert config["enable.idempotence"] is True
        assert config["transactional.id"].startswith("jobledger-clients-test-") or (
            config["transactional.id"] == "clients-test"
        )
