"""bandwidth's automatic layouts against a real kernel: next to an eBPF program on the host veth
(attached before our ADD and after it), and after primaries that leave no host veth (macvlan,
ipvlan, host-device).

The eBPF program is a real one, built here with clang from tests/data/bpf/count.c (a counter in
an array map, returning TC_ACT_OK, which ends classification on its hook the way Cilium's and the
AWS network policy agent's programs do), attached the way those tools attach (``tc qdisc replace
dev X clsact``, ``tc filter replace dev X ingress|egress bpf da``) and read back with bpftool.
Rates are measured with iperf3 in both directions; everything lives in the lab's throwaway
namespaces, the programs only on links these tests made.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import subprocess
import time

import pytest

from cnichain.plugins.bandwidth.config import ifb_name
from cnichain.tools.lab import isolate_conflist, rate_within
from cnichain.podstate.runtime import Attachment, ConfList

from tests.integration.bandwidth_lab import exec_bw, host_veth, root_tbf
from tests.integration.reconciler_node import Node
from tests.polling import wait_for

pytestmark = pytest.mark.integration

HERE = os.path.dirname(os.path.abspath(__file__))
PROG_SOURCE = os.path.join(os.path.dirname(HERE), "data", "bpf", "count.c")
RATE = 10_000_000
LIMITS = {"ingressRate": RATE, "ingressBurst": 1_000_000, "egressRate": RATE, "egressBurst": 1_000_000}
TOLERANCE = 0.10  # the issue's +-10 %
POD_SUBNET = "10.77.0.0/24"
LAN_SUBNET = "10.79.0.0/24"
BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
          "ipam": {"type": "host-local", "subnet": POD_SUBNET}}
BW = {"type": "bandwidth", "capabilities": {"bandwidth": True}}


# -- the eBPF program --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bpf_object(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("bpf") / "count.o")
    multiarch = f"-I/usr/include/{os.uname().machine}-linux-gnu"  # asm/types.h for linux/bpf.h (Debian's layout)
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", multiarch, "-c", PROG_SOURCE, "-o", out], check=True,
                   capture_output=True, timeout=120)
    return out


def attach(lab, dev: str, obj: str) -> None:
    """As Cilium's legacy tc mode and the AWS agent attach: clsact (replace), then a DA filter per hook."""
    lab.run(lab.node, "tc", "qdisc", "replace", "dev", dev, "clsact")
    for hook in ("ingress", "egress"):
        lab.run(lab.node, "tc", "filter", "replace", "dev", dev, hook, "bpf", "da", "obj", obj, "sec", "tc")


def their_filters(lab, dev: str) -> list[tuple[str, int, str, int]]:
    """(hook, pref, handle, program id) of every bpf filter on ``dev``, in the kernel's order."""
    out = []
    for hook in ("ingress", "egress"):
        for f in json.loads(lab.run(lab.node, "tc", "-j", "filter", "show", "dev", dev, hook).stdout or "[]"):
            if f.get("kind") == "bpf" and "options" in f:
                out.append((hook, f["pref"], f["options"]["handle"], f["options"]["prog"]["id"]))
    return out


def qdisc_kinds(lab, ns: str, dev: str) -> list[str]:
    return [q["kind"] for q in json.loads(lab.run(ns, "tc", "-j", "qdisc", "show", "dev", dev).stdout or "[]")]


def counter(prog_id: int) -> int:
    prog = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)], check=True,
                                     capture_output=True, text=True, timeout=30).stdout)
    value = json.loads(subprocess.run(["bpftool", "-j", "map", "lookup", "id", str(prog["map_ids"][0]),
                                       "key", "0", "0", "0", "0"], check=True, capture_output=True, text=True,
                                      timeout=30).stdout)
    return int(value["formatted"]["value"])


def link_stats(lab, ns: str, dev: str) -> dict:
    return json.loads(lab.run(ns, "ip", "-j", "-s", "link", "show", "dev", dev).stdout)[0]["stats64"]


