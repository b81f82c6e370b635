"""Which pod sandboxes the runtime still lists: the third witness before anything is collected.

A source answers :meth:`listed` with the set of sandbox IDs the runtime knows, or None when it
cannot tell (no endpoint configured, the runtime down, no client available).  None never makes
anything a leak: the reconciler then decides on the other two witnesses only (the attachment's
network namespace is gone, and the grace period has passed since it was first seen gone), which
is what ``cnichain gc --apply`` decides on.

:class:`CriSandboxes` asks the CRI ``RuntimeService/ListPodSandbox`` on the runtime's socket.
It needs grpcio (HTTP/2), which is not a dependency of the node install: without it the source
says so once and answers None.  The messages are so small that they are encoded by hand here
rather than generated: the request is an empty message (no filter), and of the response only
``items`` (field 1) and each sandbox's ``id`` (field 1) and ``state`` (field 3) are read.
"""

from __future__ import annotations

from typing import Callable, Optional

METHOD = "/runtime.v1.RuntimeService/ListPodSandbox"
SANDBOX_READY, SANDBOX_NOTREADY = 0, 1


class NoSandboxes:
    """No runtime listing configured: never an answer."""

    description = "none (network namespace and result cache only)"

    def listed(self) -> Optional[set[str]]:
        return None


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of one protobuf message: varints and length-delimited."""
    out: list[tuple[int, int, object]] = []
    pos = 0
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            out.append((number, wire, value))
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("truncated field")
            out.append((number, wire, buf[pos:pos + size]))
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def parse_list_response(data: bytes) -> set[str]:
    """Sandbox IDs in a ListPodSandboxResponse (ready or not: a listed sandbox is not a leak)."""
    ids = set()
    for number, wire, value in _fields(data):
        if number != 1 or wire != 2 or not isinstance(value, bytes):
            continue
        for n, w, v in _fields(value):
            if n == 1 and w == 2 and isinstance(v, bytes):
                ids.add(v.decode("utf-8", "replace"))
    return ids


class CriSandboxes:
    """ListPodSandbox on a CRI unix socket, through grpcio when it is installed."""

    def __init__(self, endpoint: str, log: Callable[[str], None], timeout: float = 5.0) -> None:
        self.endpoint = endpoint if endpoint.startswith("unix://") else "unix://" + endpoint
        self.description = f"CRI ListPodSandbox on {self.endpoint}"
        self.log = log
        self.timeout = timeout
        self._call: Optional[Callable[..., bytes]] = None
        self._warned = ""

    def _warn(self, text: str) -> None:
        if text != self._warned:
            self._warned = text
            self.log(f"reconcile: runtime listing unavailable ({text}); deciding on netns and grace only")

    def listed(self) -> Optional[set[str]]:
        try:
            import grpc  # type: ignore[import-not-found, import-untyped, unused-ignore]
        except ImportError:
            self._warn("grpcio is not installed")
            return None
        try:
            if self._call is None:
                channel = grpc.insecure_channel(self.endpoint)
                self._call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            raw = self._call(b"", timeout=self.timeout)
            ids = parse_list_response(bytes(raw))
        except Exception as exc:  # noqa: BLE001 - grpc.RpcError, a malformed answer: no answer
            self._call = None
            self._warn(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None
        self._warned = ""
        return ids


def source(endpoint: str, log: Callable[[str], None]) -> "NoSandboxes | CriSandboxes":
    return CriSandboxes(endpoint, log) if endpoint else NoSandboxes()
