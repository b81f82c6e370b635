"""bandwidth against a real kernel, in throwaway namespaces, read back with iproute2's ``tc -j``.

Most cases pin ``"layout": "host"``, the reference's kernel layout (what interop with the
reference and DEL of its pods rely on); tests/integration/test_bandwidth_layouts.py covers the
automatic layouts (split, pod), eBPF programs on the host veth and primaries without one.

The pod is attached by bridge + host-local (ours first on the path, the reference as fallback);
the bandwidth plugin runs as a process inside the lab's node namespace, either through the
runtime (whole chain) or directly (one command, to control CNI_NETNS and prevResult).

As in the reference's bandwidth_linux_test.go, each kernel case runs once per spec version with
chaining (``chained_version``: 0.3.0 on; cases about what CHECK detects: ``check_version``), and
checks the version's result and CHECK rule (tests/specver.py).  Single on purpose: the iperf3 rate
measurement (slow; the per-version cases already read back the same tc state it relies on), GC
(1.1.0 only), the corpus and the shipped conflist (each file carries its own cniVersion).
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from cnichain.tools.lab import isolate_conflist, rate_within
from cnichain.podstate.runtime import Attachment, ConfList, Runtime
from cnichain.plugins.bandwidth.config import IFB_PREFIX, ifb_name
from tests.integration.bandwidth_lab import exec_bw, host_veth, link, qdiscs, root_tbf, tc
from tests.specver import (
    CHECK_VERSIONS,
    assert_check_refused,
    assert_cni_error,
    assert_result_shape,
    check_as_runtime,
    expects_check,
    expects_gc,
)

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "corpus")
SUBNET = "10.77.0.0/24"
BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
          "ipam": {"type": "host-local", "subnet": SUBNET}}
BW_CAP = {"type": "bandwidth", "capabilities": {"bandwidth": True}, "layout": "host"}
LIMITS = {"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 16_000_000, "egressBurst": 160_000}
CONTAINERD_BURST = 2**32 - 1


# -- helpers -------------------------------------------------------------------------------------

def chain(lab, version="1.0.0", bw=None, name="bwtest") -> ConfList:
    data = {"cniVersion": version, "name": name, "plugins": [copy.deepcopy(BRIDGE), bw or dict(BW_CAP)]}
    return ConfList.from_dict(isolate_conflist(data, lab.workdir))


def bridge_only(lab, version="1.0.0", name="bwtest") -> ConfList:
    data = {"cniVersion": version, "name": name, "plugins": [copy.deepcopy(BRIDGE)]}
    return ConfList.from_dict(isolate_conflist(data, lab.workdir))


def runtime(make_runtime, plugin_dir, reference_dir) -> Runtime:
    return make_runtime([plugin_dir, reference_dir])




def bw_conf(version="1.0.0", name="bwtest", prev=None, **keys) -> dict:
    conf = {"cniVersion": version, "name": name, "type": "bandwidth", "layout": "host"}
    conf.update(keys)
    if prev is not None:
        conf["prevResult"] = prev
    return conf








def pod_root_tbf(lab, pod, dev="eth0"):
    out = lab.run(pod, "tc", "-j", "qdisc", "show", "dev", dev).stdout.strip()
    return next((q for q in json.loads(out or "[]") if q["kind"] == "tbf" and q.get("root")), None)


def has_ingress(lab, dev) -> bool:
    return any(q["kind"] == "ingress" for q in qdiscs(lab, dev))


def redirects(lab, dev) -> list[str]:
    out = []
    for f in tc(lab, "filter", "show", "dev", dev, "parent", "ffff:"):
        for act in f.get("options", {}).get("actions", []):
            if act.get("kind") == "mirred" and act.get("mirred_action") == "redirect":
                out.append(act["to_dev"])
    return out






def add_pod(lab, rt, conf, cid="ctr1", role="pod", limits=LIMITS):
    pod = lab.netns(role)
    att = Attachment(cid, pod, "eth0", capability_args={"bandwidth": dict(limits)} if limits else {})
    return pod, att, rt.add(conf, att)


def assert_unshaped(lab, veth):
    assert root_tbf(lab, veth) is None
    assert not has_ingress(lab, veth)


# -- ADD / CHECK / DEL ---------------------------------------------------------------------------

def test_add_builds_reference_layout_and_del_removes_it(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version)
    pod, att, result = add_pod(lab, rt, conf)
    assert_result_shape(result, chained_version)
    veth, ifb = host_veth(result), ifb_name("bwtest", "ctr1")

    # Ingress: TBF on the host veth, in bytes; egress: redirect to the IFB and TBF there.
    tbf = root_tbf(lab, veth)
    assert tbf["handle"] == "1:" and tbf["options"]["rate"] == 1_000_000 and tbf["options"]["burst"] == 10_000
    assert has_ingress(lab, veth) and redirects(lab, veth) == [ifb]
    ifb_tbf = root_tbf(lab, ifb)
    assert ifb_tbf["options"]["rate"] == 2_000_000 and ifb_tbf["options"]["burst"] == 20_000
    ifb_link, veth_link = link(lab, ifb), link(lab, veth)
    assert ifb_link["mtu"] == veth_link["mtu"] and "UP" in ifb_link["flags"]
    assert ifb_link["linkinfo"]["info_kind"] == "ifb"
    # The IFB is appended to the result, with its MAC and no sandbox.
    assert result["interfaces"][-1] == {"name": ifb, "mac": ifb_link["address"]}

    check_as_runtime(rt, conf, att)

    # Our DEL alone, pod still alive: IFB gone, veth unshaped, veth itself untouched.
    cached = rt.cached("bwtest", att)["result"]
    conf_del = bw_conf(chained_version, prev=cached, runtimeConfig={"bandwidth": LIMITS})
    assert exec_bw(lab, plugin_dir, "DEL", conf_del, netns=pod) == (0, None)
    assert link(lab, ifb) is None and link(lab, veth) is not None
    assert_unshaped(lab, veth)
    assert exec_bw(lab, plugin_dir, "DEL", conf_del, netns=pod) == (0, None)
    rt.delete(conf, att)
    rt.delete(conf, att)


def test_ingress_only_creates_no_ifb(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version, bw={"type": "bandwidth", "ingressRate": 1_000_000, "ingressBurst": 100_000,
                                           "layout": "host"})
    pod, att, result = add_pod(lab, rt, conf, limits=None)
    assert_result_shape(result, chained_version)
    veth = host_veth(result)
    assert root_tbf(lab, veth)["options"]["rate"] == 125_000
    assert not has_ingress(lab, veth)
    assert link(lab, ifb_name("bwtest", "ctr1")) is None
    assert all(not i["name"].startswith(IFB_PREFIX) for i in result["interfaces"])
    check_as_runtime(rt, conf, att)
    rt.delete(conf, att)


@pytest.mark.parametrize("shaped", [False, True], ids=["unshaped", "shaped"])
def test_prev_result_passes_through(lab, make_runtime, plugin_dir, reference_dir, chained_version, shaped):
    cni_version = chained_version
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    pod, att, prev = add_pod(lab, rt, bridge_only(lab, cni_version), limits=None)
    conf = bw_conf(cni_version, prev=prev, **(LIMITS if shaped else {}))
    code, out = exec_bw(lab, plugin_dir, "ADD", conf, netns=pod)
    assert code == 0, out
    expected = copy.deepcopy(prev)
    if shaped:
        ifb = ifb_name("bwtest", "ctr1")
        expected["interfaces"].append({"name": ifb, "mac": link(lab, ifb)["address"]})
    else:
        assert_unshaped(lab, host_veth(prev))
    assert out == expected
    assert_result_shape(out, cni_version)
    check = exec_bw(lab, plugin_dir, "CHECK", bw_conf(cni_version, prev=out, **(LIMITS if shaped else {})), netns=pod)
    if expects_check(cni_version):
        assert check == (0, None)
    else:
        assert_check_refused(*check)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(cni_version, prev=out), netns=pod) == (0, None)
    assert link(lab, ifb_name("bwtest", "ctr1")) is None


def test_runtime_config_ignored_when_config_has_keys(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    entry = dict(BW_CAP, ingressRate=2_000_000, ingressBurst=200_000)
    conf = chain(lab, chained_version, bw=entry)
    pod, att, result = add_pod(lab, rt, conf)  # runtime also sends LIMITS: must be ignored
    veth = host_veth(result)
    assert root_tbf(lab, veth)["options"]["rate"] == 250_000
    assert link(lab, ifb_name("bwtest", "ctr1")) is None
    rt.delete(conf, att)


# -- DEL when things are already gone ------------------------------------------------------------

def test_del_after_netns_deleted(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version)
    pod, att, result = add_pod(lab, rt, conf)
    ifb = ifb_name("bwtest", "ctr1")
    lab.delete_netns(pod)  # takes the veth pair with it
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version, prev=result), netns=pod) == (0, None)
    assert link(lab, ifb) is None
    # Neither netns nor prevResult: still fine, repeatedly.
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version), netns="") == (0, None)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version), netns="") == (0, None)
    rt.delete(conf, att)


def test_del_after_veth_removed(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version)
    pod, att, result = add_pod(lab, rt, conf)
    lab.run(lab.node, "ip", "link", "del", host_veth(result))
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version, prev=result), netns=pod) == (0, None)
    assert link(lab, ifb_name("bwtest", "ctr1")) is None
    rt.delete(conf, att)


def test_del_without_netns_or_prev_result_unshapes_live_veth(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version)
    pod, att, result = add_pod(lab, rt, conf)
    veth = host_veth(result)
    # The veth is found through the IFB redirect, without CNI_NETNS or prevResult.
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version), netns="") == (0, None)
    assert link(lab, ifb_name("bwtest", "ctr1")) is None
    assert_unshaped(lab, veth)
    rt.delete(conf, att)


@pytest.mark.parametrize("foreign", [["handle", "1:", "pfifo"],
                                     ["handle", "2:", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"]])
def test_del_leaves_a_foreign_root_qdisc(lab, make_runtime, plugin_dir, reference_dir, foreign, chained_version):
    """DEL removes the root qdisc only when it is a TBF with handle 1: (the kernel checks both)."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    pod, att, prev = add_pod(lab, rt, bridge_only(lab, chained_version), limits=None)
    veth = host_veth(prev)
    lab.run(lab.node, "tc", "qdisc", "add", "dev", veth, "root", *foreign)
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(chained_version, prev=prev, **LIMITS), netns=pod) == (0, None)
    root = next(q for q in qdiscs(lab, veth) if q.get("root"))
    assert (root["kind"], root["handle"]) == (foreign[2], foreign[1])
    rt.delete(bridge_only(lab, chained_version), att)