def qdisc_drops(lab, ns: str, dev: str) -> int:
    out = json.loads(lab.run(ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev).stdout or "[]")
    return sum(int(q.get("drops", 0)) for q in out if q.get("root"))


def pod_state(lab, pod: str, ifname: str = "eth0") -> dict:
    """What of ours can be in the pod: qdiscs on its interface, IFBs."""
    links = json.loads(lab.run(pod, "ip", "-j", "-d", "link", "show").stdout)
    return {"qdiscs": [k for k in qdisc_kinds(lab, pod, ifname) if k not in ("noqueue",)],
            "ifbs": [x["ifname"] for x in links if x.get("linkinfo", {}).get("info_kind") == "ifb"]}


def node_ifbs(lab) -> list[str]:
    links = json.loads(lab.run(lab.node, "ip", "-j", "-d", "link", "show").stdout)
    return [x["ifname"] for x in links if x.get("linkinfo", {}).get("info_kind") == "ifb"]


# -- traffic ---------------------------------------------------------------------------------------

def shaped_both_ways(lab, pod: str, peer: str, pod_ip: str) -> None:
    ok_in, into_pod = rate_within(lambda: lab.iperf(pod, peer, pod_ip, seconds=4), RATE, TOLERANCE)
    ok_out, out_of_pod = rate_within(lambda: lab.iperf(pod, peer, pod_ip, seconds=4, reverse=True), RATE, TOLERANCE)
    print(f"measured: into the pod {into_pod} bit/s, out of it {out_of_pod} bit/s")
    assert ok_in and ok_out, (into_pod, out_of_pod)


def counts_every_packet(lab, veth: str, progs: dict, traffic) -> None:
    """``traffic()`` runs; the program on each hook of ``veth`` saw every packet the veth received
    from the pod (ingress) and every packet handed to it for the pod (egress: sent, plus what its
    root qdisc dropped)."""
    before, stats0, drops0 = _snapshot(lab, veth, progs)
    traffic()
    after, stats1, drops1 = _snapshot(lab, veth, progs)
    received = stats1["rx"]["packets"] - stats0["rx"]["packets"]
    handed = stats1["tx"]["packets"] - stats0["tx"]["packets"] + drops1 - drops0
    seen_in, seen_out = after["ingress"] - before["ingress"], after["egress"] - before["egress"]
    assert received > 100 and handed > 100, (received, handed)  # (GSO: up to 64 KB a packet)
    # A stray packet (IPv6 neighbour discovery) may fall between two of the reads.
    assert abs(seen_in - received) <= 3, (seen_in, received)
    assert abs(seen_out - handed) <= 3, (seen_out, handed)


def _snapshot(lab, veth: str, progs: dict) -> tuple[dict, dict, int]:
    """The programs' counters with the veth's stats and root drops, read with no packet between
    them: the link is read before and after the counters, again until both reads agree (the last
    segments and FINs of a TCP test can still be on their way when it returns)."""
    for _ in range(50):
        stats, drops = link_stats(lab, lab.node, veth), qdisc_drops(lab, lab.node, veth)
        counts = {hook: counter(pid) for hook, pid in progs.items()}
        if (link_stats(lab, lab.node, veth), qdisc_drops(lab, lab.node, veth)) == (stats, drops):
            return counts, stats, drops
        time.sleep(0.1)
    raise AssertionError(f"{veth} never went quiet for one read of its counters")


def program_ids(lab, veth: str) -> dict:
    return {hook: pid for hook, _pref, _handle, pid in their_filters(lab, veth)}


# -- eBPF on the host veth -------------------------------------------------------------------------

def _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw: bool):
    rt = make_runtime([plugin_dir, reference_dir])
    plugins = [copy.deepcopy(BRIDGE)] + ([dict(BW)] if with_bw else [])
    conf = ConfList.from_dict(isolate_conflist({"cniVersion": "1.0.0", "name": "bwtest", "plugins": plugins},
                                               lab.workdir))
    client = lab.netns("client")
    lab.wire(client, ["10.78.0.2/24"], ["10.78.0.1/24"], "cli")
    lab.run(client, "ip", "route", "add", POD_SUBNET, "via", "10.78.0.1")
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)} if with_bw else {})
    return rt, conf, client, pod, att


