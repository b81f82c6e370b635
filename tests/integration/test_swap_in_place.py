"""Swap in place: pods the reference plugins set up are torn down by our DEL, leaving nothing of theirs.

A node swaps the reference executables for cnichain's while pods run; the runtime then DELs
those pods with our plugins, handing over the prevResult the reference produced.  Each case runs
against both references (Debian 12's 1.1.1 and sid's 1.9.1, ``any_reference``) in a throwaway node
namespace: ADD through the reference binaries (portmap on its default iptables backend, bridge
masquerade on iptables; with 1.9.1 also both on nftables), DEL through ours, then the kernel is
read back (``nft -j list ruleset``, ``iptables-save``/``ip6tables-save``, links, qdiscs, IPAM
reservations, tuning's backup, macspoofchk's ``bridge nat`` chains) for anything of that container, and a new pod of ours takes the
hostPort the reference pod held (TCP from a client namespace).  Another reference pod on the same
node keeps its rules and its hostPort throughout.
"""

from __future__ import annotations

import json
import os

import pytest

from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.common import reference_rules
from cnichain.plugins.bandwidth.config import ifb_name
from tests.conftest import reference_dir_of
from tests.integration.portmap_traffic import CLIENT4, CLIENT6, NODE4, NODE6, fetch, serve, wait_no_tentative

pytestmark = pytest.mark.integration


def conflist(lab, *, nft: bool = False, masq: bool = True) -> ConfList:
    """bridge (ipMasq) + portmap + bandwidth + tuning, as a node running the reference has it;
    ``nft`` selects the reference's nftables backends (1.9.1 only)."""
    bridge = {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": masq, "hairpinMode": True,
              "macspoofchk": True,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.79.0.0/24"}], [{"subnet": "fd00:79::/64"}]],
                       "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}], "dataDir": lab.path("ipam")}}
    portmap = {"type": "portmap", "capabilities": {"portMappings": True}}
    if nft:
        bridge["ipMasqBackend"] = "nftables"
        portmap["backend"] = "nftables"
    return ConfList.from_dict({"cniVersion": "1.0.0", "name": "swapnet", "plugins": [
        bridge, portmap,
        {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        {"type": "tuning", "mtu": 1400, "dataDir": lab.path("tuning")},
    ]})


def attachment(lab, cid: str, port: int) -> Attachment:
    return Attachment(cid, lab.netns(cid), "eth0", capability_args={
        "portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"}],
        "bandwidth": {"ingressRate": 8_000_000, "ingressBurst": 80_000, "egressRate": 8_000_000, "egressBurst": 80_000},
    })


def node_state(lab) -> str:
    """Everything of the node's firewall, links and qdiscs as text."""
    parts = [lab.run(lab.node, "nft", "list", "ruleset").stdout]
    for tool in ("iptables-save", "ip6tables-save"):
        parts.append(lab.run(lab.node, tool, check=False).stdout)
    parts.append(lab.run(lab.node, "ip", "-o", "link", "show").stdout)
    parts.append(lab.run(lab.node, "tc", "qdisc", "show").stdout)
    return "\n".join(parts)


def traces_of(lab, cid: str, ifname: str = "eth0") -> list[str]:
    """What the kernel and the state directories still hold for container ``cid``."""
    names = [reference_rules.iptables_chain("swapnet", cid, p)
             for p in ("", reference_rules.PORTMAP_DNAT_PREFIX, reference_rules.PORTMAP_OLD_SNAT_PREFIX)]
    needles = names + [cid, reference_rules.masq_comment_prefix("swapnet", ifname, cid), ifb_name("swapnet", cid)]
    found = [line.strip() for line in node_state(lab).splitlines() if any(n in line for n in needles)]
    ruleset = json.loads(lab.run(lab.node, "nft", "-j", "list", "ruleset").stdout)["nftables"]
    found += [json.dumps(o) for o in ruleset if "rule" in o and cid in str(o["rule"].get("comment", ""))]
    for sub in ("ipam", "tuning"):
        root = lab.path(sub)
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                path = os.path.join(dirpath, f)
                with open(path, errors="replace") as fh:
                    if cid in f or cid in fh.read():
                        found.append(path)
    return found


