"""The agent's side of the wire format: pull frames out of a buffer, validate requests, build replies.

The framing itself (header, REQUEST encoding, RESULT encoding and decoding, message kinds) is owned
by :mod:`cnichain.common.shim`, the import-light module every plugin exec loads first; the agent
imports it rather than keeping a second copy, so the two sides cannot drift.  What lives here is
what only the agent needs: decoding a REQUEST with every bound checked before the contents are
trusted (the peer is root, but a confused or buggy caller must still not crash or mislead the
agent), and the few frames the agent sends that carry no plugin output.

Everything here is pure: bytes in, values or bytes out.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import Container, Optional

from cnichain.common import shim
from cnichain.common.errors import CniError, Code

MAX_REQUEST = 4 << 20  # a network config with a large prevResult is tens of kB
MAX_ENV_ENTRIES = 512
MAX_TYPE_LEN = 64
MAX_REFUSAL = 1024
# The REQUEST payload's fixed part, as shim.encode_request writes it: netns device (u64), netns
# inode (u64), umask (u32), then the lengths of the type (u16), environment (u32) and stdin (u32).
REQUEST_FIXED = struct.Struct("!QQIHII")

_ENV_KEY = re.compile(rb"^[A-Za-z_][A-Za-z0-9_]*$")
_PLUGIN_TYPE = re.compile(r"[a-z0-9][a-z0-9._\-]*")
_CID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")


class RequestError(ValueError):
    """A request that is malformed or hostile: answered with a CNI error, never run."""


class Refusal(Exception):
    """A request the agent will not serve; the shim falls back to the cold path."""


@dataclass
class AgentRequest:
    plugin_type: str
    netns_id: tuple[int, int]
    umask: int
    env: dict[str, str]
    stdin: bytes

    @property
    def command(self) -> str:
        return self.env.get("CNI_COMMAND", "")

    @property
    def container_id(self) -> str:
        """The container ID fit for a log line: pod specs choose it, so a bad one is never echoed."""
        cid = self.env.get("CNI_CONTAINERID", "")
        return cid if _CID.match(cid) else ("-" if not cid else "<invalid>")


def take_frame(buf: bytearray, max_request: int = MAX_REQUEST) -> Optional[tuple[int, int, bytes]]:
    """Remove one complete message from the front of ``buf``: (version, kind, payload), or None.

    None means "not all there yet".  A length over ``max_request`` is refused from the header alone,
    before the agent buffers that much; bytes that are not our header raise ValueError.
    """
    if len(buf) < shim.HEADER_SIZE:
        return None
    version, kind, length = shim.parse_header(bytes(buf[: shim.HEADER_SIZE]))
    if length > max_request:
        raise RequestError(f"request of {length} bytes exceeds the limit of {max_request}")
    if len(buf) < shim.HEADER_SIZE + length:
        return None
    payload = bytes(buf[shim.HEADER_SIZE : shim.HEADER_SIZE + length])
    del buf[: shim.HEADER_SIZE + length]
    return version, kind, payload


def decode_request(payload: bytes, known_types: Container[str]) -> AgentRequest:
    """Parse and validate a REQUEST payload (bounds first, then contents).

    A plugin type this agent does not serve is a :class:`Refusal` (the shim runs it cold, which is
    exactly right for a plugin installed after the agent started); anything malformed is a
    :class:`RequestError`.
    """
    if len(payload) < REQUEST_FIXED.size:
        raise RequestError("request too short")
    dev, ino, umask, n_type, n_env, n_stdin = REQUEST_FIXED.unpack_from(payload)
    if REQUEST_FIXED.size + n_type + n_env + n_stdin != len(payload):
        raise RequestError("request field lengths do not add up")
    if not 0 < n_type <= MAX_TYPE_LEN:
        raise RequestError("plugin type missing or too long")
    if umask > 0o777:
        raise RequestError("invalid umask")
    pos = REQUEST_FIXED.size
    raw_type = payload[pos : pos + n_type]
    pos += n_type
    env_block = payload[pos : pos + n_env]
    pos += n_env
    stdin = payload[pos:]
    try:
        plugin_type = raw_type.decode("ascii")
    except UnicodeDecodeError:
        raise RequestError("plugin type is not ASCII") from None
    if not _PLUGIN_TYPE.fullmatch(plugin_type):
        raise RequestError("invalid plugin type")
    if plugin_type not in known_types:
        raise Refusal(f"plugin type {plugin_type!r} is not served by this agent")
    return AgentRequest(plugin_type, (dev, ino), umask, _decode_env(env_block), stdin)


def _decode_env(block: bytes) -> dict[str, str]:
    env: dict[str, str] = {}
    if not block:
        return env
    if not block.endswith(b"\0"):
        raise RequestError("environment block is not terminated")
    records = block[:-1].split(b"\0")
    if len(records) > MAX_ENV_ENTRIES:
        raise RequestError("too many environment variables")
    for record in records:
        key, sep, value = record.partition(b"=")
        if not sep or not _ENV_KEY.match(key):
            raise RequestError("invalid environment record")
        env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def ack(limit_seconds: float) -> bytes:
    """ACK: nothing has run yet; carries the per-request limit so the shim knows how long to wait."""
    return shim.header(shim.ACK, 4) + int(limit_seconds * 1000).to_bytes(4, "big")


def refusal(reason: str) -> bytes:
    """REFUSED with a (truncated) reason: the shim runs the request cold."""
    data = reason.encode("utf-8", "replace")[:MAX_REFUSAL]
    return shim.header(shim.REFUSED, len(data)) + data


def error_result(msg: str, details: str = "", code: int = Code.INTERNAL) -> bytes:
    """A RESULT frame carrying a CNI error, formatted exactly as the skeleton prints errors."""
    from cnichain.common.skel import error_json

    out = (error_json(CniError(code, msg, details)) + "\n").encode()
    return shim.encode_result(1, out, b"")


def output_frame(code: int, stdout: str, stderr: str) -> bytes:
    """A RESULT frame from a dispatch's exit code and captured text streams, bytes kept exactly."""
    return shim.encode_result(code, stdout.encode("utf-8", "surrogateescape"),
                              stderr.encode("utf-8", "surrogateescape"))


def read_result(data: bytes) -> Optional[tuple[int, bytes, bytes]]:
    """(code, stdout, stderr) from one whole RESULT frame, or None when ``data`` is not one."""
    try:
        _version, kind, _length = shim.parse_header(data[: shim.HEADER_SIZE])
        if kind == shim.RESULT:
            return shim.decode_result(data[shim.HEADER_SIZE :])
    except ValueError:
        pass
    return None