def bw_conf(prev: dict, **extra) -> dict:
    out = {"cniVersion": "1.0.0", "name": "bwtest", "type": "bandwidth", "prevResult": prev}
    out.update(LIMITS)
    out.update(extra)
    return out


def test_ebpf_program_attached_before_add(lab, make_runtime, plugin_dir, reference_dir, bpf_object):
    rt, conf, client, pod, att = _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw=False)
    prev = rt.add(conf, att)
    veth, pod_ip = host_veth(prev), prev["ips"][0]["address"].split("/")[0]
    attach(lab, veth, bpf_object)
    theirs = their_filters(lab, veth)
    assert len(theirs) == 2

    code, result = exec_bw(lab, plugin_dir, "ADD", bw_conf(prev), netns=pod)
    assert code == 0, result  # the reference fails here: "create ingress qdisc: file exists"
    # Their hook is taken: everything goes into the pod, the host veth is left as it was.
    assert their_filters(lab, veth) == theirs
    assert root_tbf(lab, veth) is None and qdisc_kinds(lab, lab.node, veth).count("clsact") == 1
    name = ifb_name("bwtest", "ctr1")
    assert result["interfaces"][-1]["name"] == name and result["interfaces"][-1]["sandbox"] == pod
    assert pod_state(lab, pod) == {"qdiscs": ["tbf", "clsact"], "ifbs": [name]}
    assert name not in node_ifbs(lab)

    counts_every_packet(lab, veth, program_ids(lab, veth), lambda: shaped_both_ways(lab, pod, client, pod_ip))
    assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(result), netns=pod) == (0, None)

    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(result), netns=pod) == (0, None)
    assert their_filters(lab, veth) == theirs and "clsact" in qdisc_kinds(lab, lab.node, veth)
    assert pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
    before = counter(theirs[0][3])
    lab.run(client, "ping", "-c", "3", "-i", "0.2", "-W", "2", pod_ip)
    assert counter(theirs[0][3]) >= before + 3  # still attached, still counting
    rt.delete(conf, att)


def test_ebpf_program_attached_after_add(lab, make_runtime, plugin_dir, reference_dir, bpf_object):
    rt, conf, client, pod, att = _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw=True)
    result = rt.add(conf, att)
    veth, pod_ip = host_veth(result), result["ips"][0]["address"].split("/")[0]
    # Split: nothing of ours on either tc hook of the host veth, so their attach works.
    assert qdisc_kinds(lab, lab.node, veth) == ["tbf"]
    attach(lab, veth, bpf_object)  # the reference's ingress qdisc makes this fail: "Invalid qdisc name"
    theirs = their_filters(lab, veth)
    assert len(theirs) == 2

    counts_every_packet(lab, veth, program_ids(lab, veth), lambda: shaped_both_ways(lab, pod, client, pod_ip))
    rt.check(conf, att)

    # What the reconciler's repair does (our DEL, then our ADD) never removes or reorders theirs;
    # the new ADD sees their hook taken and moves everything into the pod.
    cached = rt.cached("bwtest", att)["result"]
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(cached), netns=pod) == (0, None)
    assert their_filters(lab, veth) == theirs
    code, again = exec_bw(lab, plugin_dir, "ADD", bw_conf(cached), netns=pod)
    assert code == 0, again
    assert their_filters(lab, veth) == theirs and root_tbf(lab, veth) is None
    assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(again), netns=pod) == (0, None)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(again), netns=pod) == (0, None)
    assert their_filters(lab, veth) == theirs
    assert pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
    rt.delete(conf, att)


# -- the default layout on its own ---------------------------------------------------------------------

