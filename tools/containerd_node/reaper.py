"""Finding and killing every process a run started, then removing its cgroups.

A runtime's processes outlive the client that started them by design (containerd shims, conmon,
pause and workload processes), so teardown cannot rely on ``Popen`` handles.  A run owns: every
process in its holder's mount namespace or in its node network namespace (containerd, shims,
conmon, runc), and every process in its cgroup parent (pods and containers, which live in their
own namespaces).  Both sets are unique to the run, so nothing else on the machine is touched.
"""

from __future__ import annotations

import os
import signal
import time

CGROUP_ROOT = "/sys/fs/cgroup"


def _ns(pid: str, kind: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return ""


def _in_cgroup(pid: str, parent: str) -> bool:
    try:
        with open(f"/proc/{pid}/cgroup") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return False
    prefix = parent.rstrip("/") + "/"
    return any(line.split(":", 2)[-1].startswith(prefix) or line.split(":", 2)[-1] == parent for line in lines)


def owned_pids(mount_ns: str, net_ns: str, cgroup_parent: str) -> list[int]:
    """Pids of the run: in its mount or node network namespace, or below its cgroup parent."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        if (mount_ns and _ns(entry, "mnt") == mount_ns) or (net_ns and _ns(entry, "net") == net_ns) \
                or (cgroup_parent and _in_cgroup(entry, cgroup_parent)):
            found.append(int(entry))
    return found


def kill_all(mount_ns: str, net_ns: str, cgroup_parent: str, timeout: float = 10.0) -> list[int]:
    """SIGKILL the run's processes until none is left (bounded); return the pids still alive.

    Zombies have no namespaces to read, so our own unreaped children never count as alive.
    """
    deadline = time.monotonic() + timeout
    pids = owned_pids(mount_ns, net_ns, cgroup_parent)
    while pids and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        pids = owned_pids(mount_ns, net_ns, cgroup_parent)
    return pids


def remove_cgroups(parent: str, timeout: float = 10.0) -> list[str]:
    """Remove ``parent`` and its descendants in every mounted hierarchy; return what remains."""
    roots = [CGROUP_ROOT] + [os.path.join(CGROUP_ROOT, d) for d in sorted(os.listdir(CGROUP_ROOT))]
    targets = [os.path.join(r, parent.lstrip("/")) for r in roots if os.path.isdir(os.path.join(r, parent.lstrip("/")))]
    deadline = time.monotonic() + timeout
    while True:
        left = []
        for top in targets:
            if not os.path.isdir(top):
                continue
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    left.append(dirpath)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
