"""bridge against a real kernel: pods in throwaway namespaces, real traffic, kernel state read back.

Every test runs the plugin as a process through the Runtime (ours first on CNI_PATH, the reference
Go plugins after it, so IPAM delegation finds a host-local either way) inside the lab's node netns.

As in the reference's bridge_test.go, every kernel case runs once per spec version (``cni_version``;
cases about what CHECK detects: ``check_version``), and checks that version's result shape and
CHECK rule (tests/specver.py).  Single on purpose: GC (exists at 1.1.0 only), the corpus and the
shipped conflist (each file carries its own cniVersion).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cnichain.tools.lab import Lab
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.common.errors import Code
from cnichain.plugins.bridge.rules import MASQ_TABLE, POD_NETS, SPOOF_TABLE
from cnichain.plugins.host_local.kernel import LAST_IP_PREFIX, LOCK_NAME
from tests.specver import (
    ALL_VERSIONS,
    assert_failed,
    assert_result_shape,
    check_as_runtime,
    expects_gc,
    ips_carry_version,
    result_has_interfaces,
    result_ips,
    result_routes,
)

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


def bridge_conf(lab, version="1.0.0", name="brnet", subnets=("10.77.0.0/24",), routes=None, **keys) -> ConfList:
    ranges = [[{"subnet": s}] for s in subnets]
    if routes is None:
        routes = [{"dst": "0.0.0.0/0" if ":" not in s else "::/0"} for s in subnets]
    plugin = {"type": "bridge", "bridge": "cni0", "isGateway": True,
              "ipam": {"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": lab.path("ipam")}}
    plugin.update(keys)
    return ConfList.from_dict({"cniVersion": version, "name": name, "plugins": [plugin]})


@pytest.fixture
def runtime(make_runtime, plugin_dir, reference_dir):
    return make_runtime([plugin_dir, reference_dir])


def run_bridge(lab, plugin_dir, command, conf: dict, netns="", cid="ctr1", ifname="eth0"):
    """Exec our bridge directly (for DELs with odd CNI_NETNS values)."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_PATH": f"{plugin_dir}:/usr/lib/cni", "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run(["ip", "netns", "exec", os.path.basename(lab.node), os.path.join(plugin_dir, "bridge")],
                          input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=60)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else None)


def single_conf(conflist: ConfList, plugin_index=0) -> dict:
    conf = dict(conflist.plugins[plugin_index])
    conf.update(name=conflist.name, cniVersion=conflist.cni_version)
    return conf


def ping(lab, ns, addr, count=1) -> bool:
    return lab.run(ns, "ping", "-c", str(count), "-W", "2", addr, check=False).returncode == 0


def links(lab, ns) -> set[str]:
    out = lab.run(ns, "ip", "-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()}


def ruleset(lab) -> str:
    return lab.run(lab.node, "nft", "list", "ruleset").stdout


def reserved(lab, network) -> dict[str, str]:
    """host-local's reservations: address file -> owner line."""
    folder = os.path.join(lab.workdir, "ipam", network)
    out = {}
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if name == LOCK_NAME or name.startswith(LAST_IP_PREFIX):
                continue
            with open(os.path.join(folder, name)) as fh:
                out[name] = fh.read()
    return out


# -- connectivity ----------------------------------------------------------------------------------

def bridge_ports(lab: Lab, bridge: str = "cni0") -> set[str]:
    """The links enslaved to ``bridge`` in the node: the host veths, whatever the result shows."""
    out = lab.run(lab.node, "ip", "-o", "link", "show", "master", bridge).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()}