# -- CHECK ---------------------------------------------------------------------------------------

def test_check_detects_drift(lab, make_runtime, plugin_dir, reference_dir, check_version):
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, check_version)
    pod, att, result = add_pod(lab, rt, conf)
    veth, ifb = host_veth(result), ifb_name("bwtest", "ctr1")
    check = bw_conf(check_version, prev=result, **LIMITS)
    assert exec_bw(lab, plugin_dir, "CHECK", check, netns=pod) == (0, None)

    other = bw_conf(check_version, prev=result, **dict(LIMITS, ingressRate=9_000_000))
    code, out = exec_bw(lab, plugin_dir, "CHECK", other, netns=pod)
    assert code == 1
    assert_cni_error(out, 999, "Rate doesn't match")

    lab.run(lab.node, "tc", "filter", "del", "dev", veth, "parent", "ffff:")
    code, out = exec_bw(lab, plugin_dir, "CHECK", check, netns=pod)
    assert code == 1
    assert_cni_error(out, 999, 'Failed to find filter redirecting', prefix=True)

    lab.run(lab.node, "tc", "qdisc", "del", "dev", ifb, "root")
    code, out = exec_bw(lab, plugin_dir, "CHECK", check, netns=pod)
    assert code == 1
    assert_cni_error(out, 999, 'Failed to find qdisc')

    lab.run(lab.node, "ip", "link", "del", ifb)
    code, out = exec_bw(lab, plugin_dir, "CHECK", check, netns=pod)
    assert code == 1
    assert_cni_error(out, 999, 'get ifb device', prefix=True)

    # Nothing configured: CHECK succeeds without looking (the reference panics, upstream #1221).
    assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(check_version, prev=result), netns=pod) == (0, None)
    rt.delete(conf, att)


