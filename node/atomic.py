"""Replacing files on a live node so that a reader sees the old bytes or the new, never a mix.

A runtime may exec a plugin or read ``/etc/cni/net.d`` at any moment, and a plugin that is running
has its file open (writing over it fails with "text file busy" or corrupts it).  So every file is
written by :func:`cnichain.common.atomic.write_file` (a temporary sibling, fsynced, renamed over
the old one, the directory fsynced so the rename survives a crash); symlinks and version
directories are swapped the same way here.  Temporary names start with a dot and never end in
``.conf``, ``.conflist`` or ``.json``: containerd and CRI-O load any such file they see in the
conf dir.  A byte-identical file is left alone (no rename, no inotify event).
"""

from __future__ import annotations

import os
import shutil
from typing import Optional

from cnichain.common import atomic

CONF_SUFFIXES = (".conf", ".conflist", ".json")
TEMP_MARK = ".cnichain-tmp-"


def temp_name(path: str) -> str:
    """A sibling temp name that no runtime treats as a network config."""
    d, base = os.path.split(path)
    name = os.path.join(d, f".{base}{TEMP_MARK}{os.getpid()}")
    assert not name.endswith(CONF_SUFFIXES)
    return name


def read_bytes(path: str) -> Optional[bytes]:
    """The file's bytes, or None when it does not exist or is not a regular file."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def write_file(path: str, data: bytes, mode: int) -> bool:
    """Atomically and durably make ``path`` hold ``data`` with ``mode``; False when it already
    did (skipped)."""
    if read_bytes(path) == data and (os.stat(path).st_mode & 0o7777) == mode:
        return False
    atomic.write_file(path, data, mode, durable=True, temp_prefix=f".{os.path.basename(path)}{TEMP_MARK}")
    return True


def switch_symlink(link: str, target: str) -> Optional[str]:
    """Point ``link`` at ``target`` with one rename; returns the previous target (None if none)."""
    try:
        previous: Optional[str] = os.readlink(link)
    except OSError:
        previous = None
    if previous == target:
        return previous
    tmp = temp_name(link)
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, link)
    atomic.fsync_dir(os.path.dirname(link))
    return previous


def copy_tree(src: str, dst: str) -> bool:
    """Copy directory ``src`` to a new directory ``dst`` via a staging sibling and one rename.

    Returns False when ``dst`` already exists (a version directory is never rewritten in place;
    its name is the hash of its content).  Symlinks are copied as symlinks.
    """
    if os.path.isdir(dst):
        return False
    parent = os.path.dirname(dst)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    staging = temp_name(dst)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        shutil.copytree(src, staging, symlinks=True)
        os.sync()  # thousands of files: one sync instead of an fsync each
        os.rename(staging, dst)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    atomic.fsync_dir(parent)
    return True