def test_two_pods_ping_each_other_and_gateway(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version)
    pods = [lab.netns("pod1"), lab.netns("pod2")]
    results = [runtime.add(conf, Attachment(f"ctr{i}", p, "eth0")) for i, p in enumerate(pods)]
    addrs = [result_ips(r)[0]["address"].split("/")[0] for r in results]
    assert addrs[0] != addrs[1]
    for r, p in zip(results, pods):
        assert_result_shape(r, cni_version)
        assert all(ip["gateway"] == "10.77.0.1" for ip in result_ips(r))
        if result_has_interfaces(cni_version):
            names = [i["name"] for i in r["interfaces"]]
            assert names[0] == "cni0" and names[1].startswith("veth") and len(names[1]) == 12 and names[2] == "eth0"
            assert r["interfaces"][2]["sandbox"] == p
            assert all(ip["interface"] == 2 for ip in r["ips"])
        assert ping(lab, p, "10.77.0.1")
        check_as_runtime(runtime, conf, Attachment(f"ctr{results.index(r)}", p, "eth0"))
    assert ping(lab, pods[0], addrs[1]) and ping(lab, pods[1], addrs[0])
    # host veths are ports of cni0, bridge carries the gateway, forwarding on
    ports = bridge_ports(lab)
    assert len(ports) == 2 and all(n.startswith("veth") for n in ports)
    if result_has_interfaces(cni_version):
        assert ports == {r["interfaces"][1]["name"] for r in results}
    assert "10.77.0.1/24" in lab.run(lab.node, "ip", "-o", "addr", "show", "cni0").stdout
    assert lab.run(lab.node, "sysctl", "-n", "net.ipv4.ip_forward").stdout.strip() == "1"
    for i, p in enumerate(pods):
        runtime.delete(conf, Attachment(f"ctr{i}", p, "eth0"))
        assert "eth0" not in links(lab, p)
    assert reserved(lab, "brnet") == {}
    assert lab.run(lab.node, "ip", "-o", "link", "show", "master", "cni0").stdout.strip() == ""


def test_dual_stack(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, subnets=("10.78.0.0/24", "fd78::/64"), ipMasq=True)
    p1, p2 = lab.netns("pod1"), lab.netns("pod2")
    r1 = runtime.add(conf, Attachment("c1", p1, "eth0"))
    r2 = runtime.add(conf, Attachment("c2", p2, "eth0"))
    assert_result_shape(r1, cni_version)
    fams = sorted(":" in ip["address"] for ip in result_ips(r1))
    assert fams == [False, True]
    assert {r["dst"] for r in result_routes(r1)} == {"0.0.0.0/0", "::/0"}
    if ips_carry_version(cni_version):
        assert sorted(ip["version"] for ip in r1["ips"]) == ["4", "6"]
    v6_2 = next(ip["address"] for ip in result_ips(r2) if ":" in ip["address"]).split("/")[0]
    v4_2 = next(ip["address"] for ip in result_ips(r2) if ":" not in ip["address"]).split("/")[0]
    assert ping(lab, p1, "fd78::1") and ping(lab, p1, v6_2) and ping(lab, p1, v4_2)
    assert "default via fd78::1" in lab.run(p1, "ip", "-6", "route").stdout
    assert "tentative" not in lab.run(p1, "ip", "-6", "addr", "show", "eth0").stdout
    assert lab.run(lab.node, "sysctl", "-n", "net.ipv6.conf.all.forwarding").stdout.strip() == "1"
    rules = ruleset(lab)
    assert f"{v6_2} comment" in rules and f"{v4_2} comment" in rules  # owned, both families
    assert "ip6 daddr != fd78::/64 ip6 daddr != ff00::/8 masquerade" in rules
    assert "ip daddr != 10.78.0.0/24 ip daddr != 224.0.0.0/4 masquerade" in rules
    check_as_runtime(runtime, conf, Attachment("c1", p1, "eth0"))
    runtime.delete(conf, Attachment("c1", p1, "eth0"))
    runtime.delete(conf, Attachment("c2", p2, "eth0"))
    rules = ruleset(lab)
    assert v6_2 not in rules and v4_2 not in rules and "id: c1" not in rules


def test_enabledad_waits_for_dad(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, subnets=("fd79::/64",), enabledad=True)
    pod = lab.netns("pod")
    lab.prompt_dad(pod)  # still tentative for a second: the wait stays observable
    res = runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_result_shape(res, cni_version)
    assert [ip["address"] for ip in result_ips(res)] == ["fd79::2/64"]
    addr = lab.run(pod, "ip", "-6", "addr", "show", "eth0").stdout
    assert "fd79::2/64" in addr and "tentative" not in addr
    assert lab.run(pod, "sysctl", "-n", "net.ipv6.conf.eth0.accept_dad").stdout.strip() == "1"
    assert ping(lab, pod, "fd79::1")