def test_split_layout_del_alone_and_check_drift(lab, make_runtime, plugin_dir, reference_dir):
    rt, conf, client, pod, att = _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw=True)
    result = rt.add(conf, att)
    veth = host_veth(result)
    assert root_tbf(lab, veth)["options"]["rate"] == RATE // 8
    assert pod_state(lab, pod) == {"qdiscs": ["tbf"], "ifbs": []}
    assert node_ifbs(lab) == [] and all(i["name"] != ifb_name("bwtest", "ctr1") for i in result["interfaces"])
    rt.check(conf, att)
    cached = rt.cached("bwtest", att)["result"]
    # A pod with CAP_NET_ADMIN can remove the pod-side half: CHECK says so (the reconciler repairs it).
    lab.run(pod, "tc", "qdisc", "del", "dev", "eth0", "root")
    code, out = exec_bw(lab, plugin_dir, "CHECK", bw_conf(cached), netns=pod)
    assert code == 1 and out["msg"] == "Failed to find qdisc", out
    # Our DEL alone, pod alive: nothing of ours left on either side.
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(cached), netns=pod) == (0, None)
    assert qdisc_kinds(lab, lab.node, veth) == ["noqueue"] and pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
    rt.delete(conf, att)


def test_add_again_over_a_killed_adds_host_tbf_builds_the_split_layout(lab, make_runtime, plugin_dir,
                                                                       reference_dir):
    """An ADD killed between the split layout's two TBFs leaves only the host veth's; the same ADD
    run again (the shim's cold retry) takes that TBF 1: with its own parameters for its own and
    builds the split layout again, instead of taking the host veth's root as another tool's and
    moving the shaping into the pod over a TBF no layout of this pod owns."""
    rt, conf, client, pod, att = _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw=False)
    prev = rt.add(conf, att)
    veth = host_veth(prev)
    assert exec_bw(lab, plugin_dir, "ADD", bw_conf(prev), netns=pod)[0] == 0
    lab.run(pod, "tc", "qdisc", "del", "dev", "eth0", "root")  # what the kill left: the host half
    assert root_tbf(lab, veth) is not None and pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}

    code, out = exec_bw(lab, plugin_dir, "ADD", bw_conf(prev), netns=pod)
    assert code == 0, out
    assert all(i["name"] != ifb_name("bwtest", "ctr1") for i in out["interfaces"]), out["interfaces"]
    assert root_tbf(lab, veth)["options"]["rate"] == RATE // 8
    assert pod_state(lab, pod) == {"qdiscs": ["tbf"], "ifbs": []} and node_ifbs(lab) == []
    assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(prev), netns=pod) == (0, None)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(prev), netns=pod) == (0, None)
    assert qdisc_kinds(lab, lab.node, veth) == ["noqueue"] and pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
    rt.delete(conf, att)


# -- primaries without a host veth ----------------------------------------------------------------------

def _kernel_refuses(kind: str) -> str:
    """Why this kernel cannot make a link of ``kind`` ("" when it can), probed in a throwaway namespace.

    Only the kernel's own answer for a link kind it does not know (RTM_NEWLINK refused with
    EOPNOTSUPP, "Unknown device type" when it says why) counts as a refusal; any other failure of
    the probe is raised, so a broken probe fails the test instead of skipping it."""
    import uuid

    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    from cnichain.common import netns

    name = f"cnit-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "pv0", "type", "veth", "peer", "name", "pv1"], check=True,
                       capture_output=True)
        with netns.entered(f"/run/netns/{name}"), IPRoute() as ipr:
            parent = ipr.link_lookup(ifname="pv0")[0]
            try:
                ipr.link("add", ifname="probe0", kind=kind, link=parent)
            except NetlinkError as exc:
                if exc.code != errno.EOPNOTSUPP:
                    raise
                return f"RTM_NEWLINK of kind {kind} refused with EOPNOTSUPP {exc}"
        return ""
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _lan(lab):
    """A LAN namespace on a veth whose node end ``up0`` is the primaries' parent / moved device."""
    lan = lab.netns("lan")
    lab.run(lab.node, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "lan0", "netns",
            os.path.basename(lan))
    lab.run(lan, "ip", "addr", "add", "10.79.0.100/24", "dev", "lan0")
    lab.run(lan, "ip", "link", "set", "lan0", "up")
    lab.run(lab.node, "ip", "link", "set", "up0", "up")
    return lan


