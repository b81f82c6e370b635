"""A throwaway memory (and CPU) cgroup for a process under test: the limit a DaemonSet would set.

Tests and the bench start the agent inside one (its workers, forked later, are charged to it too)
to check what the issue's numbers are about: the peak it reached, how many processes the kernel's
OOM killer took, what it charges now.  Works on cgroup v1 (the ``memory`` and ``cpu`` controllers'
own hierarchies) and v2 (one directory under the unified mount).  Removed on exit, after killing
whatever is still inside: a test's cleanup never leaves a cgroup behind.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Optional

ROOT = "/sys/fs/cgroup"
PREFIX = "cnichain-test-"


def is_v2() -> bool:
    """The unified hierarchy is mounted at the root (no per-controller directories)."""
    return os.path.isfile(os.path.join(ROOT, "cgroup.controllers"))


def _write(path: str, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


class Unreadable(RuntimeError):
    """A cgroup file a reading needs is missing, unreadable or not what the kernel writes there:
    a number made up in its place (0) would let a check pass without measuring anything."""


def _read(path: str) -> str:
    """The file's text, or "" when it is gone (only :meth:`MemCgroup.pids` and cleanup use this)."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _strict(path: str) -> str:
    """The file's text; :class:`Unreadable` when it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read()
    except OSError as exc:
        raise Unreadable(f"cannot read {path}: {exc}") from exc


def _number(path: str) -> int:
    value = _strict(path).strip()
    if not value.isdigit():
        raise Unreadable(f"{path} holds {value[:40]!r}, not a byte count")
    return int(value)


def _keyed(path: str, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file; :class:`Unreadable` when the key is absent."""
    for line in _strict(path).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    raise Unreadable(f"{path} has no {key!r} line")


class MemCgroup:
    """One cgroup with ``limit`` bytes of memory (swap too, where that is settable) and, when
    ``cpus`` is given, a CFS quota of that many CPUs."""

    def __init__(self, limit: int, cpus: Optional[float] = None, name: str = "") -> None:
        self.name = name or f"{_own_prefix()}{uuid.uuid4().hex[:10]}"
        self.v2 = is_v2()
        if self.v2:
            self.memory = self.cpu = os.path.join(ROOT, self.name)
            os.mkdir(self.memory)
            _write(os.path.join(self.memory, "memory.max"), str(limit))
            if os.path.exists(os.path.join(self.memory, "memory.swap.max")):
                _write(os.path.join(self.memory, "memory.swap.max"), "0")
            if cpus:
                _write(os.path.join(self.cpu, "cpu.max"), f"{int(cpus * 100000)} 100000")
            self.dirs = [self.memory]
        else:
            self.memory = os.path.join(ROOT, "memory", self.name)
            os.mkdir(self.memory)
            _write(os.path.join(self.memory, "memory.limit_in_bytes"), str(limit))
            memsw = os.path.join(self.memory, "memory.memsw.limit_in_bytes")
            if os.path.exists(memsw):
                try:
                    _write(memsw, str(limit))
                except OSError:
                    pass
            self.dirs = [self.memory]
            self.cpu = ""
            if cpus:
                for controller in ("cpu,cpuacct", "cpu"):
                    if os.path.isdir(os.path.join(ROOT, controller)):
                        self.cpu = os.path.join(ROOT, controller, self.name)
                        break
                if self.cpu:
                    os.mkdir(self.cpu)
                    _write(os.path.join(self.cpu, "cpu.cfs_period_us"), "100000")
                    _write(os.path.join(self.cpu, "cpu.cfs_quota_us"), str(int(cpus * 100000)))
                    self.dirs.append(self.cpu)
        self.limit = limit

    def join(self, pid: int = 0) -> None:
        """Move ``pid`` (0: the calling process) in; what a ``preexec_fn`` calls in the child."""
        for d in self.dirs:
            _write(os.path.join(d, "cgroup.procs"), str(pid or os.getpid()))

    def usage(self) -> int:
        """What the cgroup is charged now; :class:`Unreadable` when the kernel does not say."""
        name = "memory.current" if self.v2 else "memory.usage_in_bytes"
        return _number(os.path.join(self.memory, name))

    def peak(self) -> int:
        """The most the cgroup was charged since it was made (or the last :meth:`reset_peak`);
        :class:`Unreadable` on a kernel without the file, never a made-up 0."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return _number(os.path.join(self.memory, name))

    def reset_peak(self) -> bool:
        """Start the peak over (v1: writing 0; v2 kernels with a writable memory.peak); False when
        this kernel cannot, and :meth:`peak` stays the peak since the cgroup was made."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            _write(os.path.join(self.memory, name), "0")
            return True
        except OSError:
            return False

    def oom_kills(self) -> int:
        """Processes of this cgroup the OOM killer took; :class:`Unreadable` when the kernel's
        counter cannot be read (an unread counter is not "none")."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        return _keyed(os.path.join(self.memory, name), "oom_kill")

    def pids(self) -> list[int]:
        return [int(p) for p in _read(os.path.join(self.memory, "cgroup.procs")).split() if p.isdigit()]

    def close(self, timeout: float = 20.0) -> None:
        """Kill what is left inside, wait for it to go, remove the directories."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for d in reversed(self.dirs):
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)

    def __enter__(self) -> "MemCgroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _own_prefix() -> str:
    """The name prefix of the cgroups this process makes: another process's (a test suite running
    alongside) are never taken for our leftovers."""
    return f"{PREFIX}{os.getpid()}-"


def leftover_cgroups() -> list[str]:
    """Test cgroups this process made that still exist (a cleanup that failed)."""
    roots = [ROOT] if is_v2() else [os.path.join(ROOT, "memory"), os.path.join(ROOT, "cpu,cpuacct")]
    out = []
    for root in roots:
        try:
            out += [os.path.join(root, n) for n in os.listdir(root) if n.startswith(_own_prefix())]
        except OSError:
            pass
    return out
