"""The native shim as the installer sees it: where the built binary is, and its baked configuration.

``shim/cnichain-shim.c`` is built once (``shim/build.sh``, run by ``./run``) into one static
executable that ships inside the package (``cnichain/shim/cnichain-shim``).  It is generic until
the installer writes a configuration block into each installed copy: the plugin type it forwards
as, the agent socket it tries by default, and the absolute path of the Python launcher it execs for
the cold path.  The block is a fixed-size ``struct shim_config`` found by its magic; the layout
here and in the C source must stay in step (tests/unit/test_native_shim_config.py checks both).

Pure apart from :func:`built_binary`, which looks at the file system.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple, Optional

MAGIC = b"CNICHAIN-SHIM-CONFIG/1"
# (field, size) in the order of struct shim_config; every field is NUL-terminated inside its size.
FIELDS = (("magic", 32), ("type", 64), ("socket", 128), ("fallback", 512))
BLOCK_SIZE = sum(size for _name, size in FIELDS)
# A unix socket path must fit sun_path (108 bytes) with its NUL, as CPython and the C shim require.
MAX_SOCKET = 107
COLD_DIR = ".cnichain-cold"  # beside the executables: the Python launchers the shims fall back to
_TYPE = re.compile(rb"[a-z0-9][a-z0-9._\-]*")


class ShimConfig(NamedTuple):
    plugin_type: str
    socket: str
    fallback: str


def built_binary() -> Optional[str]:
    """The packaged native shim, or None when it was not built (no compiler where ./run ran)."""
    import cnichain.common

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(cnichain.common.__file__)))
    path = os.path.join(pkg, "shim", "cnichain-shim")
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return None
    return path if head == b"\x7fELF" else None


def cold_launcher_path(bin_dir: str, plugin_type: str) -> str:
    """Where the installer puts the cold Python launcher of ``plugin_type`` for the shim to exec."""
    return os.path.join(os.path.abspath(bin_dir), COLD_DIR, plugin_type)


def _block_offset(binary: bytes) -> int:
    offset = binary.find(MAGIC + b"\0")
    if offset < 0 or binary.find(MAGIC + b"\0", offset + 1) >= 0:
        raise ValueError("not a cnichain native shim (configuration block missing or ambiguous)")
    if offset + BLOCK_SIZE > len(binary):
        raise ValueError("truncated configuration block")
    return offset


def configure(binary: bytes, config: ShimConfig) -> bytes:
    """A copy of the generic ``binary`` with ``config`` baked in; ValueError when it cannot be."""
    values = {
        "magic": MAGIC,
        "type": config.plugin_type.encode("ascii"),
        "socket": os.fsencode(config.socket),
        "fallback": os.fsencode(config.fallback),
    }
    if not _TYPE.fullmatch(values["type"]) or len(values["type"]) >= 64:
        raise ValueError(f"invalid plugin type {config.plugin_type!r}")
    if not values["socket"] or len(values["socket"]) > MAX_SOCKET or b"\0" in values["socket"]:
        raise ValueError(f"agent socket path must be 1..{MAX_SOCKET} bytes: {config.socket!r}")
    if not os.path.isabs(config.fallback) or b"\0" in values["fallback"]:
        raise ValueError(f"the cold launcher path must be absolute: {config.fallback!r}")
    block = b""
    for name, size in FIELDS:
        value = values[name]
        if len(value) >= size:
            raise ValueError(f"{name} does not fit the shim's {size}-byte field")
        block += value + b"\0" * (size - len(value))
    offset = _block_offset(binary)
    return binary[:offset] + block + binary[offset + BLOCK_SIZE :]


def read_config(binary: bytes) -> Optional[ShimConfig]:
    """The configuration baked into an installed shim, or None (not a shim, or not configured)."""
    try:
        offset = _block_offset(binary)
    except ValueError:
        return None
    values: dict[str, bytes] = {}
    pos = offset
    for name, size in FIELDS:
        raw = binary[pos : pos + size]
        values[name] = raw.split(b"\0", 1)[0]
        pos += size
    if not _TYPE.fullmatch(values["type"]) or not values["fallback"].startswith(b"/"):
        return None
    return ShimConfig(values["type"].decode("ascii"), os.fsdecode(values["socket"]), os.fsdecode(values["fallback"]))