# -- masquerade ------------------------------------------------------------------------------------

SERVER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('192.0.2.2', 18080)); s.listen(1); s.settimeout(20)\n"
    "print('ready', flush=True)\n"
    "c,a=s.accept(); print(a[0], flush=True)\n"
)
CLIENT = "import socket; socket.create_connection(('192.0.2.2', 18080), timeout=5).close()"


def _peer_seen_by_outside(lab, pod, outside) -> str:
    server = lab.popen(outside, sys.executable, "-c", SERVER, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        lab.run(pod, sys.executable, "-c", CLIENT, timeout=20)
        out, _ = server.communicate(timeout=20)
        return out.strip()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=5)


def test_masquerade_to_outside(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, ipMasq=True)
    outside = lab.netns("out")
    lab.wire(outside, ["192.0.2.2/24"], ["192.0.2.1/24"], "out")  # no route back to the pod subnet
    pod = lab.netns("pod")
    res = runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_result_shape(res, cni_version)
    pod_ip = result_ips(res)[0]["address"].split("/")[0]
    assert _peer_seen_by_outside(lab, pod, outside) == "192.0.2.1"  # the node's address, not pod_ip
    # traffic inside the pod subnet is not masqueraded: a second pod sees the real source
    assert pod_ip in ruleset(lab)
    runtime.delete(conf, Attachment("c1", pod, "eth0"))
    assert pod_ip not in ruleset(lab)


def test_no_masquerade_without_ipmasq(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version)
    outside = lab.netns("out")
    lab.wire(outside, ["192.0.2.2/24"], ["192.0.2.1/24"], "out")
    lab.run(outside, "ip", "route", "add", "10.77.0.0/24", "via", "192.0.2.1")
    pod = lab.netns("pod")
    res = runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert _peer_seen_by_outside(lab, pod, outside) == result_ips(res)[0]["address"].split("/")[0]
    assert MASQ_TABLE not in ruleset(lab)


def test_del_with_netns_gone_or_empty_removes_masquerade(lab, runtime, plugin_dir, cni_version):
    """Upstream #810: the reference leaks the masquerade rules here; we must not."""
    conf = bridge_conf(lab, version=cni_version, ipMasq=True)
    p1, p2 = lab.netns("pod1"), lab.netns("pod2")
    runtime.add(conf, Attachment("gone1", p1, "eth0"))
    runtime.add(conf, Attachment("gone2", p2, "eth0"))
    assert "id: gone1" in ruleset(lab) and "id: gone2" in ruleset(lab)
    lab.delete_netns(p1)
    code, out = run_bridge(lab, plugin_dir, "DEL", single_conf(conf), netns=p1, cid="gone1")
    assert code == 0, out
    code, out = run_bridge(lab, plugin_dir, "DEL", single_conf(conf), netns="", cid="gone2")
    assert code == 0, out
    rules = ruleset(lab)
    assert "id: gone1" not in rules and "id: gone2" not in rules
    assert reserved(lab, "brnet") == {}
    # and again: everything already gone is still a success
    for cid, ns in (("gone1", p1), ("gone2", "")):
        assert run_bridge(lab, plugin_dir, "DEL", single_conf(conf), netns=ns, cid=cid)[0] == 0


def test_del_twice_and_check(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, ipMasq=True, hairpinMode=True)
    pod = lab.netns("pod")
    att = Attachment("c1", pod, "eth0")
    runtime.add(conf, att)
    check_as_runtime(runtime, conf, att)
    assert "hairpin on" in lab.run(lab.node, "bridge", "-d", "link", "show").stdout
    runtime.delete(conf, att)
    runtime.delete(conf, att)


