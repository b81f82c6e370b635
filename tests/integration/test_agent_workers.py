"""Long-lived agent workers: the isolation a process per request gave, kept across requests.

Two halves.  First, the same request sequences -- every chained plugin's ADD, CHECK, DEL, DEL
again, STATUS, and host-local's IPAM, for two pods on two different node namespaces, interleaved
so one worker keeps moving between them -- run through fresh processes (cold execs) and through
one reused worker, and the answers and the kernel state after every step must be the same bytes.
Second, a request that crashes, hangs, leaks a descriptor, changes cwd/umask/environment, starts a
thread, installs a signal handler, leaves its namespace or grows its memory never reaches the next
request: that worker is replaced, and the next request starts from a clean process.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil

import pytest

from tests.integration.agent_setup import Setup, finish, probe_conf, run, settled, start, wait_for, workers

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(tmp_path) -> Setup:
    """test_agent's: an agent socket, warm and cold launchers and the probe, in a private tmp dir."""
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))

# The pod side of each test pod and the node side of its veth; fixed, so that the two modes of the
# comparison produce the same bytes (the namespaces are re-made with the same names per mode).
POD_MAC, HOST_MAC = "02:00:00:00:77:02", "02:00:00:00:77:01"
CHAIN = [
    {"type": "tuning", "sysctl": {"net.ipv4.conf.eth0.arp_notify": "1"}, "mtu": 1400, "promisc": True},
    {"type": "bandwidth", "ingressRate": 8000000, "ingressBurst": 160000, "egressRate": 4000000, "egressBurst": 80000},
    {"type": "portmap", "capabilities": {"portMappings": True},
     "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
                                        {"hostPort": 8053, "containerPort": 53, "protocol": "udp"}]}},
    {"type": "route-override", "addroutes": [{"dst": "192.0.2.0/24", "gw": "10.99.0.1"}]},
]


_MAC = re.compile(rb"\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b")
_FIXED_MACS = {POD_MAC.encode(), HOST_MAC.encode(), b"ff:ff:ff:ff:ff:ff", b"00:00:00:00:00:00"}


def _scrub(data: bytes) -> bytes:
    """``data`` with the one thing the kernel makes up per run -- the MAC of a new device (the ifb
    bandwidth creates) -- replaced by a placeholder; everything else is compared as it is."""
    return _MAC.sub(lambda m: m.group(0) if m.group(0) in _FIXED_MACS else b"<kernel-mac>", data)


def _ready_workers(agent, n: int) -> None:
    """Wait until the agent counts ``n`` idle workers (warmed, their "ready" received: its own
    gauge), so a test's first request finds one instead of forking its own."""
    wait_for(lambda: workers(agent, "idle") >= n, timeout=120)


def _workers_of(log_path: str) -> list[str]:
    """The worker pid of every request in an agent's log, in order."""
    return re.findall(r"^.*request plugin=\S+ command=(?!VERSION)\S+ .* worker=(\d+)", open(log_path).read(), re.M)


class Pod:
    """A node namespace with one pod wired to it by a veth pair, as a primary plugin would leave it."""

    def __init__(self, lab, role: str) -> None:
        self.lab = lab
        self.node = lab.netns(f"n{role}")
        self.pod = lab.netns(f"p{role}")
        self.cid = f"wk-{role}"
        self.host_if = f"h{role}"
        for ns in (self.node, self.pod):  # no IPv6 link-local addresses: their DAD is timing, not state
            for scope in ("all", "default"):
                lab.run(ns, "sysctl", "-qw", f"net.ipv6.conf.{scope}.disable_ipv6=1")
        lab.run(self.node, "ip", "link", "add", self.host_if, "address", HOST_MAC, "type", "veth",
                "peer", "name", "eth0", "address", POD_MAC, "netns", os.path.basename(self.pod))
        lab.run(self.node, "ip", "addr", "add", "10.99.0.1/24", "dev", self.host_if)
        lab.run(self.node, "ip", "link", "set", self.host_if, "up")
        lab.run(self.pod, "ip", "addr", "add", "10.99.0.2/24", "dev", "eth0")
        lab.run(self.pod, "ip", "link", "set", "eth0", "up")
        # carrier comes a moment after "up": wait for it, so no step sees the link still coming up
        wait_for(lambda: "state UP" in lab.run(self.pod, "ip", "-o", "link", "show", "eth0").stdout
                 and "state UP" in lab.run(self.node, "ip", "-o", "link", "show", self.host_if).stdout)

    def prev(self) -> dict:
        return {"cniVersion": "1.0.0",
                "interfaces": [{"name": self.host_if, "mac": HOST_MAC}, {"name": "eth0", "mac": POD_MAC, "sandbox": self.pod}],
                "ips": [{"address": "10.99.0.2/24", "gateway": "10.99.0.1", "interface": 1}]}

    def state(self) -> str:
        """What the kernel holds in both namespaces, as text (no counters, no timers)."""
        out = []
        for ns in (self.node, self.pod):
            for argv in (("ip", "-o", "link"), ("ip", "-o", "addr"), ("ip", "route", "show", "table", "all"),
                         ("tc", "qdisc", "show"), ("nft", "list", "ruleset")):
                out.append(self.lab.run(ns, *argv, check=False).stdout)
            for dev in ("eth0", self.host_if):
                out.append(self.lab.run(ns, "tc", "filter", "show", "dev", dev, "ingress", check=False).stdout)
        out.append(self.lab.run(self.pod, "sysctl", "-n", "net.ipv4.conf.eth0.arp_notify", check=False).stdout)
        return "".join(out)

    def remove(self) -> None:
        self.lab.delete_netns(self.pod)
        self.lab.delete_netns(self.node)


