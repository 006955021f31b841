"""The local broker for a laptop, the demo and the tests: Apache Kafka on loopback.

Apache Kafka itself (`apache_kafka.py`: a single-node KRaft broker from Maven Central's jars):
it fences zombie producers, aborts transactions whose producer died, compacts, and adds
partitions, which the services and the runner rely on.

`--secure` (`secure.py`) adds TLS, SCRAM principals per role and ACLs. A secure broker keeps
its data apart from an insecure one's (`kafka-data-secure`, `kafka-cluster-secure`): storage
formatted without the SCRAM users cannot serve it, and one formatted with them is no use
without TLS and SASL.

A broker started for the CLI is recorded in a state file so later commands (and
`jobledger broker --stop`) find it; the record is trusted only while its process is alive and
its port answers.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..home import home
from . import apache_kafka, secure
from .loopback import (
    LOOPBACK,
    BrokerError,
    free_port,
    pid_alive,
    port_answers,
    port_is_free,
    terminate_all,
)

__all__ = ["LOOPBACK", "BrokerError", "free_port", "port_is_free"]

DEFAULT_PORT = 9092
NAME = "Apache Kafka"
STOP_GRACE_S = 20.0
"""How long the broker gets to stop on SIGTERM (Kafka's controlled shutdown) before SIGKILL."""


def state_file() -> Path:
    return home() / "broker.json"


@dataclass(frozen=True)
class BrokerRecord:
    """A running local broker: its process and where it listens."""

    pid: int
    port: int
    log: str
    others: tuple[tuple[int, int], ...] = ()
    """The other nodes of a cluster: (pid, port) each."""
    secure: bool = False
    """Started with `--secure`: clients need the property files in `secure.secure_dir()`."""

    @property
    def name(self) -> str:
        name = f"{NAME}, {len(self.others) + 1} nodes," if self.others else NAME
        return f"{name} secure (SASL_SSL, SCRAM-SHA-512, ACLs)," if self.secure else name

    @property
    def bootstrap(self) -> str:
        ports = (self.port, *(port for _, port in self.others))
        return ",".join(f"{LOOPBACK}:{port}" for port in ports)

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.pid, *(pid for pid, _ in self.others))

    def is_up(self) -> bool:
        return pid_alive(self.pid) and port_answers(self.port)


def log_path_of(port: int, workdir: Path) -> Path:
    return workdir / f"kafka-{port}.log"


def data_dir(workdir: Path, cluster: bool, secured: bool) -> Path:
    """Where a broker's storage is: a secure one's apart (see the module docstring)."""
    name = "kafka-cluster" if cluster else "kafka-data"
    return workdir / (f"{name}-secure" if secured else name)


def spawn(
    port: int, workdir: Path, detach: bool, secrets: secure.Secrets | None = None
) -> subprocess.Popen[bytes]:
    """Start Apache Kafka on loopback, its log (`log_path_of`) and data under `workdir`, and
    return once it is ready."""
    log_path = log_path_of(port, workdir)
    if not port_is_free(port):
        raise BrokerError(
            f"port {port} on {LOOPBACK} is taken by another process: pick another with --port, "
            "or stop what listens there"
        )
    data = data_dir(workdir, False, secrets is not None)
    proc = apache_kafka.spawn(port, data, log_path, detach, secrets)
    if proc.poll() is not None:
        raise BrokerError(f"{NAME} exited with {proc.returncode}; see {log_path}")
    return proc


