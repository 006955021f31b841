"""`jobledger demo wordcount FILE --secure`: the demo on a secured cluster, each role a
principal of its own, as an operator would run it.

The broker is `jobledger broker --secure` (started if the home has none; the ACLs granted for
the run's topic prefix). The services and the runner run as processes of their own, each on
its principal's property file and signing key, the services checking every input against the
keyring; this process is the client (`client`'s file and key). A Kafka client's properties
and signing key are a process's, so the three roles cannot share one process as the plain
demo's do.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

from jobledger.projections.log.job_results import JobWatcher
from jobledger.projections.log.log_file import LogRecord, read_events
from jobledger.schemas import EventSerde
from jobledger.schemas.jobs import JobStatusChanged, JobSubmitted
from jobledger.services import client_properties, kafka, signing
from jobledger.services.client.dispatcher import submit
from jobledger.services.kafka_topics import create_topics
from jobledger.services.local import broker, secure

from .demo import ComponentStopped, DemoCluster, progress
from .options import CommandFailed, install_local_kafka


def secure_broker(prefix: str) -> str:
    """The home's secure broker, started if none runs, with the ACLs for `prefix`; its
    bootstrap address."""
    record = broker.read_record()
    if record is None:
        install_local_kafka()
        record = broker.start_detached(secure_prefix=prefix)
        progress(f"started {record.name} on {record.bootstrap}; stop it with "
                 "`jobledger broker --stop`")  # fmt: skip
    elif not record.secure:
        raise CommandFailed(
            f"the broker of this home ({record.bootstrap}) runs without --secure: stop it "
            "with `jobledger broker --stop` (or use another JOBLEDGER_HOME), then run the "
            "demo with --secure again"
        )
    else:
        secure.provision(secure.ensure_secrets(), record.bootstrap, prefix)
    return record.bootstrap


def _as(principal: str) -> None:
    """Make this process's Kafka clients and records `principal`'s from now on."""
    kafka.use_client_properties(client_properties.load([secure.properties_path(principal)], []))
    signing.use_signing_key(signing.SigningKey.load(secure.signing_key_path(principal)))


@dataclass
class SecuredCluster(DemoCluster):
    """Services and runner of one secured demo run, each a process; this one the client."""

    def __post_init__(self) -> None:
        _as("admin")
        create_topics(self.bootstrap, self.prefix, partitions=4)
        progress(f"topics {self.prefix}* created (as admin)")
        _as("client")
        self.serde = EventSerde()
        self.watcher = JobWatcher(self.bootstrap, self.prefix, serde=self.serde)
        self.client = kafka.transactional_producer(self.bootstrap, f"demo-{uuid.uuid4().hex[:8]}")
        self.work.mkdir(parents=True, exist_ok=True)
        roots = [arg for root in self.data_roots for arg in ("--data-root", str(root))]
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            self.processes["services"] = self._start("services", [
                "services", "run", "--timer-interval-ms", "500",
                "--keyring", str(secure.keyring_path()),
            ])  # fmt: skip
            self.processes["runner"] = self._start("runner", [
                "runner", "--master", self.master, "--checkpoint", str(self.work / "checkpoint"),
                "--keyring", str(secure.keyring_path()),
                *(["--slots", str(self.slots)] if self.slots else []), *roots,
            ])  # fmt: skip
            progress("services and runner started, each as its own principal, signing what "
                     f"it writes; their logs: {self.work}/{{services,runner}}.log")  # fmt: skip
        except BaseException:  # no cluster for the caller to close: stop what was started
            self.close()
            raise

    def _start(self, principal: str, args: list[str]) -> subprocess.Popen[bytes]:
        connection = [
            "--bootstrap", self.bootstrap, "--topic-prefix", self.prefix,
            "-F", str(secure.properties_path(principal)),
            "--signing-key", str(secure.signing_key_path(principal)),
        ]  # fmt: skip
        log = open(self.work / f"{principal}.log", "wb")  # noqa: SIM115 (the child keeps it)
        return subprocess.Popen([sys.executable, "-m", "jobledger.cli", *args, *connection],
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip

    def describe(self) -> str:
        return f"Spark {self.master} in the runner's process; SASL_SSL, signed records"

    def close(self) -> None:
        self.watcher.close()
        for process in self.processes.values():
            process.terminate()
        deadline = time.monotonic() + 60
        for process in self.processes.values():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()

    def submit(self, job: JobSubmitted) -> None:
        submit(self.client, self.prefix, job, self.serde)

    def wait_for_end(self, job_id: str, timeout_s: float) -> JobStatusChanged:
        return self.watcher.wait(job_id, timeout_s, self.check_alive)

    def check_alive(self) -> None:
        """Raise if the services or the runner exited: waiting on would be waiting forever."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                tail = (self.work / f"{name}.log").read_text(errors="replace")[-1500:]
                raise ComponentStopped(f"the {name} exited ({process.returncode}):\n{tail}")

    def log(self) -> list[LogRecord]:
        return read_events(self.bootstrap, self.prefix)