@pytest.fixture
def client(lab):
    ns = lab.netns("client")
    lab.wire(ns, [f"{CLIENT4}/24", f"{CLIENT6}/64"], [f"{NODE4}/24", f"{NODE6}/64"], "cli")
    lab.run(lab.node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    return ns


# Every reference with every portmap backend it has (1.1.1 has no nftables backend).
REFERENCE_BACKENDS = [("1.1.1", "iptables"), ("1.9.1", "iptables"), ("1.9.1", "nftables")]


@pytest.mark.parametrize("version,backend", REFERENCE_BACKENDS, ids=[f"ref{v}-{b}" for v, b in REFERENCE_BACKENDS])
def test_reference_pods_are_torn_down_by_our_del(lab, client, make_runtime, plugin_dir, version, backend):
    ref_dir = reference_dir_of(version)
    conf = conflist(lab, nft=backend == "nftables")
    reference = make_runtime([ref_dir])
    ours = make_runtime([plugin_dir, ref_dir])  # the same cache: libcni's, handed over with the node

    old, other = attachment(lab, "refpod1", 8080), attachment(lab, "refpod2", 8081)
    reference.add(conf, old)
    reference.add(conf, other)
    wait_no_tentative(lab, lab.node)
    servers = [serve(lab, old.netns, 80, "old"), serve(lab, other.netns, 80, "other")]
    try:
        assert fetch(lab, client, NODE4, 8080) == "old"
        assert fetch(lab, client, NODE4, 8081) == "other"
        before = traces_of(lab, "refpod1")
        assert any(ifb_name("swapnet", "refpod1") in t for t in before)
        assert any(t.startswith(lab.path("ipam")) for t in before) and any(t.startswith(lab.path("tuning")) for t in before)
        if backend == "iptables":
            saved = lab.run(lab.node, "iptables-save", "-t", "nat").stdout
            assert reference_rules.iptables_chain("swapnet", "refpod1", "DN-") in saved
            assert reference_rules.iptables_chain("swapnet", "refpod1") in saved
        else:
            tables = lab.run(lab.node, "nft", "list", "tables").stdout
            assert "ip cni_hostport" in tables and "inet cni_plugins_masquerade" in tables
        assert "cni-br-iface-refpod1-eth0" in lab.run(lab.node, "nft", "list", "table", "bridge", "nat").stdout

        # CRI-O runs CHECK on restart: ours accepts the reference's rules of a pod it set up
        ours.check(conf, old)
        ours.delete(conf, old)
        assert traces_of(lab, "refpod1") == []
        assert ifb_name("swapnet", "refpod2") in lab.run(lab.node, "ip", "-o", "link", "show").stdout  # stays
        assert fetch(lab, client, NODE4, 8081) == "other"  # the other reference pod is untouched
        assert traces_of(lab, "refpod2")

        # the hostPort the reference pod held now reaches our next pod
        new = attachment(lab, "ourpod", 8080)
        ours.add(conf, new)
        wait_no_tentative(lab, new.netns)
        servers.append(serve(lab, new.netns, 80, "new"))
        assert fetch(lab, client, NODE4, 8080) == "new"
        assert fetch(lab, client, NODE6, 8080) == "new"
        ours.delete(conf, new)
        ours.delete(conf, other)  # and the second reference pod, for a clean node
        assert traces_of(lab, "refpod2") == [] and traces_of(lab, "ourpod") == []
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()


def test_the_way_back_as_far_as_the_reference_goes(lab, client, make_runtime, plugin_dir, any_reference):
    """Our pod, torn down by the reference after a swap back: links, reservations, the IFB and
    tuning's backup go (shared names and formats); our nftables tables stay until an operator
    deletes them (docs/operating.md), since the reference does not know them.  With ``ipMasq`` the
    reference's bridge DEL fails on a pod it did not masquerade itself (its iptables teardown
    takes the missing ``CNI-<hash>`` chain for an error), so such pods are deleted before going back."""
    _version, ref_dir = any_reference
    from cnichain.plugins.bridge.rules import MASQ_TABLE, SPOOF_TABLE
    from cnichain.plugins.portmap import names

    ours, reference = make_runtime([plugin_dir, ref_dir]), make_runtime([ref_dir])
    masq = conflist(lab)
    pinned = attachment(lab, "masqpod", 8081)
    ours.add(masq, pinned)
    with pytest.raises(PluginFailed) as info:
        reference.delete(masq, pinned)
    assert "does not exist" in info.value.error.msg  # the reference's limit, pinned by this test
    ours.delete(masq, pinned)

    conf = conflist(lab, masq=False)
    att = attachment(lab, "ourpod", 8080)
    ours.add(conf, att)
    reference.delete(conf, att)
    left = traces_of(lab, "ourpod")
    assert not [t for t in left if t.startswith(lab.path()) or ifb_name("swapnet", "ourpod") in t]
    assert "eth0" not in lab.run(att.netns, "ip", "-o", "link", "show").stdout
    tables = lab.run(lab.node, "nft", "list", "tables").stdout
    assert f"inet {names.TABLE}" in tables  # documented: ours stay
    for family, table in (("inet", names.TABLE), ("inet", MASQ_TABLE), ("bridge", SPOOF_TABLE)):
        lab.run(lab.node, "nft", "delete", "table", family, table, check=False)  # the step docs/operating.md gives
    assert traces_of(lab, "ourpod") == [] and traces_of(lab, "masqpod") == []