# -- failures leave nothing behind ----------------------------------------------------------------

def test_failed_add_rolls_back(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    """Forced to the reference's layout on a veth whose ingress hook another tool holds: refused
    up front with the reason (not the kernel's "file exists" halfway), nothing created."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    pod, att, prev = add_pod(lab, rt, bridge_only(lab, chained_version), limits=None)
    veth = host_veth(prev)
    lab.run(lab.node, "tc", "qdisc", "add", "dev", veth, "handle", "ffff:", "ingress")  # someone else's
    code, out = exec_bw(lab, plugin_dir, "ADD", bw_conf(chained_version, prev=prev, **LIMITS), netns=pod)
    assert code == 1
    assert_cni_error(out, 999, f"layout host: the ingress hook of {veth} is held by a ingress qdisc")
    assert root_tbf(lab, veth) is None
    assert link(lab, ifb_name("bwtest", "ctr1")) is None
    assert has_ingress(lab, veth)  # the foreign qdisc is left alone


def test_failed_add_rolls_back_halfway(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    """A failure after some of the layout was built (the IFB's name taken) undoes all of it."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    pod, att, prev = add_pod(lab, rt, bridge_only(lab, chained_version), limits=None)
    veth = host_veth(prev)
    lab.run(lab.node, "ip", "link", "add", ifb_name("bwtest", "ctr1"), "type", "veth")  # the name is taken
    code, out = exec_bw(lab, plugin_dir, "ADD", bw_conf(chained_version, prev=prev, **LIMITS), netns=pod)
    assert code == 1
    assert_cni_error(out, 999, "adding link: file exists")
    assert_unshaped(lab, veth)


def test_second_add_redoes_the_shaping(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    """ADD again over this attachment's own shaping -- what the shim does when a worker was killed
    after shaping and before answering -- redoes it (the reference fails with "create qdisc: file
    exists"): one TBF, one IFB with its redirect, and CHECK and DEL pass as after one ADD."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, chained_version)
    pod, att, result = add_pod(lab, rt, conf)
    prev = rt.cached("bwtest", att)["result"]
    prev["interfaces"] = [i for i in prev["interfaces"] if not i["name"].startswith(IFB_PREFIX)]  # its input
    first_ifb = link(lab, ifb_name("bwtest", "ctr1"))
    code, out = exec_bw(lab, plugin_dir, "ADD", bw_conf(chained_version, prev=prev, **LIMITS), netns=pod)
    assert code == 0 and out is not None, out
    again = link(lab, ifb_name("bwtest", "ctr1"))
    assert again is not None and first_ifb is not None and again["ifindex"] != first_ifb["ifindex"]  # made again
    assert [i["name"] for i in out["interfaces"]].count(ifb_name("bwtest", "ctr1")) == 1
    check_as_runtime(rt, conf, att)
    assert root_tbf(lab, host_veth(result)) is not None
    rt.delete(conf, att)
    assert link(lab, ifb_name("bwtest", "ctr1")) is None  # the pod (and its veth) are gone too


def test_host_layout_on_non_veth_interface_fails(lab, make_runtime, plugin_dir, reference_dir, chained_version):
    pod = lab.netns("pod")
    lab.run(pod, "ip", "link", "add", "eth0", "type", "bridge")
    prev = {"cniVersion": chained_version, "interfaces": [{"name": "eth0", "sandbox": pod}]}
    code, out = exec_bw(lab, plugin_dir, "ADD", bw_conf(chained_version, prev=prev, **LIMITS), netns=pod)
    assert code == 1
    assert_cni_error(out, 999, 'layout host: container interface eth0 has no veth peer', prefix=True)


# -- interop with the reference plugin ------------------------------------------------------------

# CHECK interop: the versions with CHECK that Debian's reference plugins speak (they stop at 1.0.0).
REFERENCE_CHECK_VERSIONS = [v for v in CHECK_VERSIONS if not expects_gc(v)]


@pytest.mark.parametrize("version", REFERENCE_CHECK_VERSIONS)
@pytest.mark.parametrize("burst", [160_000, CONTAINERD_BURST], ids=["explicit", "containerd"])
def test_reference_added_pod_checks_and_deletes_with_ours(lab, make_runtime, plugin_dir, any_reference, burst, version):
    ref = make_runtime([any_reference[1]])
    conf = chain(lab, version)
    limits = {"ingressRate": 1_000_000, "ingressBurst": burst, "egressRate": 1_000_000, "egressBurst": burst}
    pod, att, result = add_pod(lab, ref, conf, limits=limits)
    veth, ifb = host_veth(result), ifb_name("bwtest", "ctr1")
    assert link(lab, ifb) is not None
    # Ours accepts the reference's numbers, including its wrapped 32-bit buffer for huge bursts.
    assert exec_bw(lab, plugin_dir, "CHECK", bw_conf(version, prev=result, runtimeConfig={"bandwidth": limits}),
                   netns=pod) == (0, None)
    # A node switched to ours tears down what the reference set up.
    assert exec_bw(lab, plugin_dir, "DEL", bw_conf(version, prev=result), netns=pod) == (0, None)
    assert link(lab, ifb) is None
    assert_unshaped(lab, veth)
    ref.delete(conf, att)


@pytest.mark.parametrize("version", REFERENCE_CHECK_VERSIONS)
def test_reference_check_of_our_pod_refuses_only_the_time_bounded_queue(lab, make_runtime, plugin_dir, any_reference,
                                                                         version):
    """Our queue is bounded in time, the reference wants 25 ms *plus the burst* (plan.py): its CHECK
    passes the rate (checked first) and stops at the limit, the one deliberate difference."""
    reference_dir = any_reference[1]
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, version)
    pod, att, result = add_pod(lab, rt, conf)
    env = {"CNI_COMMAND": "CHECK", "CNI_CONTAINERID": "ctr1", "CNI_NETNS": pod, "CNI_IFNAME": "eth0",
           "CNI_PATH": reference_dir, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = lab.run(lab.node, os.path.join(reference_dir, "bandwidth"),
                   input=json.dumps(bw_conf(version, prev=result, **LIMITS)), env=env, check=False)
    assert proc.returncode == 1 and json.loads(proc.stdout)["msg"] == "Limit doesn't match", proc.stdout
    rt.delete(conf, att)


# -- GC (CNI 1.1) --------------------------------------------------------------------------------

def test_gc_removes_ifbs_of_vanished_attachments(lab, make_runtime, plugin_dir, reference_dir):
    """Single: GC exists at 1.1.0 only."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab, "1.1.0")
    pod1, att1, res1 = add_pod(lab, rt, conf, cid="keep", role="pod1")
    pod2, att2, res2 = add_pod(lab, rt, conf, cid="lost", role="pod2")
    # An IFB of another network that happens to exist must survive.
    other = chain(lab, "1.1.0", name="othernet")
    pod3, att3, res3 = add_pod(lab, rt, other, cid="lost", role="pod3")
    rt.gc(conf, [("keep", "eth0")])
    assert link(lab, ifb_name("bwtest", "keep")) is not None
    assert link(lab, ifb_name("bwtest", "lost")) is None
    assert link(lab, ifb_name("othernet", "lost")) is not None
    assert_unshaped(lab, host_veth(res2))  # no redirect left pointing at a deleted IFB
    assert redirects(lab, host_veth(res1)) == [ifb_name("bwtest", "keep")]
    for c, a in ((conf, att1), (conf, att2), (other, att3)):
        rt.delete(c, a)


# -- real traffic --------------------------------------------------------------------------------

def test_traffic_is_shaped_at_10_mbit(lab, make_runtime, plugin_dir, reference_dir):
    """A tolerant rate check (the accuracy table lives in benchmarks/bandwidth_accuracy.py).

    Single version on purpose: iperf3 takes ~9 s, and what the rate depends on (the TBFs, the
    redirect to the IFB) is read back at every version by the per-version cases above."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf = chain(lab)
    client = lab.netns("client")
    lab.wire(client, ["10.78.0.2/24"], ["10.78.0.1/24"], "cli")
    lab.run(client, "ip", "route", "add", SUBNET, "via", "10.78.0.1")
    rate = 10_000_000
    limits = {"ingressRate": rate, "ingressBurst": 1_000_000, "egressRate": rate, "egressBurst": 1_000_000}
    pod, att, result = add_pod(lab, rt, conf, limits=limits)
    pod_ip = result["ips"][0]["address"].split("/")[0]
    ok_in, into_pod = rate_within(lambda: lab.iperf(pod, client, pod_ip), rate, 0.25)
    ok_out, out_of_pod = rate_within(lambda: lab.iperf(pod, client, pod_ip, reverse=True), rate, 0.25)
    assert ok_in and ok_out, (into_pod, out_of_pod)
    rt.delete(conf, att)


# -- real conflists ------------------------------------------------------------------------------

def _corpus_chain(lab, filename):
    with open(os.path.join(CORPUS, filename)) as fh:
        data = json.load(fh)
    entries = [p for p in data["plugins"] if p["type"] == "bandwidth"]
    assert len(entries) == 1
    built = {"cniVersion": data["cniVersion"], "name": data["name"], "plugins": [copy.deepcopy(BRIDGE), entries[0]]}
    return ConfList.from_dict(isolate_conflist(built, lab.workdir)), entries[0]


@pytest.mark.parametrize("filename", ["k3s-flannel.conflist", "antrea-cni.conflist", "cniplugins-bandwidth-readme.conflist"])
def test_corpus_entries(lab, make_runtime, plugin_dir, reference_dir, filename):
    """Single per file: each corpus file carries its own cniVersion."""
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    conf, entry = _corpus_chain(lab, filename)
    pod = lab.netns("pod")
    # Kubernetes runtimes send the annotation's rate with containerd's burst.
    caps = {"bandwidth": {"ingressRate": 5_000_000, "ingressBurst": CONTAINERD_BURST,
                          "egressRate": 5_000_000, "egressBurst": CONTAINERD_BURST}}
    att = Attachment("corpus1", pod, "eth0", capability_args=caps)
    result = rt.add(conf, att)
    veth, ifb = host_veth(result), ifb_name(conf.name, "corpus1")
    # As written (no layout key): split, the host veth's root for traffic into the pod and the
    # pod's own root for traffic out of it; no IFB.
    want = entry.get("ingressRate", 5_000_000) // 8
    assert root_tbf(lab, veth)["options"]["rate"] == want
    assert pod_root_tbf(lab, pod)["options"]["rate"] == entry.get("egressRate", 5_000_000) // 8
    assert link(lab, ifb) is None and not has_ingress(lab, veth)
    assert all(i["name"] != ifb for i in result["interfaces"])
    check_as_runtime(rt, conf, att)
    rt.delete(conf, att)
    assert link(lab, ifb) is None
    rt.delete(conf, att)


def test_shipped_example_conflist(lab, make_runtime, plugin_dir, reference_dir):
    """conflists/bridge-bandwidth.conflist as shipped, with the limits a kubelet would pass (single:
    the file carries its own cniVersion)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "conflists", "bridge-bandwidth.conflist")) as fh:
        conf = ConfList.from_dict(isolate_conflist(json.load(fh), lab.workdir))
    rt = runtime(make_runtime, plugin_dir, reference_dir)
    pod, att, result = add_pod(lab, rt, conf, cid="example")
    assert root_tbf(lab, host_veth(result))["options"]["rate"] == LIMITS["ingressRate"] // 8
    assert pod_root_tbf(lab, pod)["options"]["rate"] == LIMITS["egressRate"] // 8
    rt.check(conf, att)
    rt.delete(conf, att)
    assert link(lab, ifb_name(conf.name, "example")) is None
