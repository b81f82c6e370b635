"""One unary gRPC call on a unix socket, bounded by a deadline, with no gRPC library.

The node image carries no grpcio (only the plugins' stack), and a unary call needs little:
HTTP/2 with prior knowledge, one stream, no compression, request and response as opaque
protobuf bytes.  :func:`call` sends the request and returns the one response message, or raises
:class:`GrpcError`.  Every read and write shares one deadline, so a stuck peer cannot hang it.

Response headers and trailers are never HPACK-decoded (that would need Huffman and the dynamic
table), so ``grpc-status`` is not read.  What stands in for it, and errs towards an error:

* a *trailers-only* answer (the first HEADERS frame ends the stream: how gRPC reports every
  failed call) is an error -- never an empty message, which is five bytes of framing;
* the answer must be exactly one complete message followed by trailers; a stream that is reset,
  ended by DATA without trailers, or a connection closed mid-stream is an error.

A unary server sends no message with a failing status (grpc-go drops the response of a handler
that returns an error), so an answer that passes these checks was a successful call.
"""

from __future__ import annotations

import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7, 0x8
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8
SETTINGS_ENABLE_PUSH, SETTINGS_INITIAL_WINDOW_SIZE = 0x2, 0x4
MAX_WINDOW = 0x7FFFFFFF
MAX_RESPONSE = 16 << 20
STREAM = 1


class GrpcError(RuntimeError):
    """The call could not be made, or did not end with exactly one message and trailers."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
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


def request_headers(method: bytes) -> bytes:
    """HPACK block: :method POST, :scheme http (static table), the rest literal, never indexed."""
    block = b"\x83\x86"  # :method POST, :scheme http
    block += _hpack_int(4, 4, 0) + _hpack_str(method)  # :path (static name 4)
    block += _hpack_int(1, 4, 0) + _hpack_str(b"localhost")  # :authority (static name 1)
    for name, value in ((b"content-type", b"application/grpc"), (b"te", b"trailers")):
        block += b"\x00" + _hpack_str(name) + _hpack_str(value)
    return block


def call(socket_path: str, method: bytes, request: bytes, timeout: float) -> bytes:
    """The response message of unary ``method`` (``/package.Service/Method``) on ``socket_path``."""
    deadline = time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
            settings = struct.pack(">HI", SETTINGS_ENABLE_PUSH, 0) + struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW)
            sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings)
                         + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - 65535))  # the connection's
                         + frame(HEADERS, END_HEADERS, STREAM, request_headers(method))
                         + frame(DATA, END_STREAM, STREAM, b"\x00" + struct.pack(">I", len(request)) + request))
            body = _read_response(sock, deadline)
        except OSError as exc:  # socket.timeout included
            raise GrpcError(str(exc) or type(exc).__name__) from None
    finally:
        sock.close()
    if len(body) < 5:
        raise GrpcError("incomplete gRPC message")
    compressed, length = body[0], struct.unpack(">I", body[1:5])[0]
    if compressed or len(body) != 5 + length:
        raise GrpcError("unexpected gRPC message framing (compressed, truncated or more than one message)")
    return body[5:]


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    """An acknowledgement: if the peer is gone, reading what it sent before says more than EPIPE."""
    try:
        sock.sendall(data)
    except OSError:
        pass


def _read_response(sock: socket.socket, deadline: float) -> bytes:
    """The DATA bytes of the stream up to its trailers; answers SETTINGS and PING on the way."""
    buf, body = b"", bytearray()
    headers_seen = False
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise GrpcError("no complete answer in time")
            sock.settimeout(remaining)
            chunk = sock.recv(65536)
            if not chunk:
                raise GrpcError("the peer closed the connection before the call ended")
            buf += chunk
            if len(buf) > MAX_RESPONSE:
                raise GrpcError("answer too large")
        length = int.from_bytes(buf[:3], "big")
        kind, flags, stream = buf[3], buf[4], struct.unpack(">I", buf[5:9])[0] & MAX_WINDOW
        payload, buf = buf[9:9 + length], buf[9 + length:]
        if kind == SETTINGS and not flags & ACK:
            _send_quietly(sock, frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            _send_quietly(sock, frame(PING, ACK, 0, payload))
        elif kind == GOAWAY or (kind == RST_STREAM and stream == STREAM):
            raise GrpcError("the peer reset the call")
        elif kind == HEADERS and stream == STREAM:
            if flags & END_STREAM:
                if not headers_seen:
                    raise GrpcError("the call failed (a trailers-only gRPC answer: an error status)")
                return bytes(body)  # trailers: the call is over
            headers_seen = True
        elif kind == DATA and stream == STREAM:
            if not headers_seen:
                raise GrpcError("DATA before the response headers")
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]] if payload else b""
            body += payload
            if flags & END_STREAM:
                raise GrpcError("the stream ended without trailers (no gRPC status)")
