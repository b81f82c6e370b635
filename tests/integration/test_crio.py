"""CRI-O's call pattern (tools/crio.py) against the real plugins in a throwaway node namespace.

CRI-O is not packaged for Debian, so the runner reproduces it (ocicni 0.5.0 over libcni 1.3.0):
VERSION of every plugin at every load, ADD then CHECK of the whole chain at once (silent, from
0.4.0), bandwidth as camelCase with zeros, no ``portMappings`` (portmap must change nothing), one
DEL with the ADD-time conflist, and at restart CHECK of every running pod, a synthetic DEL of every
cached attachment that is gone (its netns already deleted) and GC with the valid set (JSON
``null`` for a network without pods).  Per spec version where the version changes the pattern
(CHECK from 0.4.0, GC at 1.1.0); the GC safety case (no live pod loses an address, a rule or an
IFB; the next ADD never gets a live pod's IP) runs at 1.1.0, where GC exists.
"""

from __future__ import annotations

import copy
import glob
import json
import os
from typing import Optional

import pytest

from cnichain.tools import crio
from cnichain.node.launchers import conflists_dir
from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.common.version import at_least
from cnichain.plugins.bridge.rules import MASQ_TABLE, POD_OWNERS
from cnichain.plugins.portmap import names as portmap_names
from tests.integration.bandwidth_lab import flow_as_asked
from tests.integration.footprint import difference, footprint, leftovers

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "corpus")
OURS = ("bridge", "host-local", "portmap", "bandwidth", "tuning", "route-override")
MBIT = 1_000_000


def default_chain(version: str) -> dict:
    with open(os.path.join(conflists_dir(), "cnichain-default.conflist")) as fh:
        data = json.load(fh)
    data["cniVersion"] = version
    return data


def node(lab, make_runtime, conflists: dict[str, dict], bin_dirs: Optional[list[str]] = None) -> crio.Crio:
    """A CRI-O on the lab node with ``conflists`` (file name -> data, isolated into the lab) loaded."""
    conf_dir = lab.path("net.d", "x").rsplit("/", 1)[0]
    for filename, data in conflists.items():
        crio.write_conflist(conf_dir, filename, isolate_conflist(data, lab.workdir))
    c = crio.Crio(make_runtime(bin_dirs), conf_dir)
    c.reload()
    assert c.skipped == {}
    return c


def pod(lab, n: int, **bw: int) -> crio.CrioPod:
    return crio.CrioPod(f"crio-sb-{n}", f"pod-{n}", "default", f"uid-{n}", lab.netns(f"p{n}"), **bw)


def portmap_table_exists(lab) -> bool:
    return lab.run(lab.node, "nft", "list", "table", portmap_names.FAMILY, portmap_names.TABLE, check=False).returncode == 0


def pod_tbf(lab, netns: str, ifname: str = "eth0") -> bool:
    """A TBF at the root of the pod's interface: where bandwidth's default layout shapes egress."""
    return "tbf" in lab.run(netns, "tc", "qdisc", "show", "dev", ifname, "root").stdout