def spawn_nodes(
    ports: list[int], workdir: Path, detach: bool, secrets: secure.Secrets | None = None
) -> list[subprocess.Popen[bytes]]:
    """Start a KRaft cluster of one node per port on loopback (apache_kafka.spawn_cluster),
    its logs and data under `workdir`, and return once it is ready."""
    taken = [port for port in ports if not port_is_free(port)]
    if taken:
        raise BrokerError(
            f"port(s) {', '.join(map(str, taken))} on {LOOPBACK} taken by another process: pick "
            "others with --port (the nodes listen on it and the ports after it)"
        )
    logs = [log_path_of(port, workdir) for port in ports]
    data = data_dir(workdir, True, secrets is not None)
    return apache_kafka.spawn_cluster(ports, data, logs, detach, secrets)


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Stop a broker this process started (with time for Kafka's controlled shutdown)."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_record() -> BrokerRecord | None:
    try:
        fields = json.loads(state_file().read_text())
        fields.pop("kind", None)  # written by versions that had two kinds of broker
        others = tuple(tuple(node) for node in fields.pop("others", ()))
        record = BrokerRecord(**fields, others=others)
    except (OSError, ValueError, TypeError):
        return None
    return record if record.is_up() else None


def write_record(record: BrokerRecord) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(record)))


def clear_record(pid: int) -> None:
    """Remove the state file if it still describes process `pid`."""
    path = state_file()
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError):
        pass


def start(
    ports: list[int], detach: bool, secure_prefix: str | None = None
) -> tuple[list[subprocess.Popen[bytes]], BrokerRecord]:
    """Start a broker (or a cluster, one node per port), record it, and return its processes
    and record. With `secure_prefix`, secured: the property files are written and the ACLs
    granted for that topic prefix before anyone is told the broker is there."""
    workdir = home() / "broker"
    data = data_dir(workdir, len(ports) > 1, secure_prefix is not None)
    secrets = None
    if secure_prefix is not None:
        if data.exists() and not secure.credentials_path().is_file():
            raise BrokerError(
                f"{data} holds a secure broker's storage, but the passwords its users were "
                f"made with ({secure.credentials_path()}) are gone: delete {data} to start "
                "afresh"
            )
        secrets = secure.ensure_secrets()
    with _removed_on_failure(data):
        if len(ports) == 1:
            procs = [spawn(ports[0], workdir, detach, secrets)]
        else:
            procs = spawn_nodes(ports, workdir, detach, secrets)
    record = record_of(procs, ports, workdir, secrets is not None)
    try:
        if secrets is not None and secure_prefix is not None:
            secure.provision(secrets, record.bootstrap, secure_prefix)
    except BaseException:
        terminate_all(record.pids, STOP_GRACE_S)
        raise
    write_record(record)
    return procs, record


@contextlib.contextmanager
def _removed_on_failure(data: Path) -> Iterator[None]:
    """A start that fails leaves no storage behind that it created (a configuration and a
    formatted log folder no broker ever served, and the folders above them), so the next
    start begins as the first did; what an earlier broker kept is never touched. A log
    stays: the error names it."""
    created = [path for path in (data, *data.parents) if not path.exists()]
    try:
        yield
    except BaseException:
        if data in created:
            shutil.rmtree(data, ignore_errors=True)
        for folder in created[1:]:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty
        raise


def start_detached(
    port: int | None = None, nodes: int = 1, secure_prefix: str | None = None
) -> BrokerRecord:
    """Start a broker (or a cluster of `nodes`) that outlives this process, record it, and
    return the record."""
    return start(node_ports(port, nodes), True, secure_prefix)[1]


def node_ports(port: int | None, nodes: int) -> list[int]:
    """The ports `nodes` nodes listen on: `port` and the ones after it; by default 9092 on
    (any free ones where those are taken)."""
    first = DEFAULT_PORT if port is None else port
    wanted = [first + n for n in range(nodes)]
    if port is None and not all(port_is_free(p) for p in wanted):
        wanted = []
        while len(wanted) < nodes:
            if (found := free_port()) not in wanted:
                wanted.append(found)
    return wanted


def record_of(
    procs: list[subprocess.Popen[bytes]], ports: list[int], workdir: Path, secured: bool = False
) -> BrokerRecord:
    others = tuple((proc.pid, port) for proc, port in zip(procs[1:], ports[1:], strict=True))
    log = str(log_path_of(ports[0], workdir))
    return BrokerRecord(procs[0].pid, ports[0], log, others, secured)


def stop() -> BrokerRecord | None:
    record = read_record()
    if record is None:
        return None
    terminate_all(record.pids, STOP_GRACE_S)
    clear_record(record.pid)
    return record
