"""Run one command in an empty root: a private mount namespace, chroot into a directory that holds
only what the test bind-mounts there (the bundled tree, /dev/null, /proc, netns files).

    python tests/emptyroot.py SPEC_JSON

SPEC: {"root": dir, "binds": [[host_path, path_in_root, read_only], ...], "proc": bool,
       "netns": host netns path or null (entered before the chroot), "argv": [...], "env": {...}}

Everything mounted here lives in this process's own mount namespace and disappears with it, so
the caller only removes the (then empty of mounts) root directory.  Test helper; never shipped.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Optional

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int) -> None:
    _check(_libc.mount(src.encode() if src else None, dst.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), None), f"mount {src} {dst}")


def _mount_point(path: str, like: str) -> None:
    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.exists(path):
            open(path, "a").close()


def main() -> None:
    spec = json.loads(sys.argv[1])
    root = os.path.abspath(spec["root"])
    if spec.get("netns"):
        fd = os.open(spec["netns"], os.O_RDONLY)
        _check(_libc.setns(fd, CLONE_NEWNET), "setns")
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for src, dst, read_only in spec.get("binds", []):
        target = os.path.join(root, dst.lstrip("/"))
        _mount_point(target, src)
        _mount(src, target, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    if spec.get("proc"):
        os.makedirs(os.path.join(root, "proc"), exist_ok=True)
        _mount("proc", os.path.join(root, "proc"), "proc", 0)
    os.chroot(root)
    os.chdir("/")
    argv = spec["argv"]
    os.execve(argv[0], argv, spec.get("env", {}))


def run_in_root(root: str, argv: list[str], binds: list[tuple[str, str, bool]], netns: Optional[str] = None,
                env: Optional[dict] = None, input: bytes = b"", proc: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess:
    """Run ``argv`` chrooted into ``root`` with only ``binds`` (plus /dev/null and /proc) inside."""
    spec = {"root": root, "binds": [["/dev/null", "/dev/null", False], *[list(b) for b in binds]],
            "proc": proc, "netns": netns, "argv": argv, "env": env or {}}
    return subprocess.run([sys.executable, os.path.abspath(__file__), json.dumps(spec)], input=input,
                          capture_output=True, timeout=timeout)


if __name__ == "__main__":
    main()
