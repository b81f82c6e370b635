"""bridge ``vlan`` with ``isGateway`` against a real kernel, side by side with both references.

The reference puts the gateway on a ``<bridge>.<vlan>`` device: one end of a veth pair in the
host, whose other end is a bridge port with the VLAN as untagged PVID.  Pods on that VLAN reach
the gateway and each other; the device is shared and survives the pods' DEL.
"""

from __future__ import annotations

import json

import pytest

from cnichain.podstate.runtime import Attachment, ConfList

pytestmark = pytest.mark.integration


def conf(lab, name: str, bridge: str, subnet: str, vlan: int = 100) -> ConfList:
    return ConfList.from_dict({"cniVersion": "1.0.0", "name": name, "plugins": [{
        "type": "bridge", "bridge": bridge, "isGateway": True, "vlan": vlan,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": lab.path("ipam")},
    }]})


def link(lab, name: str) -> dict:
    return json.loads(lab.run(lab.node, "ip", "-j", "-d", "link", "show", name).stdout)[0]


def gateway_view(lab, bridge: str, vlan: int) -> dict:
    """The gateway device and its bridge port as the kernel reports them (names aside)."""
    dev = link(lab, f"{bridge}.{vlan}")
    addrs = json.loads(lab.run(lab.node, "ip", "-j", "-4", "addr", "show", f"{bridge}.{vlan}").stdout)[0]["addr_info"]
    ports = json.loads(lab.run(lab.node, "bridge", "-j", "vlan", "show").stdout)
    port_names = [p["ifname"] for p in ports]
    by_index = {json.loads(lab.run(lab.node, "ip", "-j", "link", "show", n).stdout)[0]["ifindex"]: n for n in port_names}
    peer_name = by_index[dev["link_index"]]
    peer_vlans = next(p["vlans"] for p in ports if p["ifname"] == peer_name)
    return {
        "kind": dev["linkinfo"]["info_kind"],
        "up": "UP" in dev["flags"],
        "addrs": [a["local"].rsplit(".", 1)[1] + "/" + str(a["prefixlen"]) for a in addrs],
        "peer_master": link(lab, peer_name).get("master"),
        "peer_vlans": [(v["vlan"], sorted(v.get("flags", []))) for v in peer_vlans],
    }


def _vlan_filtering_supported(lab) -> bool:
    """Made (True), or refused by the kernel with EOPNOTSUPP (False); a broken probe fails."""
    ok = lab.run(lab.node, "ip", "link", "add", "vfprobe", "type", "bridge", "vlan_filtering", "1", check=False)
    lab.run(lab.node, "ip", "link", "del", "vfprobe", check=False)
    if ok.returncode == 0:
        return True
    assert "Operation not supported" in ok.stderr, ok.stderr
    return False


def test_vlan_gateway_like_the_reference(lab, make_runtime, plugin_dir, any_reference):
    _version, ref_dir = any_reference
    if not _vlan_filtering_supported(lab):
        pytest.skip("this kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)")
    ours, ref = make_runtime([plugin_dir, ref_dir]), make_runtime([ref_dir])
    p1, p2, p3 = lab.netns("p1"), lab.netns("p2"), lab.netns("p3")
    c_ours = conf(lab, "vours", "brv0", "10.78.0.0/24")
    r1 = ours.add(c_ours, Attachment("c1", p1, "eth0"))
    r2 = ours.add(c_ours, Attachment("c2", p2, "eth0"))
    c_ref = conf(lab, "vref", "brv1", "10.79.0.0/24")
    rr = ref.add(c_ref, Attachment("c3", p3, "eth0"))

    # the result lists the gateway device after the pod's interface, as the reference does
    assert [i["name"] for i in r1["interfaces"]][0] == "brv0" and r1["interfaces"][3]["name"] == "brv0.100"
    assert [sorted(i) for i in r1["interfaces"]] == [sorted(i) for i in rr["interfaces"]]
    assert r1["ips"][0]["gateway"] == "10.78.0.1"
    assert gateway_view(lab, "brv0", 100) == gateway_view(lab, "brv1", 100)
    assert gateway_view(lab, "brv0", 100)["addrs"] == ["1/24"]

    ping = lambda ns, addr: lab.run(ns, "ping", "-c1", "-W2", addr, check=False).returncode == 0  # noqa: E731
    assert ping(p1, "10.78.0.1") and ping(p2, "10.78.0.1")
    assert ping(p1, r2["ips"][0]["address"].split("/")[0])
    ours.check(c_ours, Attachment("c1", p1, "eth0"))

    ours.delete(c_ours, Attachment("c1", p1, "eth0"))
    ours.delete(c_ours, Attachment("c2", p2, "eth0"))
    ref.delete(c_ref, Attachment("c3", p3, "eth0"))
    link(lab, "brv0.100")  # shared by the VLAN's pods: stays, as the reference's does
    link(lab, "brv1.100")
