"""Asking the container runtime over CRI which network config it loaded and whether NetworkReady is true.

``cnichain node probe --runtime-endpoint SOCKET`` uses it, so a DaemonSet's readiness can mean "the
runtime runs our chain", not only "our agent answers".  The image carries no gRPC or protobuf
library (only the plugins' stack), and one unary call needs neither: this module speaks just
enough gRPC -- HTTP/2 with prior knowledge over the unix socket, one stream, no compression --
and hand-encodes the two runtime.v1 messages it needs (``StatusRequest{verbose}``,
``StatusResponse{status.conditions, info}``, field numbers from the CRI's api.proto).  Response
headers are never HPACK-decoded: a reply without a message is reported as a gRPC error.
Every read and write shares one deadline, so the probe cannot hang on a stuck runtime.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

PATH = b"/runtime.v1.RuntimeService/Status"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
MAX_WINDOW = 0x7FFFFFFF
MAX_RESPONSE = 16 << 20


class CriError(RuntimeError):
    """The runtime could not be asked, or did not answer a Status."""


@dataclass
class Condition:
    type: str = ""
    status: bool = False
    reason: str = ""
    message: str = ""


@dataclass
class RuntimeStatus:
    conditions: dict[str, Condition] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)  # verbose only; values are JSON texts (containerd)

    def network_ready(self) -> Condition:
        return self.conditions.get("NetworkReady") or Condition("NetworkReady", False, "NoCondition",
                                                                 "the runtime reported no NetworkReady condition")

    def loaded_networks(self) -> list[dict]:
        """containerd's ``cniconfig``: each loaded network's ``{"IFName", "Config": {"Name", "Source", ...}}``."""
        try:
            cniconfig = json.loads(self.info.get("cniconfig", "") or "{}")
        except ValueError:
            return []
        networks = cniconfig.get("Networks") if isinstance(cniconfig, dict) else None
        return [n for n in networks if isinstance(n, dict)] if isinstance(networks, list) else []

    def pod_network(self) -> Optional[dict]:
        """The network config behind the pods' ``eth0`` (containerd loads one, max_conf_num = 1)."""
        for net in self.loaded_networks():
            if net.get("IFName") == "eth0" and isinstance(net.get("Config"), dict):
                return net["Config"]
        return None


# -- protobuf (the subset runtime.v1 Status needs) ---------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def status_request(verbose: bool) -> bytes:
    """``StatusRequest{bool verbose = 1}``."""
    return b"\x08\x01" if verbose else b""


def _fields(buf: bytes) -> Iterator[tuple[int, object]]:
    """(field number, int or bytes) of a protobuf message; fixed-width fields are skipped."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise CriError("truncated protobuf field")
            yield number, buf[pos:pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise CriError(f"unsupported protobuf wire type {wire}")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CriError("bad protobuf varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def parse_status_response(buf: bytes) -> RuntimeStatus:
    """``StatusResponse{RuntimeStatus status = 1; map<string, string> info = 2}``."""
    result = RuntimeStatus()
    for number, value in _fields(buf):
        if number == 1 and isinstance(value, bytes):
            for n, cond_bytes in _fields(value):  # RuntimeStatus{repeated RuntimeCondition conditions = 1}
                if n == 1 and isinstance(cond_bytes, bytes):
                    cond = Condition()
                    for cn, cv in _fields(cond_bytes):
                        if cn == 1:
                            cond.type = _text(cv)
                        elif cn == 2:
                            cond.status = bool(cv)
                        elif cn == 3:
                            cond.reason = _text(cv)
                        elif cn == 4:
                            cond.message = _text(cv)
                    result.conditions[cond.type] = cond
        elif number == 2 and isinstance(value, bytes):
            entry = dict(_fields(value))
            result.info[_text(entry.get(1, b""))] = _text(entry.get(2, b""))
    return result


# -- HTTP/2 + gRPC (one unary call) ------------------------------------------------------------

def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_str(data: bytes) -> bytes:
    return _hpack_int(len(data), 7, 0) + data  # no Huffman


def request_headers() -> bytes:
    """HPACK block: :method POST, :scheme http (static table), the rest literal, never indexed."""
    block = b"\x83\x86"  # :method POST, :scheme http
    block += _hpack_int(4, 4, 0) + _hpack_str(PATH)  # :path (static name 4)
    block += _hpack_int(1, 4, 0) + _hpack_str(b"localhost")  # :authority (static name 1)
    for name, value in ((b"content-type", b"application/grpc"), (b"te", b"trailers")):
        block += b"\x00" + _hpack_str(name) + _hpack_str(value)
    return block


def runtime_status(socket_path: str, verbose: bool = True, timeout: float = 5.0) -> RuntimeStatus:
    """One CRI ``RuntimeService/Status`` call on the runtime's unix socket, bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    message = status_request(verbose)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
            settings = struct.pack(">HI", 0x2, 0) + struct.pack(">HI", 0x4, MAX_WINDOW)  # no push; big window
            sock.sendall(PREFACE + _frame(SETTINGS, 0, 0, settings)
                         + _frame(0x8, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))  # connection WINDOW_UPDATE
                         + _frame(HEADERS, END_HEADERS, 1, request_headers())
                         + _frame(DATA, END_STREAM, 1, b"\x00" + struct.pack(">I", len(message)) + message))
            body = _read_response(sock, deadline)
        except (OSError, socket.timeout) as exc:
            raise CriError(f"CRI Status on {socket_path}: {exc}") from None
    finally:
        sock.close()
    if len(body) < 5:
        raise CriError(f"CRI Status on {socket_path}: the runtime answered with a gRPC error (no message)")
    compressed, length = body[0], struct.unpack(">I", body[1:5])[0]
    if compressed or len(body) < 5 + length:
        raise CriError(f"CRI Status on {socket_path}: unexpected gRPC message framing")
    return parse_status_response(body[5:5 + length])


def _read_response(sock: socket.socket, deadline: float) -> bytes:
    """The DATA bytes of stream 1 until the stream ends; answers SETTINGS and PING on the way."""
    buf, body = b"", bytearray()
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CriError("no complete answer in time")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                raise CriError("the runtime closed the connection")
            buf += chunk
            if len(buf) > MAX_RESPONSE:
                raise CriError("answer too large")
        length = int.from_bytes(buf[:3], "big")
        kind, flags, stream = buf[3], buf[4], struct.unpack(">I", buf[5:9])[0] & MAX_WINDOW
        payload, buf = buf[9:9 + length], buf[9 + length:]
        if kind == SETTINGS and not flags & ACK:
            sock.sendall(_frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            sock.sendall(_frame(PING, ACK, 0, payload))
        elif kind == GOAWAY or (kind == RST_STREAM and stream == 1):
            raise CriError("the runtime reset the call")
        elif kind == DATA and stream == 1:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]] if payload else b""
            body += payload
            if flags & END_STREAM:
                return bytes(body)
        elif kind == HEADERS and stream == 1 and flags & END_STREAM:
            return bytes(body)  # trailers: the call is over
