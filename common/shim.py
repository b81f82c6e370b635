"""The exec'd side of warm execution: hand one plugin invocation to the node agent, or step aside.

Every installed plugin executable calls :func:`forward` first.  It returns the exit code when the
agent ran the request, or None when the caller must run the plugin in-process (the cold path):
no socket, connection refused, a refusal from the agent (not root, unknown plugin type, busy,
draining, other protocol version) or no answer in time.  Correctness never depends on the agent:
the cold path is the same handler code, so the output is byte-for-byte the same either way.

``shim/cnichain-shim.c`` is the same client as a static executable (what ``cnichain install``
writes as each plugin when it was built; it execs the Python launcher for the cold path).  This
docstring is the specification for both; ``tests/unit/test_shim_protocol.py`` drives both through
the same scenarios; a protocol change goes into both.

This module runs on every plugin exec, before anything else is imported, so it uses only the
built-in ``posix`` and ``sys`` modules and the C ``_socket`` module: ``import socket`` alone costs
~5 ms through ``enum``, and even ``import os`` (~0.6 ms with ``_collections_abc``) is left to the
cold path, which is the only one that needs it.  The environment goes to the agent as the bytes
the process received (``posix.environ``), so no decoding can alter it.

Wire protocol, version 1.  Every message is a 12-byte header -- magic ``CNIA``, version (u8), kind
(u8), two reserved zero bytes, payload length (u32, big-endian) -- then the payload:

- REQUEST (shim -> agent): netns device (u64), netns inode (u64), umask (u32), then the lengths
  (u16 type, u32 env, u32 stdin) and the bytes: the plugin type, the environment as ``K=V\\0``
  records, the network config from stdin.
- ACK (agent -> shim): the agent's per-request time limit in ms (u32).  Nothing has run yet.
- GO (shim -> agent): empty.  From here on the shim waits for the result: the agent has been told
  to do the work, so giving up early could run the plugin twice at once.
- RESULT (agent -> shim): exit code (i32), stdout length (u32), stderr length (u32), the bytes.
  It may also come in place of the ACK: the error for a rejected request, or an answer that needs
  no worker (VERSION); the shim prints it like any other.
- REFUSED (agent -> shim): a reason in UTF-8.  The shim falls back to the cold path.

Semantics when the agent disappears: before GO nothing ran, so falling back is exact.  After GO
the worker process that does the work holds the connection itself and answers even if the agent
is killed; only when the worker dies too does the shim see end-of-stream, and then it runs the
request cold (the agent also closes a connection whose worker the kernel's OOM killer took, to
the same effect).  For DEL, CHECK, GC and STATUS this is a plain retry (they are idempotent).  For
ADD the plugins pick up or undo the half-made state of their own killed run (docs/agent.md, "A
killed worker never fails a pod"), so the cold run succeeds, or fails with the kernel's reason.
"""

import posix
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only, quoted: not even __future__ is imported on the warm path
    from typing import Callable

MAGIC = b"CNIA"
VERSION = 1
HEADER_SIZE = 12
REQUEST, ACK, GO, RESULT, REFUSED = 1, 2, 3, 4, 5

DEFAULT_SOCKET = "/run/cnichain/agent.sock"
ENV_SOCKET = "CNICHAIN_AGENT_SOCKET"
DISABLED = ("", "off", "none", "0")

CONNECT_TIMEOUT = 1.0  # a live agent accepts in microseconds; a full backlog means "go cold"
ACK_TIMEOUT = 3.0  # the agent answers before doing any work; silence means it is stuck
RESULT_GRACE = 10.0  # beyond the agent's own per-request limit (it kills the worker itself)
MAX_RESULT = 64 << 20


def header(kind: int, length: int) -> bytes:
    return MAGIC + bytes((VERSION, kind, 0, 0)) + length.to_bytes(4, "big")


def parse_header(data: bytes) -> tuple[int, int, int]:
    """(version, kind, payload length); ValueError when the bytes are not ours."""
    if len(data) != HEADER_SIZE or data[:4] != MAGIC:
        raise ValueError("bad magic")
    return data[4], data[5], int.from_bytes(data[8:12], "big")


def _fsencode(value) -> bytes:
    """``os.fsencode`` without ``os``: str as the file system encoding with surrogateescape."""
    if isinstance(value, bytes):
        return value
    return value.encode(sys.getfilesystemencoding(), "surrogateescape")


def encode_request(plugin_type: str, env: dict, stdin: bytes, netns: tuple[int, int], umask: int) -> bytes:
    """A REQUEST frame; ``env`` maps str or bytes to str or bytes (bytes are sent unchanged)."""
    kind = plugin_type.encode()
    env_block = b"".join(
        _fsencode(k) + b"=" + _fsencode(v) + b"\0" for k, v in env.items()
    )
    payload = b"".join(
        (
            netns[0].to_bytes(8, "big"),
            netns[1].to_bytes(8, "big"),
            umask.to_bytes(4, "big"),
            len(kind).to_bytes(2, "big"),
            len(env_block).to_bytes(4, "big"),
            len(stdin).to_bytes(4, "big"),
            kind,
            env_block,
            stdin,
        )
    )
    return header(REQUEST, len(payload)) + payload