def _sequence(lab, bin_dir: str, data: str, agent=None) -> list:
    """Every step's (plugin, command, pod, exit code, stdout, stderr, kernel state of that pod);
    with ``agent``, each step waits until its worker is idle again (:func:`settled`)."""
    pods = [Pod(lab, "a"), Pod(lab, "b")]
    steps = []
    try:
        def step(pod: Pod, plugin: dict, command: str, prev=None, version: str = "1.0.0") -> bytes:
            conf = {"cniVersion": version, "name": "wknet", **plugin}
            if plugin["type"] == "tuning":
                conf["dataDir"] = os.path.join(data, "tuning")
            if prev is not None:
                conf["prevResult"] = prev
            proc = start(bin_dir, plugin["type"], command, conf, pod.node, CNI_NETNS=pod.pod,
                         CNI_CONTAINERID=pod.cid)
            code, out, err = finish(proc)
            if agent is not None:
                settled(agent)
            steps.append((plugin["type"], command, pod.cid, code, _scrub(out), _scrub(err), _scrub(pod.state().encode())))
            return out

        ipam = {"type": "host-local", "ipam": {"type": "host-local", "subnet": "10.98.0.0/24",
                                               "dataDir": os.path.join(data, "ipam")}}
        prevs = {}
        for pod in pods:
            step(pod, ipam, "ADD")
            step(pod, ipam, "CHECK", prev=None)
        for pod in pods:
            prevs[pod.cid] = pod.prev()
        for plugin in CHAIN:  # the two pods' chains interleaved: one worker keeps changing namespace
            for pod in pods:
                out = step(pod, plugin, "ADD", prevs[pod.cid])
                prevs[pod.cid] = json.loads(out) if out.startswith(b"{") else prevs[pod.cid]
        for plugin in CHAIN:
            for pod in pods:
                step(pod, plugin, "CHECK", prevs[pod.cid])
        for _ in range(2):  # DEL, then DEL again (idempotent)
            for plugin in reversed(CHAIN):
                for pod in pods:
                    step(pod, plugin, "DEL", prevs[pod.cid])
        for plugin in CHAIN:
            step(pods[0], plugin, "STATUS", version="1.1.0")
        for pod in pods:
            step(pod, ipam, "DEL")
    finally:
        for pod in pods:
            pod.remove()
    return steps


def test_a_reused_worker_gives_the_same_bytes_and_kernel_state_as_fresh_processes(setup, lab):
    data = os.path.join(setup.root, "data")
    cold = _sequence(lab, setup.cold, data)
    shutil.rmtree(data)
    with setup.agent("--pool", "1") as agent:
        _ready_workers(agent, 1)
        warm = _sequence(lab, setup.warm, data, agent)
        log = agent.log_path
        wait_for(lambda: len(_workers_of(log)) == len(warm))
        workers = _workers_of(log)
        retired = [line for line in open(log) if "retired" in line]
    assert [s[:6] for s in warm] == [s[:6] for s in cold]  # the answers, byte for byte
    for w, c in zip(warm, cold):
        diff = "".join(difflib.unified_diff(c[6].decode().splitlines(True), w[6].decode().splitlines(True), "cold", "warm"))
        assert w[6] == c[6], f"kernel state after {w[0]} {w[1]} {w[2]}:\n{diff}"
    assert all(s[3] == 0 for s in cold if s[1] != "STATUS"), [s[:6] for s in cold if s[3]]
    assert not retired, retired
    assert len(set(workers)) == 1, "one worker served the whole sequence, moving between namespaces"


# -- a request's misbehaviour never reaches the next one -----------------------------------------------


