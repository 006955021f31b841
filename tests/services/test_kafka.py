"""What every producer of jobledger is made with (`services/kafka.py`), over a real broker."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError

from jobledger.services import kafka, kafka_reads
from jobledger.services.local.loopback import free_port


@pytest.mark.broker
def test_every_producer_is_transactional_one_request_at_a_time_and_retries_soon(
    kafka_bootstrap, monkeypatch
):
    """A transaction begun right after the last committed is refused until the coordinator
    has written the last one's markers: retried after librdkafka's default 100 ms, most hops
    of a job waited that long for a commit of ~15 ms, and at 10 ms `send_offsets_to_transaction`
    took 13-17 ms of it (`kafka.RETRY_BACKOFF`)."""
    made: list[dict] = []

    class Noted(kafka.SigningProducer):
        def __init__(self, config: dict) -> None:
            made.append(dict(config))
            super().__init__(config)

    monkeypatch.setattr(kafka, "SigningProducer", Noted)
    kafka.producer(kafka_bootstrap, "clients-test", extra={"linger.ms": 1}).close()
    kafka.transactional_producer(kafka_bootstrap, "clients-test").close()
    assert len(made) == 2
    assert [config["linger.ms"] for config in made] == [1, 0]  # sent at once unless asked
    for config in made:
        assert config["retry.backoff.ms"] == 2
        assert config["max.in.flight.requests.per.connection"] == 1
        assert config["enable.idempotence"] is True
        assert config["transactional.id"].startswith("jobledger-clients-test-") or (
            config["transactional.id"] == "clients-test"
        )


class _Record:
    """A consumed record, or the end of its partition (KafkaError._PARTITION_EOF)."""

    def __init__(self, partition: int, offset: int | None) -> None:
        self._partition, self._offset = partition, offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int | None:
        return self._offset

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self._offset is None else None


class _GrowingLog:
    """A consumer of two partitions that both keep growing: whenever one reaches its end,
    the other has a new record, so they are never at their ends at one moment. Paused
    partitions deliver nothing more, as librdkafka's do."""

    def __init__(self, polls: int) -> None:
        self.script = [_Record(0, 0), _Record(1, 0)]
        for n in range(polls // 2):  # each partition grows right after it reached its end
            self.script += [_Record(n % 2, None), _Record(n % 2, 100 + n)]
        self.paused: set[int] = set()

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        partitions = {0: None, 1: None}
        return SimpleNamespace(topics={topic: SimpleNamespace(partitions=partitions, error=None)})

    def assign(self, _assignment: list) -> None:
        """Reading starts at the beginning of both partitions."""

    def pause(self, partitions: list) -> None:
        self.paused.update(tp.partition for tp in partitions)

    def consume(self, _count: int, _timeout: float) -> list[_Record]:
        """Three records at a time: what a batch fetched before a pause still comes."""
        batch = []
        while self.script and len(batch) < 3:
            record = self.script.pop(0)
            if record.partition() not in self.paused:
                batch.append(record)
        if not batch:
            raise AssertionError("reading never ended: it is still polling a log that grew")
        return batch


def test_reading_a_log_to_its_end_ends_while_every_partition_keeps_growing():
    """`bench/load.py` found it: reading to the end waited for every partition to be at its
    end at one moment, which never came while 500 TaskExecutors kept beating into all of
    them, and `read_events` never returned. Each partition is now read to the end it has when
    reading reaches it; what is appended later is not this read's."""
    log = _GrowingLog(polls=1_000)
    read = [(m.partition(), m.offset()) for m in kafka_reads.read_topics(log, ["t"], True, True)]
    assert read == [(0, 0), (1, 0)], "a record appended past a partition's end was read"


def test_librdkafka_s_lines_go_through_logging_not_raw_onto_stderr(caplog, capfd):
    """A client that cannot reach its broker logs the failure through `jobledger.kafka` (the
    services print it as their other lines), never as librdkafka's raw `%3|...|FAIL|` line."""
    port = free_port()  # nothing listens there
    consumer = kafka.read_committed_consumer(f"127.0.0.1:{port}")
    try:
        with caplog.at_level(logging.DEBUG, logger="jobledger.kafka"):
            deadline = time.monotonic() + 10
            while not caplog.records and time.monotonic() < deadline:
                consumer.poll(0.2)
    finally:
        consumer.close()
    assert any("Connection refused" in r.getMessage() for r in caplog.records), caplog.text
    assert all(r.name == "jobledger.kafka" for r in caplog.records)
    assert "|FAIL|" not in capfd.readouterr().err


def test_what_librdkafka_retries_by_itself_is_not_logged(caplog):
    with caplog.at_level(logging.DEBUG, logger="jobledger.kafka"):
        for line in (
            "[thrd:main]: Failed to acquire transactional PID from broker TxnCoordinator/1: "
            "Broker: Coordinator load in progress: retrying",
            "[thrd:background]: Purging 1 unserved events from background queue",
        ):
            kafka.LOG.warning("%s [%s] %s", "GETPID", "rdkafka#producer-7", line)
        kafka.LOG.error("%s [%s] %s", "FAIL", "rdkafka#producer-7", "Connection refused")
    assert [r.getMessage() for r in caplog.records] == [
        "FAIL [rdkafka#producer-7] Connection refused"
    ]
