"""Throwaway network namespaces for the demo, the tests and the benchmarks.

A :class:`Lab` owns a "node" namespace that plays the host, pod namespaces hanging off it, and
optional extra hosts wired to the node with veth pairs.  Every name carries a random run id, and
:meth:`Lab.close` deletes everything it made, so the machine's own namespace is never touched and
a crashed run cannot collide with the next one.  Kernel objects that plugins create (bridges,
veths, IFBs, nftables tables, tc qdiscs) live inside these namespaces and die with them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Callable

NETNS_DIR = "/run/netns"
NETNS_TEARDOWN_SECONDS = 10  # the bound on waiting for the kernel to destroy a deleted namespace


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass
class Lab:
    prefix: str = "cnic"
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    namespaces: list[str] = field(default_factory=list)
    workdir: str = ""

    def __post_init__(self) -> None:
        if not self.workdir:
            self.workdir = tempfile.mkdtemp(prefix=f"{self.prefix}-{self.run_id}-")
        os.chmod(self.workdir, 0o700)
        self.node = self.netns("node")

    # -- namespaces ------------------------------------------------------------------------------
    def name(self, role: str) -> str:
        return f"{self.prefix}-{self.run_id}-{role}"

    def netns(self, role: str) -> str:
        """Create namespace ``role`` with loopback up; return its path."""
        name = self.name(role)
        _ip("netns", "add", name)
        self.namespaces.append(name)
        self.run(name, "ip", "link", "set", "lo", "up")
        return os.path.join(NETNS_DIR, name)

    def prompt_dad(self, ns: str) -> None:
        """Let IPv6 duplicate detection in ``ns`` start at once on the links made there later.

        The kernel waits a random part of ``router_solicitation_delay`` (1 s) before the first
        probe; without it DAD takes its one retransmit time (1 s), which leaves most of a plugin's
        settle budget (the reference's 5 s) to a loaded kernel rather than to chance.
        """
        self.run(ns, "sysctl", "-qw", "net.ipv6.conf.default.router_solicitation_delay=0")

    def delete_netns(self, path_or_name: str) -> None:
        """Delete a namespace as a runtime does, and wait (bounded) until the kernel has destroyed it.

        The kernel destroys a namespace, and the veth pairs in it, only once nothing holds it: a
        warm worker that has just answered may still be inside for a moment on its way home.  Even
        then it destroys it later, from a work queue, and under load that takes a while.  What a
        test checks next ("nothing left on the node") would race with both, so this waits until no
        process is inside or holds it, then until the node-side peers of its veths are gone.
        """
        name = os.path.basename(path_or_name)
        try:
            inode = os.stat(os.path.join(NETNS_DIR, name)).st_ino
        except OSError:
            inode = 0
        peers = self._node_peers(name) if inode and name != os.path.basename(self.node) else set()
        _ip("netns", "del", name, check=False)
        if name in self.namespaces:
            self.namespaces.remove(name)
        deadline = time.monotonic() + NETNS_TEARDOWN_SECONDS
        while inode and _entered(inode) and time.monotonic() < deadline:
            time.sleep(0.02)
        while peers and time.monotonic() < deadline:
            peers &= _veth_pairs(self.run(self.node, "ip", "-j", "-d", "link", "show", check=False).stdout)
            if peers:
                time.sleep(0.02)

    def _node_peers(self, name: str) -> set[tuple[int, int]]:
        """The (node ifindex, peer ifindex) of every veth in ``name`` whose other end is on the node."""
        inside = self.run(name, "ip", "-j", "-d", "link", "show", check=False).stdout
        return {(peer, own) for own, peer in _veth_pairs(inside, peer_elsewhere=True)}

    def run(self, ns: str, *argv: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """Run ``argv`` inside namespace ``ns`` (name or path)."""
        name = os.path.basename(ns)
        return subprocess.run(
            ["ip", "netns", "exec", name, *argv], check=check, capture_output=True, text=True, timeout=timeout, **kw
        )

    def popen(self, ns: str, *argv: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", os.path.basename(ns), *argv], **kw)

    def wire(self, ns: str, ns_addrs: list[str], node_addrs: list[str], role: str) -> str:
        """Connect ``ns`` to the node with a veth pair and addresses on both ends.

        Returns the node-side interface name.
        """
        node_if = f"n{self.run_id}{role[:4]}"[:15]
        peer_if = f"p{self.run_id}{role[:4]}"[:15]
        self.run(self.node, "ip", "link", "add", node_if, "type", "veth", "peer", "name", peer_if,
                 "netns", os.path.basename(ns))
        for addr in node_addrs:
            self.run(self.node, "ip", "addr", "add", addr, "dev", node_if, *(["nodad"] if ":" in addr else []))
        for addr in ns_addrs:
            self.run(ns, "ip", "addr", "add", addr, "dev", peer_if, *(["nodad"] if ":" in addr else []))
        self.run(self.node, "ip", "link", "set", node_if, "up")
        self.run(ns, "ip", "link", "set", peer_if, "up")
        return node_if

    def argv(self, ns: str, *argv: str) -> list[str]:
        """``argv`` prefixed to run inside namespace ``ns`` (name or path)."""
        return ["ip", "netns", "exec", os.path.basename(ns), *argv]

    def wait_listening(self, ns: str, port: int, timeout: float = 10.0) -> None:
        """Wait (bounded) until something listens on TCP ``port`` inside ``ns``."""
        wait_listening(self.argv(ns), port, timeout=timeout)

    def iperf(self, server_ns: str, client_ns: str, server_ip: str, seconds: int = 3, omit: int = 1,
              reverse: bool = False, port: int = 5201) -> float:
        """One bounded iperf3 TCP run between two lab namespaces; the receiver's bits/s."""
        return iperf_rate(self.argv(server_ns), self.argv(client_ns), server_ip, reverse=reverse,
                          seconds=seconds, omit=omit, port=port)

    def path(self, *parts: str) -> str:
        full = os.path.join(self.workdir, *parts)
        os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
        return full

    # -- teardown ------------------------------------------------------------------------------
    def close(self) -> None:
        for name in reversed(list(self.namespaces)):
            _ip("netns", "del", name, check=False)
        self.namespaces.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def isolate_conflist(data: dict, workdir: str) -> dict:
    """A copy of ``data`` whose on-disk state (IPAM dataDir, tuning backups) lives in ``workdir``.

    The demo and the tests run real conflists but must not share ``/var/lib/cni`` with the node.
    """
    import copy

    out = copy.deepcopy(data)
    plugins = out["plugins"] if isinstance(out.get("plugins"), list) else [out]
    for plugin in plugins:
        ipam = plugin.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "host-local":
            ipam["dataDir"] = os.path.join(workdir, "ipam")
        if plugin.get("type") == "tuning":
            plugin["dataDir"] = os.path.join(workdir, "tuning")
    return out


def leftover_namespaces(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix + "-"))
    except OSError:
        return []