def test_check_detects_damage(lab, runtime, check_version):
    conf = bridge_conf(lab, version=check_version, ipMasq=True)
    pod = lab.netns("pod")
    att = Attachment("c1", pod, "eth0")
    res = runtime.add(conf, att)
    lab.run(pod, "ip", "route", "del", "default")
    with pytest.raises(PluginFailed) as info:
        runtime.check(conf, att)
    assert_failed(info.value, Code.INTERNAL, "Expected Route 0.0.0.0/0", prefix=True)
    lab.run(pod, "ip", "route", "add", "default", "via", "10.77.0.1")
    runtime.check(conf, att)
    lab.run(lab.node, "nft", "flush", "map", "inet", MASQ_TABLE, POD_NETS[4])
    with pytest.raises(PluginFailed) as info:
        runtime.check(conf, att)
    assert_failed(info.value, Code.INTERNAL, "masquerade rule for 10.77.0.2 (c1/eth0) is missing")
    lab.run(pod, "ip", "addr", "del", res["ips"][0]["address"], "dev", "eth0")
    with pytest.raises(PluginFailed) as info:
        runtime.check(conf, att)
    assert_failed(info.value, Code.INTERNAL, "Failed to match addr 10.77.0.2/24 on interface eth0")


# -- every version ---------------------------------------------------------------------------------

def test_result_in_every_version(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version)
    pod = lab.netns("pod")
    att = Attachment("c1", pod, "eth0")
    res = runtime.add(conf, att)
    assert_result_shape(res, cni_version)
    if result_has_interfaces(cni_version):
        assert res["interfaces"][2]["name"] == "eth0"
    else:
        assert res["ip4"]["ip"].startswith("10.77.0.") and res["ip4"]["gateway"] == "10.77.0.1"
    check_as_runtime(runtime, conf, att)
    runtime.delete(conf, att)
    runtime.delete(conf, att)
    assert "eth0" not in links(lab, pod)


# -- failure injection -----------------------------------------------------------------------------

def _state(lab, pod):
    return links(lab, lab.node), links(lab, pod), ruleset(lab)


def test_ipam_exhausted_leaves_nothing(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, subnets=("10.79.0.0/30",), ipMasq=True)  # one usable address
    p1, p2 = lab.netns("pod1"), lab.netns("pod2")
    runtime.add(conf, Attachment("c1", p1, "eth0"))
    before = _state(lab, p2)
    held = reserved(lab, "brnet")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c2", p2, "eth0"))
    assert_failed(info.value, Code.INTERNAL,
                  "failed to allocate for range 0: no IP addresses available in range set: 10.79.0.1-10.79.0.2")
    assert _state(lab, p2) == before
    assert reserved(lab, "brnet") == held


def test_failure_on_fresh_node_removes_new_bridge(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, subnets=("10.79.0.0/31",))  # host-local cannot allocate from a /31
    pod = lab.netns("pod")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_failed(info.value, Code.INTERNAL, "invalid range set 0: Network 10.79.0.0/31 too small to allocate from")
    assert links(lab, lab.node) == {"lo"}
    assert links(lab, pod) == {"lo"}


