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
from typing import Optional

from cnichain.tools.containerd_node.holder import Holder

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


def teardown(holder: Optional[Holder], net_ns: str, cgroup_parent: str) -> list[int]:
    """Kill every process of a node (its holder's mount namespace, its network namespace, its
    cgroup parent), stop the holder, remove the cgroups; return the pids still alive.

    The mount namespace is pinned while killing: once its last process (the holder) dies, the
    kernel may hand its inode number to a new namespace (every ``ip netns exec`` makes one), and
    a sweep by that number would kill processes that are not the node's.
    """
    mount_ns, pin = "", -1
    if holder is not None and holder.proc is not None and holder.proc.poll() is None:
        try:
            pin = os.open(f"/proc/{holder.pid}/ns/mnt", os.O_RDONLY)
            mount_ns = holder.mount_ns()
        except OSError:
            pass
    try:
        alive = kill_all(mount_ns, net_ns, cgroup_parent)
    finally:
        if pin >= 0:
            os.close(pin)
    if holder is not None:
        holder.stop()
    remove_cgroups(cgroup_parent)
    return alive


def netns_id(path: str) -> str:
    """The ``net:[inode]`` link text of the namespace bound at ``path`` (as /proc/PID/ns/net shows it)."""
    return f"net:[{os.stat(path).st_ino}]"
