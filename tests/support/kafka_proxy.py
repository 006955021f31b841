"""A TCP proxy in front of a single-node broker that answers one ProduceRequest itself, the way
a broker answers a write to a partition it does not lead yet, so a test can make a producer's
first write to a partition be refused while its next one is taken, in that order, every time.

Everything else goes through unchanged, except that the broker's address in its answers
(metadata, coordinators) is replaced by the proxy's, so the client keeps coming through here.
Only ProduceRequest versions 9 to 12 (flexible, topics by name: what librdkafka sends to Kafka
4) are understood; another version is left alone and named in `error`.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

PRODUCE = 0
NOT_LEADER_OR_FOLLOWER = 6
FLEXIBLE_PRODUCE = range(9, 13)


class NotLeaderOnce:
    """Refuses the first ProduceRequest naming `topic` with NOT_LEADER_OR_FOLLOWER; it never
    reaches the broker. The refusal is held until the client's next ProduceRequest on that
    connection has been read by the proxy, and is released just before that request is passed
    on (a client that pipelines then has a later write in
    flight, as when the leader comes up between two requests), or for `hold_s` at most (a
    client that waits for each answer sends nothing meanwhile, and must hear it to go on)."""

    def __init__(self, bootstrap: str, topic: str, hold_s: float = 2.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.topic = topic.encode()
        self.hold_s = hold_s
        self.listener = socket.create_server((host, 0))
        own_port = self.listener.getsockname()[1]
        self.bootstrap = f"{host}:{own_port}"
        self.broker_address = host.encode() + struct.pack(">i", int(port))
        self.own_address = host.encode() + struct.pack(">i", own_port)
        self.refused = threading.Event()
        """Set once the ProduceRequest is held back."""
        self.error: str | None = None
        self.armed = True
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> NotLeaderOnce:
        return self

    def __exit__(self, *_: object) -> None:
        for sock in self.sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            broker = socket.create_connection(self.upstream)
            self.sockets += [client, broker]
            _Connection(self, client, broker).start()

    def refusal(self, frame: bytes) -> bytes | None:
        """The answer to send instead of forwarding `frame`, if it is the one to refuse."""
        api_key, version = struct.unpack_from(">hh", frame, 4)
        if api_key != PRODUCE or not self.armed:
            return None
        if version not in FLEXIBLE_PRODUCE:
            self.error = f"ProduceRequest v{version} is not understood here"
            return None
        correlation_id, topics = _produce_request(frame)
        with self.lock:
            if not self.armed or all(name != self.topic for name, _ in topics):
                return None
            self.armed = False
        return _not_leader_answer(correlation_id, topics)


class _Connection:
    """One client connection and its own to the broker. Answers reach the client in the order
    of its requests: the refusal goes out once every answer to an earlier request has."""

    def __init__(self, proxy: NotLeaderOnce, client: socket.socket, broker: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.broker = broker
        self.answered = threading.Condition()
        self.forwarded = 0
        self.relayed = 0
        self.held: tuple[bytes, int] | None = None
        """The refusal, and how many requests went to the broker before the refused one."""

    def start(self) -> None:
        threading.Thread(target=self._requests, daemon=True).start()
        threading.Thread(target=self._answers, daemon=True).start()

    def _requests(self) -> None:
        for frame in _frames(self.client):
            answer = self.proxy.refusal(frame)
            if answer is not None:
                with self.answered:
                    self.held = (answer, self.forwarded)
                timer = threading.Timer(self.proxy.hold_s, self._release)
                timer.daemon = True
                timer.start()
                self.proxy.refused.set()
                continue
            if struct.unpack_from(">h", frame, 4)[0] == PRODUCE:
                self._release()
            with self.answered:
                self.forwarded += 1
            self.broker.sendall(frame)

    def _release(self) -> None:
        with self.answered:
            if self.held is None:
                return
            answer, before = self.held
            self.held = None
            if not self.answered.wait_for(lambda: self.relayed >= before, timeout=30):
                self.proxy.error = "the broker did not answer the requests before the refused one"
                return
            self.client.sendall(answer)

    def _answers(self) -> None:
        for frame in _frames(self.broker):
            with self.answered:
                self.client.sendall(
                    frame.replace(self.proxy.broker_address, self.proxy.own_address)
                )
                self.relayed += 1
                self.answered.notify_all()


def _frames(sock: socket.socket) -> Iterator[bytes]:
    """Size-prefixed Kafka frames, each with its size, until the connection closes."""
    buffer = b""
    while True:
        while len(buffer) < 4 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
            try:
                data = sock.recv(65536)
            except OSError:
                return
            if not data:
                return
            buffer += data
        end = 4 + struct.unpack_from(">i", buffer)[0]
        yield buffer[:end]
        buffer = buffer[end:]


class _Reader:
    def __init__(self, data: bytes, at: int) -> None:
        self.data = data
        self.at = at

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def compact(self) -> bytes:
        """A compact string or bytes (length + 1 first; 0 is null, read as empty)."""
        length = max(self.uvarint() - 1, 0)
        self.at += length
        return self.data[self.at - length : self.at]

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.at += self.uvarint()


def _produce_request(frame: bytes) -> tuple[int, list[tuple[bytes, list[int]]]]:
    """The correlation id and the (topic, partitions) of a flexible ProduceRequest."""
    reader = _Reader(frame, 8)
    correlation_id = reader.fixed(">i")
    client_id = reader.fixed(">h")  # the request header's client id is a plain string
    reader.at += max(client_id, 0)
    reader.tags()
    reader.compact()  # transactional id
    reader.fixed(">h")  # acks
    reader.fixed(">i")  # timeout
    topics = []
    for _ in range(reader.uvarint() - 1):
        name = reader.compact()
        partitions = []
        for _ in range(reader.uvarint() - 1):
            partitions.append(reader.fixed(">i"))
            reader.compact()  # records
            reader.tags()
        reader.tags()
        topics.append((name, partitions))
    return correlation_id, topics


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _not_leader_answer(correlation_id: int, topics: list[tuple[bytes, list[int]]]) -> bytes:
    """A flexible ProduceResponse failing every partition with NOT_LEADER_OR_FOLLOWER."""
    body = struct.pack(">i", correlation_id) + b"\x00"  # response header: id, no tags
    body += _uvarint(len(topics) + 1)
    for name, partitions in topics:
        body += _uvarint(len(name) + 1) + name + _uvarint(len(partitions) + 1)
        for index in partitions:
            # base offset, log append time, log start offset unknown; no record errors,
            # no message, no tags
            body += struct.pack(">ihqqq", index, NOT_LEADER_OR_FOLLOWER, -1, -1, -1)
            body += b"\x01\x00\x00"
        body += b"\x00"
    body += struct.pack(">i", 0) + b"\x00"  # throttle time, no tags
    return struct.pack(">i", len(body)) + body
