"""The start gate: the runner's driver decides, attempt by attempt, whether a task may start.

A deployment reaches its Spark task a while after the driver read it (Spark queues the task
until a core is free), and the JobMaster may cancel it meanwhile. Flink's TaskExecutor never
starts a task it was told to cancel, because one process holds both the cancel call and the
task thread; here the driver reads the cancellations and the executors run the tasks. So each
task asks the driver right before it starts an attempt (`POST /start`), and the driver answers
under one lock with the attempts it has not seen cancelled, marking them started: an attempt
whose cancellation the driver read first never starts (the driver reports it CANCELED itself),
and one that started is cancelled by cancelling its Spark job.

A Spark retry of a task asks again for attempts already started: they may start again (a lost
executor's attempts must run somewhere), since their reports carry the same event ids.

The same server leases the tasks' transactional ids (`POST /lease`, `task_producers.py`).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .task_producers import ProducerLeases

MAX_REQUEST_BYTES = 1 << 20
REQUEST_TIMEOUT_S = 30.0


class StartGate:
    """The driver's side: which attempts started, which were cancelled before they did."""

    def __init__(self, host: str, leases: ProducerLeases) -> None:
        self.leases = leases
        self.lock = threading.Lock()
        self.started: set[str] = set()
        self.cancelled: set[str] = set()
        self.server = ThreadingHTTPServer((host, 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/start"
        self.lease_url = f"http://{host}:{self.server.server_address[1]}/lease"
        self.thread = threading.Thread(
            target=self.server.serve_forever, name="jobledger-start-gate", daemon=True
        )
        self.thread.start()

    def start(self, attempts: Iterable[str]) -> list[str]:
        """The attempts that may start now (not cancelled), marked started."""
        with self.lock:
            allowed = [a for a in attempts if a not in self.cancelled]
            self.started.update(allowed)
        return allowed

    def cancel_unstarted(self, attempt: str) -> bool:
        """Cancel an attempt that has not started: True if it never will, False if it has."""
        with self.lock:
            if attempt in self.started:
                return False
            self.cancelled.add(attempt)
            return True

    def cancelled_before_start(self, attempts: Iterable[str]) -> set[str]:
        with self.lock:
            return {a for a in attempts if a in self.cancelled}

    def forget(self, attempts: Iterable[str]) -> None:
        """The attempts' Spark job ended: nobody asks about them again."""
        with self.lock:
            for attempt in attempts:
                self.started.discard(attempt)
                self.cancelled.discard(attempt)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(gate: StartGate) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path not in ("/start", "/lease") or not 0 < length <= MAX_REQUEST_BYTES:
                self.send_error(HTTPStatus.BAD_REQUEST, "POST /start or /lease with a JSON body")
                return
            try:
                request = json.loads(self.rfile.read(length))
                answer = _start(gate, request) if self.path == "/start" else _lease(gate, request)
            except (ValueError, KeyError, TypeError) as exc:
                self.send_error(HTTPStatus.BAD_REQUEST, str(exc))
                return
            body = json.dumps(answer).encode()
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a request per started task is not news."""

    return Handler


def _start(gate: StartGate, request: Any) -> dict[str, Any]:
    attempts = request["attempts"]
    if not all(isinstance(a, str) for a in attempts):
        raise TypeError("attempt ids are strings")
    return {"start": gate.start(attempts)}


def _lease(gate: StartGate, request: Any) -> dict[str, Any]:
    spark_job, partition = request["spark_job"], request["partition"]
    transactional_id = request["transactional_id"]
    if not (isinstance(spark_job, str) and isinstance(transactional_id, str)
            and isinstance(partition, int)):  # fmt: skip
        raise TypeError("spark_job and transactional_id are strings, partition an integer")
    return {"leased": gate.leases.lease(spark_job, partition, transactional_id)}


def may_start(url: str, attempts: list[str]) -> set[str]:
    """The executor's side: ask the driver which of `attempts` may start now."""
    request = urllib.request.Request(
        url, data=json.dumps({"attempts": attempts}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        return set(json.loads(response.read())["start"])