def _two_requests(setup, lab, first: dict, *agent_args: str, second_umask: int = 0o022):
    """Run ``first`` then a clean request through an agent with one worker; both records and the log."""
    if os.path.exists(setup.sock + ".log"):
        os.unlink(setup.sock + ".log")  # one log per agent here
    with setup.agent("--pool", "1", "--request-timeout", "2", *agent_args) as agent:
        _ready_workers(agent, 1)
        a = run(setup.warm, "probe", "ADD", probe_conf(setup, **first), lab.node, CNI_CONTAINERID="first")
        settled(agent)
        b = finish(start(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, umask=second_umask,
                         CNI_CONTAINERID="second"))
        wait_for(lambda: len(_workers_of(agent.log_path)) == 2)
        log = open(agent.log_path).read()
    recs = [r for r in setup.records() if r["phase"] == "end" or r["container"] == "first"]
    first_rec = next(r for r in recs if r["container"] == "first")
    second_rec = [r for r in recs if r["container"] == "second"][-1]
    return a, b, first_rec, second_rec, log


def _baseline(setup, lab) -> dict:
    """What a clean request sees in a worker that has served one clean request before."""
    *_, second, log = _two_requests(setup, lab, {})
    assert "retired" not in log
    return second


@pytest.mark.parametrize("leave", ["fd", "cwd", "umask", "env", "thread", "signal", "netns", "mntns"])
def test_a_request_that_leaves_state_behind_gets_its_worker_replaced(setup, lab, leave):
    clean = _baseline(setup, lab)
    other = lab.netns("elsewhere")
    os.unlink(setup.record)
    a, b, first, second, log = _two_requests(setup, lab, {"leave": leave, "netns": other}, second_umask=0o027)
    assert a[0] == 0 and b[0] == 0, (a, b)  # the misbehaving request itself still got its answer
    assert second["pid"] != first["pid"], f"the worker that served a request leaving {leave} served again"
    assert "retired" in log and "the request" in log
    assert second["netns"] == os.stat(lab.node).st_ino and second["cwd"] == "/" and second["umask"] == 0o027
    assert "PROBE_LEFT" not in second["env"]
    for key in ("fds", "threads", "sigusr1", "mntns"):
        assert second[key] == clean[key], key


@pytest.mark.parametrize("how,outcome", [("crash", "crashed"), ("hang", "timeout")])
def test_a_request_that_crashes_or_hangs_gets_its_worker_replaced(setup, lab, how, outcome):
    a, b, first, second, log = _two_requests(setup, lab, {how: True})
    assert a[0] == 1 and json.loads(a[1])["code"] == 999
    assert b[0] == 0, b
    assert second["pid"] != first["pid"]
    assert f"outcome={outcome}" in log and second["cwd"] == "/"


def test_a_worker_retires_after_its_request_limit_and_when_its_memory_grows(setup, lab):
    with setup.agent("--pool", "1", "--worker-requests", "3", "--worker-rss-growth", "32") as agent:
        _ready_workers(agent, 1)
        for i in range(4):
            assert run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, CNI_CONTAINERID=f"n{i}")[0] == 0
            settled(agent)
        assert run(setup.warm, "probe", "ADD", probe_conf(setup, leave="grow", mib=64), lab.node,
                   CNI_CONTAINERID="grow")[0] == 0
        settled(agent)
        assert run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, CNI_CONTAINERID="after")[0] == 0
        wait_for(lambda: len(_workers_of(agent.log_path)) == 6)
        workers = _workers_of(agent.log_path)
        log = open(agent.log_path).read()
    assert workers[0] == workers[1] == workers[2] != workers[3]  # three requests, then a new process
    assert workers[4] != workers[5] and workers[4] not in workers[:3]  # the one that grew was not used again
    assert "served 3 requests" in log and "resident memory grew" in log


def test_parallel_requests_beyond_the_idle_workers_get_new_ones_at_once_and_they_stay(setup):
    with setup.agent("--pool", "1") as agent:
        _ready_workers(agent, 1)
        for batch in range(2):
            # Each handler holds its worker for 3 s: five shims started together on a loaded machine
            # all reach the agent well inside that, so only a queue could keep one from overlapping.
            procs = [start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=3.0), CNI_CONTAINERID=f"b{batch}x{i}")
                     for i in range(5)]
            assert [finish(p)[0] for p in procs] == [0] * 5
            settled(agent)  # each worker reports DONE just after its shim has the answer
        wait_for(lambda: len(_workers_of(agent.log_path)) == 10)
        workers = _workers_of(agent.log_path)
        text = agent.metrics()
    recs = setup.records()
    first = [r for r in recs if r["container"].startswith("b0")]
    starts = sorted(r["time"] for r in first if r["phase"] == "start")
    ends = sorted(r["time"] for r in first if r["phase"] == "end")
    assert starts[-1] < ends[0], "all five were inside their handler at once: none queued behind another"
    assert len(set(workers[:5])) == 5
    assert set(workers[5:]) <= set(workers[:5]), "the second burst found the first burst's workers ready"
    assert 'how="pooled"' in text and 'how="forked"' in text