PRIMARIES = {
    "macvlan": {"type": "macvlan", "master": "up0", "mode": "bridge"},
    "ipvlan": {"type": "ipvlan", "master": "up0", "mode": "l2"},
    "host-device": {"type": "host-device", "device": "up0"},
}


@pytest.mark.parametrize("primary", list(PRIMARIES))
def test_no_host_veth_primaries(lab, make_runtime, plugin_dir, any_reference, primary):
    refused = _kernel_refuses("ipvlan") if primary == "ipvlan" else ""
    if refused:
        pytest.skip(f"this kernel cannot create ipvlan links: {refused}")
    version, reference = any_reference
    lan = _lan(lab)
    entry = dict(PRIMARIES[primary], ipam={"type": "host-local", "subnet": LAN_SUBNET,
                                              "rangeStart": "10.79.0.10", "rangeEnd": "10.79.0.50"})
    conf = ConfList.from_dict(isolate_conflist({"cniVersion": "1.0.0", "name": "bwtest",
                                                "plugins": [entry, dict(BW)]}, lab.workdir))
    rt = make_runtime([plugin_dir, reference])
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)})
    result = rt.add(conf, att)  # the reference fails: "container interface eth0 has no veth peer"
    pod_ip = result["ips"][0]["address"].split("/")[0]
    name = ifb_name("bwtest", "ctr1")
    assert pod_state(lab, pod) == {"qdiscs": ["tbf", "clsact"], "ifbs": [name]}
    assert node_ifbs(lab) == []
    shaped_both_ways(lab, pod, lan, pod_ip)
    rt.check(conf, att)

    cached = rt.cached("bwtest", att)["result"]
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(cached), netns=pod) == (0, None)
    assert pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
    rt.delete(conf, att)
    assert node_ifbs(lab) == []


def test_vanished_pod_namespace_takes_everything(lab, make_runtime, plugin_dir, reference_dir):
    _lan(lab)
    entry = dict(PRIMARIES["macvlan"], ipam={"type": "host-local", "subnet": LAN_SUBNET})
    conf = ConfList.from_dict(isolate_conflist({"cniVersion": "1.0.0", "name": "bwtest",
                                                "plugins": [entry, dict(BW)]}, lab.workdir))
    rt = make_runtime([plugin_dir, reference_dir])
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)})
    result = rt.add(conf, att)
    assert pod_state(lab, pod)["ifbs"] == [ifb_name("bwtest", "ctr1")]
    lab.delete_netns(pod)
    assert node_ifbs(lab) == []
    assert qdisc_kinds(lab, lab.node, "up0") == ["noqueue"]  # the parent never carried any of it
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(result), netns=pod) == (0, None)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(result), netns="") == (0, None)
    rt.delete(conf, att)


# -- tcx (kernel 6.6+): programs with no qdisc to show -------------------------------------------------

BPF_PROG_GET_FD_BY_ID, BPF_LINK_CREATE = 13, 28
BPF_TCX = {"ingress": 46, "egress": 47}  # BPF_TCX_INGRESS, BPF_TCX_EGRESS


def _bpf(cmd: int, attr: bytes) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(64, b"\0"), 64)
    fd = libc.syscall(321, cmd, buf, 64)  # x86_64's bpf(2)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd


class TcxRefused(Exception):
    """The kernel's own refusal of a tcx link: BPF_LINK_CREATE with a tcx attach type it does not
    know fails with EINVAL (kernels before 6.6)."""