def test_interface_name_taken_leaves_nothing(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, ipMasq=True)
    pod = lab.netns("pod")
    lab.run(pod, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0peer")
    runtime.add(conf, Attachment("c0", lab.netns("other"), "eth0"))  # bridge exists already
    before = _state(lab, pod)
    held = reserved(lab, "brnet")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_failed(info.value, Code.INTERNAL, 'container veth name ("eth0") peer provided ("veth', prefix=True)
    assert _state(lab, pod) == before
    assert reserved(lab, "brnet") == held


def test_failure_after_ipam_rolls_back(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, ipMasq=True)
    pod = lab.netns("pod")
    lab.run(lab.node, "ip", "link", "add", "cni0", "type", "bridge")
    lab.run(lab.node, "ip", "addr", "add", "10.50.0.1/24", "dev", "cni0")
    before = _state(lab, pod)
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_failed(info.value, Code.INTERNAL, '"cni0" already has an IP address different from 10.77.0.1/24', prefix=True)
    assert _state(lab, pod) == before
    assert reserved(lab, "brnet") == {}
    # forceAddress replaces it
    forced = bridge_conf(lab, version=cni_version, ipMasq=True, forceAddress=True)
    runtime.add(forced, Attachment("c1", pod, "eth0"))
    addrs = lab.run(lab.node, "ip", "-o", "-4", "addr", "show", "cni0").stdout
    assert "10.77.0.1/24" in addrs and "10.50.0.1" not in addrs


def test_existing_non_bridge_is_refused(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version)
    lab.run(lab.node, "ip", "link", "add", "cni0", "type", "veth", "peer", "name", "cni0peer")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", lab.netns("pod"), "eth0"))
    assert_failed(info.value, Code.INTERNAL, 'failed to create bridge "cni0": "cni0" already exists but is not a bridge')
    assert reserved(lab, "brnet") == {}


def test_missing_netns_is_an_error_and_creates_nothing(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version)
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", "/run/netns/cnit-does-not-exist", "eth0"))
    assert_failed(info.value, Code.INVALID_NETNS,
                  'failed to open netns "/run/netns/cnit-does-not-exist": no such file or directory')
    assert links(lab, lab.node) == {"lo"}


# -- options ---------------------------------------------------------------------------------------

def test_mtu_mac_promisc_and_l2(lab, runtime, chained_version):
    """From 0.3.0 on: a 0.1/0.2 result cannot describe an attachment without an address (libcni
    refuses to convert it: "cannot convert: no valid IP addresses"), so the reference runs its L2
    cases from 0.3.0 on too."""
    cni_version = chained_version
    conf = ConfList.from_dict({"cniVersion": cni_version, "name": "l2net", "plugins": [
        {"type": "bridge", "bridge": "br-l2", "mtu": 1400, "promiscMode": True, "capabilities": {"mac": True}}]})
    pod = lab.netns("pod")
    att = Attachment("c1", pod, "eth1", capability_args={"mac": "02:11:22:33:44:55"})
    res = runtime.add(conf, att)
    assert_result_shape(res, cni_version)
    assert "ips" not in res and result_ips(res) == []
    if result_has_interfaces(cni_version):
        assert res["interfaces"][2] == {"name": "eth1", "mac": "02:11:22:33:44:55", "sandbox": pod}
    eth1 = lab.run(pod, "ip", "-o", "link", "show", "eth1").stdout
    assert "mtu 1400" in eth1 and "02:11:22:33:44:55" in eth1 and "state UP" in eth1
    (host_veth,) = bridge_ports(lab, "br-l2")
    if result_has_interfaces(cni_version):
        assert res["interfaces"][1]["name"] == host_veth
    host = lab.run(lab.node, "ip", "-o", "link", "show", host_veth).stdout
    assert "mtu 1400" in host and "master br-l2" in host
    assert "PROMISC" in lab.run(lab.node, "ip", "-o", "link", "show", "br-l2").stdout
    check_as_runtime(runtime, conf, att)
    runtime.delete(conf, att)


def _mac(lab: Lab, ns: str, ifname: str = "eth0") -> str:
    return json.loads(lab.run(ns, "ip", "-j", "link", "show", ifname).stdout)[0]["address"]


def test_macspoofchk_drops_spoofed_frames(lab, runtime, cni_version):
    conf = bridge_conf(lab, version=cni_version, macspoofchk=True)
    pod = lab.netns("pod")
    att = Attachment("c1", pod, "eth0")
    res = runtime.add(conf, att)
    mac = _mac(lab, pod)
    if result_has_interfaces(cni_version):
        assert res["interfaces"][2]["mac"] == mac
    rules = ruleset(lab)
    assert f"table bridge {SPOOF_TABLE}" in rules and mac in rules
    assert ping(lab, pod, "10.77.0.1")
    lab.run(pod, "ip", "link", "set", "eth0", "address", "02:de:ad:be:ef:01")
    lab.run(lab.node, "ip", "neigh", "flush", "dev", "cni0")
    assert not ping(lab, pod, "10.77.0.1")
    lab.run(pod, "ip", "link", "set", "eth0", "address", mac)
    assert ping(lab, pod, "10.77.0.1", count=2) or ping(lab, pod, "10.77.0.1")
    runtime.delete(conf, att)
    assert "id: c1" not in ruleset(lab)


def _vlan_filtering_supported(lab) -> bool:
    """This kernel's answer to a VLAN-filtering bridge: made (True), or refused with EOPNOTSUPP
    (False: CONFIG_BRIDGE_VLAN_FILTERING unset).  Any other failure of the probe fails the test."""
    ok = lab.run(lab.node, "ip", "link", "add", "vfprobe", "type", "bridge", "vlan_filtering", "1", check=False)
    lab.run(lab.node, "ip", "link", "del", "vfprobe", check=False)
    if ok.returncode == 0:
        return True
    assert "Operation not supported" in ok.stderr, ok.stderr
    return False


def test_vlan_port(lab, runtime, cni_version):
    if not _vlan_filtering_supported(lab):
        pytest.skip("this kernel has no bridge VLAN filtering (CONFIG_BRIDGE_VLAN_FILTERING)")
    conf = ConfList.from_dict({"cniVersion": cni_version, "name": "vl", "plugins": [
        {"type": "bridge", "bridge": "brv", "vlan": 100}]})
    pod = lab.netns("pod")
    res = runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_result_shape(res, cni_version)
    (host_veth,) = bridge_ports(lab, "brv")
    show = lab.run(lab.node, "bridge", "vlan", "show", "dev", host_veth).stdout
    assert "100 PVID" in show.replace("  ", " ") and " 1 " not in show


def test_vlan_unsupported_kernel_is_a_clear_error(lab, runtime, cni_version):
    """The kernel's own refusal (EOPNOTSUPP, probed above) comes back as CNI error JSON that
    names the bridge and the kernel's reason, with nothing made: no bridge, veth or pod link."""
    if _vlan_filtering_supported(lab):
        pytest.skip("this kernel has bridge VLAN filtering, so it refuses no VLAN bridge")
    conf = ConfList.from_dict({"cniVersion": cni_version, "name": "vl", "plugins": [
        {"type": "bridge", "bridge": "brv", "vlan": 100}]})
    pod = lab.netns("pod")
    before = lab.run(lab.node, "ip", "-o", "link", "show").stdout.count("\n")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", pod, "eth0"))
    assert_failed(info.value, Code.INTERNAL, 'failed to create bridge "brv": could not add "brv"', prefix=True)
    error = info.value.error
    assert "not supported" in f"{error.msg} {error.details}".lower(), (error.msg, error.details)
    assert lab.run(lab.node, "ip", "link", "show", "brv", check=False).returncode != 0
    assert lab.run(lab.node, "ip", "-o", "link", "show").stdout.count("\n") == before
    assert "eth0" not in lab.run(pod, "ip", "-o", "link", "show").stdout


def test_gc_removes_rules_of_unknown_attachments(lab, runtime):
    """Single: GC exists at 1.1.0 only (our host-local, first on the runtime's path, speaks it)."""
    conf = bridge_conf(lab, version="1.1.0", ipMasq=True)
    p1, p2 = lab.netns("pod1"), lab.netns("pod2")
    runtime.add(conf, Attachment("keep", p1, "eth0"))
    runtime.add(conf, Attachment("lost", p2, "eth0"))
    runtime.gc(conf, [("keep", "eth0")])
    rules = ruleset(lab)
    assert "id: keep" in rules and "id: lost" not in rules
    runtime.status(conf)


# -- drop-in: the reference side by side, the corpus -----------------------------------------------

def _pod_view(lab, pod) -> tuple[str, str]:
    addrs = lab.run(pod, "ip", "-o", "-4", "addr", "show", "eth0").stdout.split()
    routes = lab.run(pod, "ip", "route").stdout
    return [a for a in addrs if "/" in a][0], routes


@pytest.mark.parametrize("cni_version", [v for v in ALL_VERSIONS if not expects_gc(v)])  # Debian's bridge stops at 1.0.0
def test_same_observable_state_as_reference(lab, make_runtime, plugin_dir, any_reference, cni_version):
    reference_dir = any_reference[1]
    ours, ref = make_runtime([plugin_dir, reference_dir]), make_runtime([reference_dir])
    p1, p2 = lab.netns("p1"), lab.netns("p2")
    res_ours = ours.add(bridge_conf(lab, version=cni_version, name="ours", isDefaultGateway=True, routes=[]),
                        Attachment("c1", p1, "eth0"))
    res_ref = ref.add(bridge_conf(lab, version=cni_version, name="ref", subnets=("10.76.0.0/24",),
                                  isDefaultGateway=True, routes=[], bridge="cni1"), Attachment("c2", p2, "eth0"))
    for res in (res_ours, res_ref):
        assert_result_shape(res, cni_version)
    # the same result, field for field, at every version: only the subnet and link names differ
    assert set(res_ref) - {"dns"} == set(res_ours) - {"dns"}
    assert result_ips(res_ours) == [json.loads(json.dumps(ip).replace("10.76.", "10.77.")) for ip in result_ips(res_ref)]
    assert [(ip["address"], ip["gateway"]) for ip in result_ips(res_ours)] == [("10.77.0.2/24", "10.77.0.1")]
    assert result_routes(res_ours) == [{"dst": "0.0.0.0/0", "gw": "10.77.0.1"}]
    assert result_routes(res_ref) == [{"dst": "0.0.0.0/0", "gw": "10.76.0.1"}]
    if result_has_interfaces(cni_version):
        assert res_ours["ips"][0]["interface"] == 2
        assert [sorted(i) for i in res_ours["interfaces"]] == [sorted(i) for i in res_ref["interfaces"]]
        assert [i["name"][:4] for i in res_ours["interfaces"][1:]] == [i["name"][:4] for i in res_ref["interfaces"][1:]]
    view_ours, view_ref = _pod_view(lab, p1), _pod_view(lab, p2)
    assert view_ours[0] == "10.77.0.2/24" and view_ref[0] == "10.76.0.2/24"
    assert view_ours[1].replace("10.77.", "X.") == view_ref[1].replace("10.76.", "X.")
    for key in ("net.ipv4.conf.eth0.arp_notify", "net.ipv6.conf.eth0.accept_dad"):
        assert lab.run(p1, "sysctl", "-n", key).stdout == lab.run(p2, "sysctl", "-n", key).stdout


@pytest.mark.parametrize("corpus_file", [
    "containerd-install-cni.conflist",
    "kubernetes-local-up-cluster.conflist",
    "minikube-bridge.conflist",
    "podman-87-podman-bridge.conflist",
])
def test_corpus_bridge_entries_work_unchanged(lab, runtime, corpus_file):
    """Single per file: each corpus file carries its own cniVersion."""
    with open(os.path.join(CORPUS, corpus_file)) as fh:
        data = json.load(fh)
    entry = next(p for p in data["plugins"] if p["type"] == "bridge")
    entry = json.loads(json.dumps(entry))
    entry["ipam"]["dataDir"] = lab.path("ipam")  # the only change: keep IPAM state in the lab
    conf = ConfList.from_dict({"cniVersion": data["cniVersion"], "name": data["name"], "plugins": [entry]})
    pod = lab.netns("pod")
    att = Attachment("corpus1", pod, "eth0")
    res = runtime.add(conf, att)
    gw = res["ips"][0]["gateway"]
    assert ping(lab, pod, gw)
    runtime.check(conf, att)
    runtime.delete(conf, att)
    runtime.delete(conf, att)
    assert "eth0" not in links(lab, pod)


def test_shipped_conflist_works(lab, runtime):
    """Single: the shipped file carries its own cniVersion (the per-version cases are above)."""
    from cnichain.tools.lab import isolate_conflist

    path = os.path.join(os.path.dirname(__file__), "..", "..", "conflists", "bridge-host-local.conflist")
    with open(path) as fh:
        conf = ConfList.from_dict(isolate_conflist(json.load(fh), lab.workdir))
    pod = lab.netns("pod")
    att = Attachment("shipped1", pod, "eth0")
    res = runtime.add(conf, att)
    assert ping(lab, pod, res["ips"][0]["gateway"])
    runtime.check(conf, att)
    runtime.delete(conf, att)
