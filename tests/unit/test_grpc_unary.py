"""The hand-written unary gRPC call against fake HTTP/2 peers on a unix socket.

The safety property under test: a failed call (a trailers-only answer, which is how gRPC reports
an error status, or a stream cut short) is an error -- :class:`CriError`, and None from the
reconciler's sandbox listing -- never an empty message, which would read as "the runtime lists
no sandbox" and make every pod look unlisted.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from typing import Callable, Iterator

import pytest

from cnichain.podstate import cri, grpc_unary
from cnichain.podstate.grpc_unary import DATA, END_HEADERS, END_STREAM, HEADERS, RST_STREAM, SETTINGS, frame
from cnichain.podstate.sandboxes import CriSandboxes

# Literal header fields without indexing (no Huffman): what a peer may send; the client never decodes them.
RESPONSE_HEADERS = b"\x08\x03200" + b"\x00\x0ccontent-type\x10application/grpc"
OK_TRAILERS = b"\x00\x0bgrpc-status\x010"
ERROR_TRAILERS = b"\x00\x0bgrpc-status\x0214" + b"\x00\x0cgrpc-message\x0bunavailable"


def message(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(body)) + body


def sandbox_list(*ids: str) -> bytes:
    items = b""
    for sandbox_id in ids:
        item = b"\x0a" + bytes([len(sandbox_id)]) + sandbox_id.encode() + b"\x18\x01"  # id, state NOTREADY
        items += b"\x0a" + bytes([len(item)]) + item
    return items


def _read_request(conn: socket.socket) -> None:
    """Consume the client's preface and frames up to its DATA frame that ends stream 1."""
    buf = b""
    while len(buf) < len(grpc_unary.PREFACE):
        chunk = conn.recv(4096)
        assert chunk, "client closed before its preface was complete"
        buf += chunk
    buf = buf[len(grpc_unary.PREFACE):]
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            chunk = conn.recv(4096)
            assert chunk, "client closed before its request was complete"
            buf += chunk
        length, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
        buf = buf[9 + length:]
        if kind == DATA and flags & END_STREAM:
            return


@pytest.fixture
def peer(tmp_path) -> Iterator[Callable[[bytes], str]]:
    """A one-connection fake peer on a unix socket in a temp dir: answers the request with given bytes.

    Like a real server it then keeps the connection until the client closes it, unless ``hang_up``:
    then it closes right after the answer (a runtime that dies or restarts mid-call).
    """
    threads: list[threading.Thread] = []
    socks: list[socket.socket] = []

    def start(answer: bytes, hang_up: bool = False) -> str:
        path = os.path.join(str(tmp_path), f"cri{len(socks)}.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        srv.settimeout(10.0)
        socks.append(srv)

        def serve() -> None:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10.0)
                try:
                    _read_request(conn)
                    conn.sendall(frame(SETTINGS, 0, 0) + answer)
                    while not hang_up and conn.recv(4096):
                        pass
                except OSError:
                    pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return path

    yield start
    for srv in socks:
        srv.close()
    for thread in threads:
        thread.join(timeout=10.0)


def normal(body: bytes) -> bytes:
    return (frame(HEADERS, END_HEADERS, 1, RESPONSE_HEADERS) + frame(DATA, 0, 1, message(body))
            + frame(HEADERS, END_HEADERS | END_STREAM, 1, OK_TRAILERS))


TRAILERS_ONLY = frame(HEADERS, END_HEADERS | END_STREAM, 1, RESPONSE_HEADERS + ERROR_TRAILERS)
HEAD = frame(HEADERS, END_HEADERS, 1, RESPONSE_HEADERS)
GONE = "closed|reset by peer|pipe"  # a hang-up may also meet the client's SETTINGS ACK: RST from the kernel
FAILED_ANSWERS = {  # name: (the answer, then hang up), what the error says
    "trailers-only error status": ((TRAILERS_ONLY, False), "trailers-only"),
    "trailers-only, then hangs up": ((TRAILERS_ONLY, True), "trailers-only"),
    "closed mid-message": ((HEAD + frame(DATA, 0, 1, message(sandbox_list("abc"))[:9]), True), GONE),
    "closed before trailers": ((HEAD + frame(DATA, 0, 1, message(b"")), True), GONE),
    "closed after headers": ((HEAD, True), GONE),
    "closed at once": ((b"", True), GONE),
    "headers and trailers, no message": ((HEAD + frame(HEADERS, END_HEADERS | END_STREAM, 1, ERROR_TRAILERS), False),
                                         "incomplete"),
    "DATA ends the stream, no trailers": ((HEAD + frame(DATA, END_STREAM, 1, message(b"")), False), "without trailers"),
    "stream reset": ((HEAD + frame(RST_STREAM, 0, 1, struct.pack(">I", 2)), False), "reset"),
    "two messages": ((HEAD + frame(DATA, 0, 1, message(b"") + message(b""))
                      + frame(HEADERS, END_HEADERS | END_STREAM, 1, OK_TRAILERS), False), "more than one"),
}


@pytest.mark.parametrize("answer, error", FAILED_ANSWERS.values(), ids=FAILED_ANSWERS.keys())
def test_a_failed_call_is_an_error_never_an_empty_listing(peer, answer, error):
    with pytest.raises(cri.CriError, match=f"CRI ListPodSandbox on .*({error})"):
        cri.list_pod_sandboxes(peer(*answer), timeout=5.0)
    logged: list[str] = []
    assert CriSandboxes(peer(*answer), logged.append, timeout=5.0).listed() is None
    assert len(logged) == 1 and "runtime listing unavailable" in logged[0]


def test_a_trailers_only_status_answer_is_an_error_too(peer):
    with pytest.raises(cri.CriError, match="CRI Status on .*trailers-only"):
        cri.runtime_status(peer(TRAILERS_ONLY), timeout=5.0)


def test_listed_sandboxes_ready_or_not_are_returned(peer):
    logged: list[str] = []
    assert CriSandboxes("unix://" + peer(normal(sandbox_list("abc", "def"))), logged.append).listed() == {"abc", "def"}
    assert logged == []
    assert cri.list_pod_sandboxes(peer(normal(sandbox_list("abc"))), timeout=5.0) == [cri.Sandbox("abc", cri.SANDBOX_NOTREADY)]


def test_an_empty_listing_needs_a_complete_empty_message(peer):
    padded = b"\x02" + message(b"") + b"\0\0"  # pad length 2
    answer = (frame(HEADERS, END_HEADERS, 1, RESPONSE_HEADERS) + frame(DATA, grpc_unary.PADDED, 1, padded)
              + frame(HEADERS, END_HEADERS | END_STREAM, 1, OK_TRAILERS))
    assert CriSandboxes(peer(answer), lambda _: None).listed() == set()


def test_a_silent_runtime_is_bounded_by_the_deadline(tmp_path):
    path = str(tmp_path / "mute.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    try:
        with pytest.raises(cri.CriError, match="in time|timed out"):
            cri.list_pod_sandboxes(path, timeout=0.3)
    finally:
        srv.close()


def test_no_socket_is_none(tmp_path):
    assert CriSandboxes(str(tmp_path / "none.sock"), lambda _: None).listed() is None