def tcx_attach(lab, dev: str, obj: str) -> tuple[list[int], dict]:
    """Both tcx hooks of ``dev`` get the program, as Cilium >= 1.16 and Calico >= 3.31 attach (bpf
    links, no qdisc): loaded by tc, its ids taken, tc's attachment removed, then BPF_LINK_CREATE.
    Returns the fds holding programs and links (closing them detaches) and the program ids.

    Raises :class:`TcxRefused` only for the kernel's refusal of the attach type; any other error
    (of bpf(2) or of tc) propagates as itself.  On any error the fds opened so far are closed."""
    import struct

    from cnichain.common import netns

    attach(lab, dev, obj)
    progs = program_ids(lab, dev)
    fds: list[int] = []
    try:
        for hook in ("ingress", "egress"):
            fds.append(_bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("=III", progs[hook], 0, 0)))
        lab.run(lab.node, "tc", "qdisc", "del", "dev", dev, "clsact")
        index = json.loads(lab.run(lab.node, "ip", "-j", "link", "show", dev).stdout)[0]["ifindex"]
        with netns.entered(lab.node):  # the ifindex is the node namespace's
            for fd, hook in zip(list(fds), ("ingress", "egress")):
                try:
                    fds.append(_bpf(BPF_LINK_CREATE, struct.pack("=IIII", fd, index, BPF_TCX[hook], 0)))
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    raise TcxRefused(f"BPF_LINK_CREATE with attach type {BPF_TCX[hook]} (tcx {hook}): "
                                     f"EINVAL ({exc.strerror})") from None
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds, progs


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the bpf(2) number used here is x86_64's")
def test_tcx_programs_before_add(lab, make_runtime, plugin_dir, reference_dir, bpf_object):
    rt, conf, client, pod, att = _bridge_lab(lab, make_runtime, plugin_dir, reference_dir, with_bw=False)
    prev = rt.add(conf, att)
    veth, pod_ip = host_veth(prev), prev["ips"][0]["address"].split("/")[0]
    try:
        fds, progs = tcx_attach(lab, veth, bpf_object)
    except TcxRefused as exc:
        pytest.skip(f"this kernel refuses tcx links: {exc}")  # tcx is 6.6+
    try:
        assert qdisc_kinds(lab, lab.node, veth) == ["noqueue"]  # nothing for tc to show
        code, result = exec_bw(lab, plugin_dir, "ADD", bw_conf(prev), netns=pod)
        assert code == 0, result
        # Seen through BPF_PROG_QUERY: everything goes into the pod.
        assert root_tbf(lab, veth) is None and result["interfaces"][-1]["sandbox"] == pod
        counts_every_packet(lab, veth, progs, lambda: shaped_both_ways(lab, pod, client, pod_ip))
        assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(result), netns=pod) == (0, None)
        assert exec_bw(lab, plugin_dir, "DEL", bw_conf(result), netns=pod) == (0, None)
        assert pod_state(lab, pod) == {"qdiscs": [], "ifbs": []}
        before = counter(progs["ingress"])
        lab.run(client, "ping", "-c", "3", "-i", "0.2", "-W", "2", pod_ip)
        assert counter(progs["ingress"]) >= before + 3  # still attached
    finally:
        for fd in fds:
            os.close(fd)
    rt.delete(conf, att)


# -- the reconciler and the pod-side half ------------------------------------------------------------

def test_reconciler_puts_back_what_a_pod_removed_in_its_namespace(lab, make_runtime):
    """Layout split: a pod with CAP_NET_ADMIN deletes its own root TBF; no rtnetlink event of the
    pod's namespace reaches the agent, its sweep finds it through bandwidth's CHECK and repairs it."""
    node = Node(lab, make_runtime)
    try:
        data = {"cniVersion": node.conf.cni_version, "name": node.conf.name, "plugins": copy.deepcopy(node.conf.plugins)}
        for p in data["plugins"]:
            p.pop("layout", None)  # the default layout
        node.conf = ConfList.from_dict(data)
        pod, att, result = node.pod("pod", 8090)
        with node.agent("--sweep-interval", "0.5", "--grace", "600"):
            wait_for("the first sweep to see bandwidth installed",
                     lambda: node.plugin_states(att).get("bandwidth") == "ok", timeout=60)
            lab.run(pod, "tc", "qdisc", "del", "dev", "eth0", "root")
            assert "tbf" not in qdisc_kinds(lab, pod, "eth0")
            assert wait_for("the pod's TBF to return", lambda: "tbf" in qdisc_kinds(lab, pod, "eth0"), timeout=60)
        node.runtime.check(node.conf, att)
        node.runtime.delete(node.conf, att)
    finally:
        node.close()