def encode_result(code: int, stdout: bytes, stderr: bytes) -> bytes:
    payload = code.to_bytes(4, "big", signed=True) + len(stdout).to_bytes(4, "big") + len(stderr).to_bytes(4, "big")
    return header(RESULT, len(payload) + len(stdout) + len(stderr)) + payload + stdout + stderr


def decode_result(payload: bytes) -> tuple[int, bytes, bytes]:
    if len(payload) < 12:
        raise ValueError("short result")
    code = int.from_bytes(payload[:4], "big", signed=True)
    n_out = int.from_bytes(payload[4:8], "big")
    n_err = int.from_bytes(payload[8:12], "big")
    if 12 + n_out + n_err != len(payload):
        raise ValueError("result lengths do not add up")
    return code, payload[12 : 12 + n_out], payload[12 + n_out :]


def _environ() -> dict:
    """The process environment as bytes: ``os.environb`` when ``os`` is loaded (it is then the
    authoritative view, changes included), else the ``posix.environ`` the process started with."""
    os_mod = sys.modules.get("os")
    return os_mod.environb if os_mod is not None else posix.environ


def _getenv(name: str, default: str) -> str:
    value = _environ().get(name.encode())
    return default if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def socket_path(baked: str) -> str:
    """The agent socket to use: ``$CNICHAIN_AGENT_SOCKET`` if set, else the one the installer wrote."""
    path = _getenv(ENV_SOCKET, baked)
    return "" if path.lower() in DISABLED else path


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise EOFError("agent closed the connection")
        got += k
    return bytes(buf)


def _recv_message(sock, timeout: float) -> tuple[int, bytes]:
    sock.settimeout(timeout)
    version, kind, length = parse_header(_recv_exact(sock, HEADER_SIZE))
    if version != VERSION or length > MAX_RESULT:
        raise ValueError("unexpected protocol version or size")
    return kind, _recv_exact(sock, length)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = posix.write(fd, view)
        view = view[n:]


def _replay_stdin(data: bytes) -> None:
    """Hand the already-read config to the cold path, which reads ``sys.stdin.buffer``."""
    import io

    sys.stdin = io.TextIOWrapper(io.BytesIO(data))


def exchange(
    path: str, plugin_type: str, env: dict, read_stdin: "Callable[[], bytes]"
) -> "tuple[tuple[int, bytes, bytes] | None, bytes | None]":
    """Talk to the agent: (exit code, stdin) when it ran the request, (None, stdin) otherwise.

    ``read_stdin`` is called only once the agent accepted the connection, so an absent agent costs
    one failed ``connect`` and leaves stdin untouched.  The second element is what was read (or None
    when nothing was), so the caller can replay it into the cold path.
    """
    import _socket

    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    except OSError:
        return None, None
    try:
        try:
            sock.settimeout(CONNECT_TIMEOUT)
            sock.connect(path)
        except OSError:  # absent, refused, permission, timeout: all mean "run it here"
            return None, None
        try:
            stdin = read_stdin()
        except OSError:
            return None, None  # let the cold path meet (and report) the same read error
        try:
            st = posix.stat("/proc/self/ns/net")
            umask = posix.umask(0o022)
            posix.umask(umask)
            sock.settimeout(ACK_TIMEOUT)
            sock.sendall(encode_request(plugin_type, dict(env), stdin, (st.st_dev, st.st_ino), umask))
            kind, payload = _recv_message(sock, ACK_TIMEOUT)
        except (OSError, ValueError, EOFError, UnicodeError):
            return None, stdin
        if kind == RESULT:  # the agent answered without running anything (a rejected request)
            try:
                return decode_result(payload), stdin
            except ValueError:
                return None, stdin
        if kind != ACK or len(payload) != 4:
            return None, stdin  # REFUSED, or something we do not understand: go cold
        limit = int.from_bytes(payload, "big") / 1000.0
        try:
            sock.sendall(header(GO, 0))
            kind, payload = _recv_message(sock, limit + RESULT_GRACE)
            if kind != RESULT:
                return None, stdin
            return decode_result(payload), stdin
        except (OSError, ValueError, EOFError):
            # The agent and its worker are both gone (or wedged past every limit): run it here,
            # with the retry semantics described in the module docstring.
            return None, stdin
    finally:
        sock.close()


def forward(plugin_type: str, baked_socket: str = DEFAULT_SOCKET) -> int | None:
    """Run this exec's request in the agent and print its answer; None means "run it yourself".

    The answer is written straight to fds 1 and 2 (never through ``sys.stdout``), so a launcher
    may leave with ``posix._exit(code)`` and skip the interpreter's teardown.
    """
    path = socket_path(baked_socket)
    if not path:
        return None

    def read_stdin() -> bytes:
        if _environ().get(b"CNI_COMMAND") == b"VERSION":
            return b""  # the cold path ignores stdin for VERSION; so do we
        return sys.stdin.buffer.read()

    answer, stdin = exchange(path, plugin_type, _environ(), read_stdin)
    if answer is None:
        if stdin is not None:
            _replay_stdin(stdin)
        return None
    code, out, err = answer
    try:
        if out:
            _write_all(1, out)
        if err:
            _write_all(2, err)
    except OSError:
        return 1
    return code
