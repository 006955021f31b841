"""The Python interpreter Spark is given for the runner's workers (`worker_python.py`): the
streaming source's process ends without a trace when the JVM it serves goes away
(`quiet_source_runner.py`). The JVM here is a socket that authenticates the process as
Spark's does, then resets the connection, as a stopping JVM's closed socket does to it."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading

from jobledger.services.runner.worker_python import worker_python

SECRET = "s3cret"


def _gone_jvm(server: socket.socket) -> None:
    """Take the connection, authenticate it, read the process's pid, then reset it."""
    conn, _ = server.accept()
    with conn:
        stream = conn.makefile("rwb")
        (length,) = struct.unpack(">i", stream.read(4))
        assert stream.read(length) == SECRET.encode()
        stream.write(struct.pack(">i", 2) + b"ok")
        stream.flush()
        stream.read(4)  # the pid
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _run_source_runner(module_args: list[str]) -> subprocess.CompletedProcess[str]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        jvm = threading.Thread(target=_gone_jvm, args=(server,))
        jvm.start()
        env = {**os.environ, "PYTHON_WORKER_FACTORY_PORT": str(server.getsockname()[1]),
               "PYTHON_WORKER_FACTORY_SECRET": SECRET}  # fmt: skip
        done = subprocess.run(module_args, env=env, capture_output=True, text=True, timeout=60)
        jvm.join(10)
    return done


def test_the_streaming_source_s_process_ends_quietly_when_the_jvm_is_gone():
    module = ["-m", "pyspark.sql.streaming.python_streaming_source_runner"]
    done = _run_source_runner([str(worker_python()), *module])
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "")


def test_without_it_pyspark_prints_a_broken_pipe_trace():
    """What the runner's log had: the same process, started as Spark starts it."""
    module = ["-m", "pyspark.sql.streaming.python_streaming_source_runner"]
    done = _run_source_runner([sys.executable, *module])
    assert "Traceback" in done.stderr and "BrokenPipeError" in done.stderr, done.stderr
