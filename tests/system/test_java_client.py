"""A client in another language, end to end: `examples/java` (Kafka's Java client, Apache
Avro, the published `.avsc` files, no jobledger code) registers a TaskExecutor, submits a
JobGraph and runs its tasks against `jobledger services run` over Apache Kafka.

The topics have three partitions, so this also proves the keyed-partitioning contract: the
Java client's events and the services' decisions about one owner meet in one partition only
if both hash keys as Java's client does (murmur2)."""

from __future__ import annotations

import shutil
import signal
import subprocess

import pytest

from jobledger.projections.log.log_file import processed_by_services
from jobledger.projections.log.replay import verify
from jobledger.schemas.catalog import SCHEMA_DIR
from jobledger.schemas.deadletters import DeadLettered
from jobledger.schemas.jobs import JobStatusChanged
from jobledger.schemas.rejections import EventRejected
from jobledger.schemas.slots import SlotOfferAccepted
from jobledger.schemas.types import JobStatus

from ..support.avro_java import missing_java
from ..support.runtime_harness import read, service_process, wait_until_owning
from ..support.secure_cluster import signed_run
from ..support.signed_clients import signed_client_runs

EXAMPLE = SCHEMA_DIR.parent / "examples" / "java"
MAIN_CLASS = "jobledger.example.JobledgerClient"

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(
        missing_java() is not None or shutil.which("mvn") is None,
        reason=missing_java() or "mvn (Maven) is not on PATH",
    ),
]


@pytest.fixture(scope="module")
def java_client() -> list[str]:
    """The example built with Maven (dependencies from Maven Central) and its command line."""
    build = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(EXAMPLE / "pom.xml"), "package"]
    subprocess.run(build, check=True, timeout=600)
    classpath = f"{EXAMPLE / 'target' / 'classes'}:{EXAMPLE / 'target' / 'dependency' / '*'}"
    return ["java", "-cp", classpath, MAIN_CLASS]


def test_a_java_client_registers_a_task_executor_and_runs_a_job_to_finished(
    java_client, cluster, tmp_path
):
    service = service_process(cluster, str(tmp_path), "--timer-interval-ms", "500")
    try:
        wait_until_owning(service)
        run = subprocess.run(
            [*java_client, "--bootstrap", cluster.bootstrap, "--prefix", cluster.prefix,
             "--schemas", str(SCHEMA_DIR), "--parallelism", "3", "--timeout-s", "120"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        service.send_signal(signal.SIGTERM)
        service.wait(30)
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stdout + run.stderr
    job_id = lines[0].split()[2]
    assert lines[0] == f"submitted job {job_id} (3 no-op tasks)"
    assert sum("registered at the ResourceManager" in line for line in lines) == 1
    assert sum(line.startswith("slot offer accepted: slot ") for line in lines) == 3
    assert sum(line.startswith("task deployed: noop[") for line in lines) == 3
    statuses = [line for line in lines if line.startswith(f"job {job_id}: ")]
    assert statuses == [
        f"job {job_id}: INITIALIZING -> CREATED",
        f"job {job_id}: CREATED -> RUNNING",
        f"job {job_id}: RUNNING -> FINISHED",
    ]

    records = read(cluster)
    events = [r.event for r in records]
    assert not [e for e in events if isinstance(e, DeadLettered)], "a Java event was refused"
    assert not [e for e in events if isinstance(e, EventRejected) and job_id in e.owner_id]
    assert {e.slot_index for e in events
            if isinstance(e, SlotOfferAccepted) and e.job_id == job_id} == {0, 1, 2}  # fmt: skip
    ends = [e for e in events if isinstance(e, JobStatusChanged) and e.job_id == job_id]
    assert ends[-1].to_status is JobStatus.FINISHED
    # the clock was on: a tick written as the services stopped is not decided yet
    _, divergence = verify(
        records, processed=processed_by_services(cluster.bootstrap, cluster.prefix)
    )
    assert divergence is None, divergence.describe()


def test_a_java_client_signs_what_it_writes_and_a_wrong_key_is_dead_lettered(
    java_client, secured, tmp_path
):
    """On `broker --secure`, the Java client signs each record with Ed25519
    (the JDK's own); the services admit every one of them, and name its writer; the same
    client with a key the keyring does not hold has every record dead-lettered."""
    with signed_run(secured, tmp_path, "javaclient") as run:
        signed_client_runs(run, [*java_client, "--schemas", str(SCHEMA_DIR)], "java")
