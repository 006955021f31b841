"""The runner's Spark session: its Python workers' Unix domain sockets are reachable by this
user only (such a socket takes no secret, unlike Spark's TCP one)."""

from __future__ import annotations

import os
import stat

from jobledger.services.runner.session import SOCKET_DIR, socket_conf


def _sockets_in(directory: str):
    def listing(_rows):
        return [name for name in os.listdir(directory)
                if stat.S_ISSOCK(os.lstat(os.path.join(directory, name)).st_mode)]  # fmt: skip

    return listing


def test_a_local_sessions_python_sockets_are_in_a_directory_only_this_user_enters(spark):
    directory = spark.sparkContext.getConf().get(SOCKET_DIR)
    assert directory is not None, "the sockets would go to the shared temporary directory"
    info = os.stat(directory)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()
    # a Python job's worker talks to its JVM over a socket in that directory
    seen = spark.sparkContext.parallelize([0], 1).mapPartitions(_sockets_in(directory)).collect()
    assert [name for name in seen if name.endswith(".sock")], seen


def test_a_standalone_masters_executors_keep_sparks_own_socket_directory():
    """They may run on hosts where the driver's directory does not exist."""
    assert socket_conf("spark://127.0.0.1:7077") == {}
    assert set(socket_conf("local[*]")) == {SOCKET_DIR}
