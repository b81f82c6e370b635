"""Replacing a file so that a reader sees the old bytes or the new ones, never a mix.

The bytes go to a new sibling (same directory, so the rename cannot cross a filesystem), created
exclusively with its final mode whatever the umask; then one ``rename(2)`` puts it in place.  A
writer killed half-way leaves only the sibling, under a name the directory's readers skip.  By
default the temporary name is ``.<name>.tmp-<pid>-<random>``: hidden, and never ending in
``.conf``, ``.conflist`` or ``.json`` (runtimes load any such file they see in a conf dir).
Callers whose directory is swept of leftovers pass the prefix their sweeper knows.

``durable`` adds what a power loss needs: the file is fsynced before the rename and the directory
after it.  State that dies with the node's namespaces anyway skips it (an fsync costs milliseconds
on a disk-backed /var/lib); what an installer leaves for the next boot keeps it.

The mode defaults to 0600: plugin and agent state is root's alone.  Only ``os`` is imported, so
a plugin pays nothing for it on its exec path.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Optional


def default_temp_prefix(path: str) -> str:
    """The start of every default temporary name for ``path`` (``.<name>.tmp-``): what a caller
    sweeping the siblings a killed writer left looks for."""
    return f".{os.path.basename(path)}.tmp-"


def temp_sibling(path: str, prefix: Optional[str] = None) -> str:
    """A fresh temporary name next to ``path``: ``prefix`` (default :func:`default_temp_prefix`),
    then the process ID and 8 random hex digits."""
    head = default_temp_prefix(path) if prefix is None else prefix
    return os.path.join(os.path.dirname(path), f"{head}{os.getpid()}-{os.urandom(4).hex()}")


def write_new(path: str, data: bytes, mode: int = 0o600, durable: bool = False) -> None:
    """Create ``path`` exclusively (no symlink followed, FileExistsError when it exists) holding
    ``data`` with ``mode``; removed again if the write fails."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, mode)  # exactly the mode asked for: the umask neither widens nor narrows it
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _unlink_quiet(path)
        raise


def write_file(path: str, data: bytes, mode: int = 0o600, *, durable: bool = False,
               temp_prefix: Optional[str] = None) -> None:
    """Atomically make ``path`` hold ``data`` with ``mode`` (see the module docstring); the
    temporary sibling is gone whatever happens.  Raises OSError."""
    tmp = temp_sibling(path, temp_prefix)
    write_new(tmp, data, mode, durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quiet(tmp)
        raise
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` (a rename into it) survive a power loss."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
