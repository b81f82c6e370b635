"""A private mount namespace inside the node's network namespace, held open by one process.

Runtimes write to fixed places (containerd 1.6 puts shim sockets under ``/run/containerd/s``
whatever its config says; pod netns files go to ``/run/netns``; libcni caches to
``/var/lib/cni``; podman locks in ``/dev/shm``), and so do our plugins (host-local's
``/var/lib/cni/networks``, tuning's ``/run/cni/tuning``).  Each run therefore gets its own mount
namespace with a tmpfs over each of those directories, so nothing of a run is visible to the
machine or to another run, and everything vanishes when the namespace does.

``ip netns exec`` is avoided on purpose: it remounts ``/sys`` and the cgroup mounts runc needs go
with it.  The holder enters the node's netns with ``nsenter`` and unshares a mount namespace with
slave propagation (host mounts still propagate in, nothing propagates out).  It is a ``sleep``
that outlives containerd, so containerd can be killed and started again in the very same mount
and network namespaces; every step that must see those mounts enters them with ``nsenter``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Optional

PRIVATE_DIRS = ("/var/lib/cni", "/var/lib/containerd", "/var/lib/containers", "/var/lib/cnichain", "/run/containerd", "/run/netns",
                "/run/cni", "/run/cnichain", "/run/libpod", "/run/containers", "/dev/shm")


class Holder:
    """The holder process and helpers to run commands inside its mount + network namespaces."""

    def __init__(self, node_netns: str):
        self.node_netns = node_netns
        self.proc: Optional[subprocess.Popen] = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start the holder and cover every runtime/plugin state directory with a fresh tmpfs."""
        mine = os.readlink("/proc/self/ns/mnt")
        self.proc = subprocess.Popen(
            ["nsenter", f"--net={self.node_netns}", "--", "unshare", "--mount", "--propagation", "slave", "--",
             "sleep", "infinity"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 10
        while True:  # bounded: until the exec'd sleep is in its own mount namespace
            if self._entered(mine):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the mount namespace holder did not start")
            time.sleep(0.01)
        for path in PRIVATE_DIRS:
            # The mount point must exist in the shared filesystem; an empty directory is all that
            # can be left behind there (the tmpfs itself lives only in this namespace).
            os.makedirs(path, exist_ok=True)
            mode = "1777" if path == "/dev/shm" else "0755"
            self.run(["mount", "-t", "tmpfs", "-o", f"mode={mode}", "tmpfs", path])

    def _entered(self, mine: str) -> bool:
        """True once the holder runs ``sleep`` in a mount namespace other than ours."""
        try:
            with open(f"/proc/{self.pid}/comm") as fh:
                comm = fh.read().strip()
            return comm == "sleep" and os.readlink(f"/proc/{self.pid}/ns/mnt") != mine
        except OSError:
            return False

    def argv(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed to run inside the holder's mount and network namespaces."""
        return ["nsenter", "-t", str(self.pid), "-m", "-n", "--", *argv]

    def run(self, argv: list[str], check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(argv), capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{argv} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.argv(argv), **kw)

    def mount_ns(self) -> str:
        return os.readlink(f"/proc/{self.pid}/ns/mnt")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