def tbf_on_host_veth(lab, result: dict) -> bool:
    veth = next(i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"].startswith("veth"))
    return "tbf" in lab.run(lab.node, "tc", "qdisc", "show", "dev", veth).stdout


def test_a_crio_pod_gets_its_rates_from_the_first_byte_with_a_ping_beside_bulk(lab, make_runtime):
    """What CRI-O sends for a pod with only the two Kubernetes annotations (each direction's rate
    with its (2^32-1)*8-1 bit burst) shapes from the first second, with a ping beside the bulk
    flow answered from a time-bounded queue; different rates per direction so a swap fails."""
    c = node(lab, make_runtime, {"10-cnichain.conflist": default_chain("1.0.0")})
    p = pod(lab, 1, ingress_rate=10 * MBIT, ingress_burst=crio.BURST, egress_rate=6 * MBIT, egress_burst=crio.BURST)
    result = c.run_pod(p)
    pod_ip = result["ips"][0]["address"].split("/")[0]
    peer = lab.netns("peer")
    lab.wire(peer, ["10.78.0.2/24"], ["10.78.0.1/24"], "peer")
    lab.run(peer, "ip", "route", "add", "10.22.0.0/16", "via", "10.78.0.1")
    seen = {}
    for direction, target, reverse in (("into the pod", p.ingress_rate, False), ("out of the pod", p.egress_rate, True)):
        seen[direction] = flow_as_asked(lab.argv(p.netns), lab.argv(peer), pod_ip, target, reverse)
    print(seen)  # shown with -s / -rP
    c.stop_pod(p)
    lab.delete_netns(peer)  # and the lab's own wire with it
    assert all(ok for ok, _ in seen.values()), seen
    assert leftovers(footprint(lab)) == {}


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_default_chain_under_crio(lab, make_runtime, version):
    """The shipped chain as CRI-O runs it: ADD+CHECK per pod, restart with one pod gone while
    CRI-O was down (its netns deleted too), then the stops.  Nothing left at the end."""
    c = node(lab, make_runtime, {"10-cnichain.conflist": default_chain(version)})
    assert c.version_calls == 5  # VERSION of every plugin of the chain at load
    ingress = pod(lab, 1, ingress_rate=10 * MBIT, ingress_burst=crio.BURST)
    egress = pod(lab, 2, egress_rate=10 * MBIT, egress_burst=crio.BURST)
    plain = pod(lab, 3)
    results = {p.sandbox_id: c.run_pod(p) for p in (ingress, egress)}  # ADD, then a silent CHECK
    assert not portmap_table_exists(lab), "no portMappings from CRI-O: portmap must change nothing"
    assert tbf_on_host_veth(lab, results[ingress.sandbox_id])
    assert pod_tbf(lab, egress.netns)  # egress shaping: bandwidth's default layout shapes it on the pod's eth0
    for p in (ingress, egress):
        lab.run(p.netns, "ping", "-c1", "-W2", "10.22.0.1")
    before = footprint(lab)

    c.run_pod(plain)
    lab.delete_netns(plain.netns)  # the pod went while CRI-O was down: a stale netns path in the cache
    restarted = crio.Crio(c.runtime, c.conf_dir)
    assert restarted.restart([ingress, egress]) == []  # STATUS, CHECK x2, synthetic DEL, GC (1.1.0)
    assert difference(before, footprint(lab)) == {}
    assert not portmap_table_exists(lab)
    for p in (ingress, egress):
        lab.run(p.netns, "ping", "-c1", "-W2", "10.22.0.1")
        restarted.stop_pod(p)
    assert leftovers(footprint(lab)) == {}


def test_check_after_add_and_on_restart_passes_while_pods_serve(lab, make_runtime):
    """CHECK again on a restart with every pod alive; it changes nothing and prints nothing."""
    c = node(lab, make_runtime, {"10-cnichain.conflist": default_chain("1.1.0")})
    pods = [pod(lab, n, ingress_rate=5 * MBIT, ingress_burst=crio.BURST, egress_rate=5 * MBIT,
                egress_burst=crio.BURST) for n in range(3)]
    for p in pods:
        c.run_pod(p)
    before = footprint(lab)
    for _ in range(2):
        assert crio.Crio(c.runtime, c.conf_dir).restart(pods) == []
    assert difference(before, footprint(lab)) == {}
    for p in pods:
        c.stop_pod(p)
    assert leftovers(footprint(lab)) == {}


def test_a_plugin_that_cannot_speak_the_version_is_skipped_not_fatal(lab, make_runtime):
    """VERSION at load: route-override and bandwidth list no 0.2.0, so that file is skipped and the
    next valid file becomes the default network."""
    c = node(lab, make_runtime, {})
    old = default_chain("0.2.0")
    old["name"] = "old"
    crio.write_conflist(c.conf_dir, "05-old.conflist", isolate_conflist(old, lab.workdir))
    crio.write_conflist(c.conf_dir, "10-cnichain.conflist", isolate_conflist(default_chain("1.0.0"), lab.workdir))
    c.reload()
    assert list(c.skipped) == ["05-old.conflist"] and "0.2.0" in c.skipped["05-old.conflist"]
    assert c.default.name == "cnichain"


# -- GC never frees what a live pod owns --------------------------------------------------------

def small_chain(name: str, bridge: str, subnet: str) -> dict:
    """The default chain at 1.1.0 on a /29 (.2-.6): five addresses, so a freed live one is reused soon."""
    data = default_chain("1.1.0")
    data["name"] = name
    br = data["plugins"][0]
    br["bridge"] = bridge
    br["ipam"]["ranges"] = [[{"subnet": subnet}]]
    data["plugins"][-1]["addroutes"] = [{"dst": "192.0.2.0/24", "gw": subnet.replace(".0/29", ".1")}]
    return data


def containerd_caps(n: int) -> dict:
    """A hostPort and both bandwidth directions: the pods GC must leave alone own every kind of state."""
    return {"portMappings": [{"hostPort": 18400 + n, "containerPort": 80, "protocol": "tcp"},
                             {"hostPort": 18500 + n, "containerPort": 53, "protocol": "udp"}],
            "bandwidth": {"ingressRate": 8 * MBIT, "ingressBurst": crio.BURST,
                          "egressRate": 8 * MBIT, "egressBurst": crio.BURST}}


def ip_of(result: dict) -> str:
    return result["ips"][0]["address"].split("/")[0]


@pytest.mark.parametrize("other_valid", [None, []], ids=["other-null", "other-empty"])
def test_gc_keeps_every_live_pod_and_the_next_add_never_reuses_a_live_ip(lab, make_runtime, other_valid):
    """The duplicate-IP regression (antrea#8239): GC with the live pods listed on their network, and
    ``null`` / ``[]`` on another network name, removes exactly the stale pods and nothing a live pod
    owns (reservation, portmap rules and map elements, masquerade rule, IFB, qdiscs, tuning backup);
    then the range fills up with the only free addresses and the next ADD fails for exhaustion."""
    runtime = make_runtime()
    main = ConfList.from_dict(isolate_conflist(small_chain("cnichain", "cni0", "10.22.0.0/29"), lab.workdir))
    other = ConfList.from_dict(isolate_conflist(small_chain("othernet", "cni1", "10.23.0.0/29"), lab.workdir))
    live = [Attachment(f"live-{n}", lab.netns(f"l{n}"), "eth0", capability_args=containerd_caps(n)) for n in range(3)]
    live_ips = {ip_of(runtime.add(main, att)) for att in live}
    assert len(live_ips) == 3
    before = footprint(lab)
    masqueraded = [x for x in before["nft"] if f'"table": "{MASQ_TABLE}"' in x and f'"name": "{POD_OWNERS[4]}"' in x]
    assert len(masqueraded) == 1 and len(json.loads(masqueraded[0].split(" ", 1)[1])["elem"]) == 3
    assert len(before["reservations"]) == 3
    assert len([x for x in before["qdiscs"] if x.startswith("tbf ")]) == 3  # into each live pod
    assert all(pod_tbf(lab, att.netns) for att in live)  # out of each live pod

    stale = Attachment("stale-main", lab.netns("s1"), "eth0", capability_args=containerd_caps(7))
    stale_other = Attachment("stale-other", lab.netns("s2"), "eth0", capability_args=containerd_caps(8))
    runtime.add(main, stale)
    runtime.add(other, stale_other)
    lab.delete_netns(stale.netns)  # one stale pod's netns is already gone, the other's is not

    assert runtime.gc_network_list(other, other_valid) == []  # another network name first
    assert runtime.gc_network_list(main, [(a.container_id, a.ifname) for a in live]) == []
    assert difference(before, footprint(lab)) == {}
    assert all(pod_tbf(lab, att.netns) for att in live)
    for att in live:
        lab.run(att.netns, "ping", "-c1", "-W2", "10.22.0.1")

    # A GC that frees nothing more, repeated, is still a no-op.
    assert runtime.gc_network_list(main, [(a.container_id, a.ifname) for a in live]) == []
    assert difference(before, footprint(lab)) == {}

    # The range has two free addresses left (.5, .6): the next ADDs get those and never a live one.
    new_ips = set()
    for n in range(2):
        att = Attachment(f"new-{n}", lab.netns(f"n{n}"), "eth0", capability_args=containerd_caps(20 + n))
        new_ips.add(ip_of(runtime.add(main, att)))
    assert new_ips == {"10.22.0.5", "10.22.0.6"} and not new_ips & live_ips
    with pytest.raises(PluginFailed) as info:
        runtime.add(main, Attachment("new-full", lab.netns("nf"), "eth0", capability_args=containerd_caps(30)))
    assert "no IP addresses available" in str(info.value)


# -- the shipped conflists and the corpus through the CRI-O pattern ---------------------------------

def _shipped() -> list[str]:
    return sorted(n for n in os.listdir(conflists_dir()) if n.endswith(".conflist"))


@pytest.mark.parametrize("version", ["as-shipped", "1.1.0"])
@pytest.mark.parametrize("filename", _shipped())
def test_shipped_conflists_under_crio(lab, make_runtime, filename, version):
    """Every conflist we ship, at its own version and at 1.1.0 (where GC runs too)."""
    with open(os.path.join(conflists_dir(), filename)) as fh:
        data = json.load(fh)
    if version != "as-shipped":
        data["cniVersion"] = version
    c = node(lab, make_runtime, {filename: data})
    p = pod(lab, 1, ingress_rate=10 * MBIT, ingress_burst=crio.BURST, egress_rate=10 * MBIT, egress_burst=crio.BURST)
    c.run_pod(p)
    assert not portmap_table_exists(lab)
    before = footprint(lab)
    assert crio.Crio(c.runtime, c.conf_dir).restart([p]) == []
    assert difference(before, footprint(lab)) == {}
    c.stop_pod(p)
    assert leftovers(footprint(lab)) == {}


def _corpus_files() -> list[str]:
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(CORPUS, "*.conf*")))


