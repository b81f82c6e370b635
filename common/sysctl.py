"""Reading and writing sysctls by key, in the calling thread's network namespace.

Keys are validated so a value from a pod spec can never name a file outside ``/proc/sys/net``.
"""

from __future__ import annotations

import os

from . import kerneltime
from .errors import config_error

PROC_SYS = "/proc/sys"


def key_to_path(key: str, ifname: str = "") -> str:
    """``net.ipv4.conf.IFNAME.rp_filter`` -> ``/proc/sys/net/ipv4/conf/eth0/rp_filter``.

    Dots become slashes first and only then the first ``IFNAME`` is replaced, so interface names
    with dots (``eth0.100``) work.  A key with ``/`` style separators is accepted as the reference
    does.  Anything that would leave ``/proc/sys/net`` is refused.
    """
    rel = key.replace(".", "/")
    if ifname and "IFNAME" in rel:
        rel = rel.replace("IFNAME", ifname, 1)
    segments = rel.split("/")
    if (
        not key
        or "\0" in key
        or segments[0] != "net"
        or len(segments) < 2
        or any(s in ("", ".", "..") for s in segments)
    ):
        raise config_error(f'invalid net sysctl key: "{key}"')
    return os.path.join(PROC_SYS, *segments)


def path_for_interface(template: str, ifname: str) -> str:
    """A sysctl path for a kernel-provided interface name (``net/ipv4/conf/%s/...``)."""
    if "/" in ifname or ifname in ("", ".", ".."):
        raise config_error(f"Interface name ({ifname}) contains an invalid character /")
    return os.path.join(PROC_SYS, template % ifname)


def read(path: str) -> str:
    if kerneltime.spans is not None:
        return kerneltime.timed("sysctl", _read)(path)
    return _read(path)


def write(path: str, value: str) -> None:
    if kerneltime.spans is not None:
        return kerneltime.timed("sysctl", _write)(path, value)
    _write(path, value)


def _read(path: str) -> str:
    with open(path, "r", encoding="ascii") as fh:
        return fh.read().rstrip("\n")


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def ensure(path: str, value: str) -> None:
    """Write only when the value differs (sysctl writes can be slow and log in the kernel)."""
    try:
        if read(path) == value:
            return
    except OSError:
        pass
    write(path, value)