# -- traffic between namespaces, named by argv prefixes --------------------------------------------
# A prefix (``ip netns exec NAME``, ``nsenter -t PID -n``) rather than a namespace name, so the
# runtime suite can reach a pod's namespace that only a runtime's private mounts can name.


def wait_listening(prefix: list[str], port: int, proto: str = "tcp", timeout: float = 10.0) -> None:
    """Wait (bounded) until something listens on ``port`` in the namespace ``prefix`` enters."""
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = subprocess.run([*prefix, "ss", flag, f"sport = :{port}"], capture_output=True, text=True, timeout=10)
        if proc.stdout.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {proto} port {port}")


# A flow's endpoints run under SCHED_FIFO where the machine allows it: a reading is of the shaper,
# not of who else wants the CPU.  A sender descheduled for longer than the shaper's queue (10 ms at
# the rate) lets the link idle; on a 2-core machine busy with other work that cost a 10 Mbit/s flow
# 20 % of its goodput through a correct TBF.  The endpoints sleep on their sockets almost all the
# time, so the priority takes nothing from anything else (and the kernel's RT throttling bounds it).
_REALTIME = ["chrt", "--fifo", "20"]
_realtime_ok: list[bool] = []


def realtime() -> list[str]:
    """The argv prefix that runs a flow endpoint at real-time priority; empty where this machine
    refuses it (no ``chrt``, or a cgroup without real-time runtime), asked once."""
    if not _realtime_ok:
        try:
            ok = subprocess.run([*_REALTIME, "true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        _realtime_ok.append(ok)
    return list(_REALTIME) if _realtime_ok[0] else []


def iperf_rate(server: list[str], client: list[str], server_ip: str, reverse: bool = False, seconds: int = 3,
               omit: int = 1, port: int = 5201) -> float:
    """One bounded iperf3 TCP test, both ends at :func:`realtime` priority; the receiver's bits/s.

    The server serves one test and exits (``-1``); ``reverse`` sends from server to client;
    ``omit`` skips the first seconds (a token bucket's initial burst).
    """
    rt = realtime()
    srv = subprocess.Popen([*server, *rt, "iperf3", "-s", "-1", "-B", server_ip, "-p", str(port)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(server, port)
        argv = ["iperf3", "-c", server_ip, "-p", str(port), "-t", str(seconds), "-O", str(omit), "-J",
                "--connect-timeout", "3000"] + (["-R"] if reverse else [])
        proc = subprocess.run([*client, *rt, *argv], capture_output=True, text=True, timeout=seconds + omit + 30)
        data = json.loads(proc.stdout or "{}")
        if "error" in data:
            raise RuntimeError(f"iperf3: {data['error']}")
        return float(data["end"]["sum_received"]["bits_per_second"])
    finally:
        reap(srv)


def reap(proc: subprocess.Popen, timeout: float = 10) -> None:
    """Wait for a one-off server (``iperf3 -1``) to end after its client, killing it if it lingers."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# A loaded machine only ever starves a flow (its sender or receiver descheduled), never speeds it
# up: a reading may fall this far under a shaper's rate, whatever the caller's bound over it.
UNDER_RATE_SLACK = 0.15


def rate_within(measure: Callable[[], float], target: float, tolerance: float = 0.10,
                attempts: int = 3) -> tuple[bool, list[float]]:
    """Call ``measure()`` until a rate is no more than ``tolerance`` over ``target`` and no more
    than ``tolerance`` or :data:`UNDER_RATE_SLACK`, the larger, under it (bounded attempts).

    The machine is shared, so one run can be disturbed (a receiver descheduled across the start
    of the measured window counts bytes sent before it); a shaper that is wrong stays wrong on
    every attempt, so a retry cannot hide a real defect.
    """
    rates: list[float] = []
    for _ in range(attempts):
        rate = measure()
        rates.append(rate)
        if target * (1 - max(tolerance, UNDER_RATE_SLACK)) <= rate <= target * (1 + tolerance):
            return True, rates
    return False, rates


def _veth_pairs(ip_json: str, peer_elsewhere: bool = False) -> set[tuple[int, int]]:
    """(ifindex, peer ifindex) of each veth in ``ip -j -d link show`` output (``link_index`` is
    the peer's ifindex, in the peer's namespace); with ``peer_elsewhere``, only those whose peer
    lies in another namespace.  (A veth whose peer's namespace is being destroyed may lose its
    ``link_netnsid`` before it goes, so the node side is matched by index alone.)"""
    try:
        found = json.loads(ip_json or "[]")
    except ValueError:
        return set()
    return {(link["ifindex"], link["link_index"]) for link in found
            if (link.get("linkinfo") or {}).get("info_kind") == "veth" and "link_index" in link
            and ("link_netnsid" in link or not peer_elsewhere)}


def _entered(inode: int) -> bool:
    """Whether any thread of any process is in the network namespace with this nsfs inode, or
    holds it open (a namespace descriptor passed along with a request)."""
    mark = f"net:[{inode}]"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                if os.readlink(f"/proc/{pid}/task/{tid}/ns/net") == mark:
                    return True
            except OSError:
                continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == mark:
                    return True
            except OSError:
                continue
    return False