def _runnable(data: dict) -> dict:
    """The corpus file with its primary as bridge + host-local (bridge primaries keep their keys) and
    its portmap, bandwidth, tuning and route-override entries as written; other plugins dropped."""
    plugins = data.get("plugins") or [data]
    version = data.get("cniVersion") or "1.0.0"
    primary = plugins[0]
    subnet = "10.1.254.0/24" if any(p.get("type") == "route-override" for p in plugins) else "10.77.0.0/24"
    if primary.get("type") == "bridge":
        bridge = copy.deepcopy(primary)
    else:
        bridge = {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
                  "ipam": {"type": "host-local", "subnet": subnet, "routes": [{"dst": "0.0.0.0/0"}]}}
    metas = [copy.deepcopy(p) for p in plugins if p.get("type") in OURS and p is not primary]
    return {"cniVersion": version, "name": data.get("name") or "corpus", "plugins": [bridge, *metas]}


@pytest.mark.parametrize("filename", _corpus_files())
def test_corpus_under_crio(lab, make_runtime, filename):
    """Single per file (each carries its own cniVersion): load with VERSION, ADD then CHECK (from
    0.4.0), restart with the pod gone (synthetic DEL; GC where >= 1.1.0), nothing left."""
    with open(os.path.join(CORPUS, filename)) as fh:
        data = _runnable(json.load(fh))
    c = node(lab, make_runtime, {"10-corpus.conflist": data})
    p = pod(lab, 1, ingress_rate=10 * MBIT, ingress_burst=crio.BURST)
    c.run_pod(p)
    assert not portmap_table_exists(lab)
    if at_least(data["cniVersion"], "0.4.0"):
        assert crio.Crio(c.runtime, c.conf_dir).restart([p]) == []  # CHECK again, GC keeps it
    lab.delete_netns(p.netns)
    assert crio.Crio(c.runtime, c.conf_dir).restart([]) == []
    assert leftovers(footprint(lab)) == {}
