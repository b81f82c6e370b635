"""route-override against a real kernel: the pod's IPv4 and IPv6 routes read back after ADD, CHECK
and DEL for every spec version; kernel errors reported; the README conflist run unchanged behind
bridge + host-local, with traffic through the route it adds.

Each kernel case runs once per spec version (``cni_version``; cases about what CHECK detects:
``check_version``), checking the version's result shape, prevResult conversion and CHECK rule
(tests/specver.py).  Single on purpose: a missing prevResult through the runtime (refused while
reading the config, before any version-dependent step).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.common.errors import Code
from cnichain.common.types import Result, Route
from tests.specver import (
    assert_check_refused,
    assert_cni_error,
    assert_failed,
    assert_result_shape,
    check_as_runtime,
    expects_check,
    expects_gc,
    ips_carry_version,
    result_has_interfaces,
    result_routes,
)

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


def exec_plugin(lab, plugin_dir, command, conf, netns, cid="ctr1", ifname="eth0"):
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_PATH": plugin_dir, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.run(["ip", "netns", "exec", os.path.basename(lab.node), os.path.join(plugin_dir, "route-override")],
                          input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=60)
    out = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, out, proc.stderr.decode()


def make_pod(lab):
    """A dual-stack pod: eth0 with addresses, default routes, one prevResult route and one extra."""
    pod = lab.netns("pod")
    for argv in (
        ("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0"),
        ("ip", "link", "set", "eth0", "up"),
        ("ip", "link", "set", "peer0", "up"),
        ("ip", "addr", "add", "10.1.0.5/24", "dev", "eth0"),
        ("ip", "-6", "addr", "add", "2001:db8::5/64", "dev", "eth0", "nodad"),
        ("ip", "route", "add", "default", "via", "10.1.0.1"),
        ("ip", "route", "add", "10.9.0.0/16", "via", "10.1.0.1"),
        ("ip", "route", "add", "192.168.7.0/24", "via", "10.1.0.1"),  # not in prevResult
        ("ip", "-6", "route", "add", "default", "via", "2001:db8::1"),
    ):
        lab.run(pod, *argv)
    return pod


def routes(lab, pod) -> set[tuple[str, str]]:
    """(dst, gateway) of every main-table route on eth0, both families."""
    out = set()
    for fam in ("-4", "-6"):
        for r in json.loads(lab.run(pod, "ip", "-j", fam, "route", "show", "dev", "eth0").stdout):
            out.add((r["dst"], r.get("gateway", "")))
    return out


def prev_result(version, netns) -> dict:
    if not result_has_interfaces(version):
        return {"cniVersion": version,
                "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1",
                        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.1"}]},
                "ip6": {"ip": "2001:db8::5/64", "gateway": "2001:db8::1", "routes": [{"dst": "::/0"}]}}
    v4 = {"version": "4"} if ips_carry_version(version) else {}
    v6 = {"version": "6"} if ips_carry_version(version) else {}
    return {"cniVersion": version,
            "interfaces": [{"name": "cni0", "mac": "0a:58:0a:01:00:01"}, {"name": "eth0", "mac": "0a:58:0a:01:00:05", "sandbox": netns}],
            "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1, **v4},
                    {"address": "2001:db8::5/64", "gateway": "2001:db8::1", "interface": 1, **v6}],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.1"}, {"dst": "::/0"}],
            "dns": {}}


def ro_conf(version, netns, **keys):
    conf = {"cniVersion": version, "name": "ronet", "type": "route-override", "prevResult": prev_result(version, netns)}
    conf.update(keys)
    return conf


KEYS = {
    "flushgateway": True,
    "delroutes": [{"dst": "192.168.7.0/24"}, {"dst": "10.9.0.0/16"}],
    "addroutes": [{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}, {"dst": "2001:db9::/64", "gw": "2001:db8::1"}],
}
AFTER = {
    ("10.1.0.0/24", ""),
    ("192.168.0.0/24", "10.1.0.254"),
    ("2001:db8::/64", ""),
    ("fe80::/64", ""),
    ("2001:db9::/64", "2001:db8::1"),
}


def test_add_check_del_in_every_version(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = ro_conf(cni_version, pod, **KEYS)
    rc, out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0, (out, err)
    expected = Result.from_dict(conf["prevResult"], cni_version)
    for ip in expected.ips:
        ip.gateway = "::" if ip.family == 6 else "0.0.0.0"
    # both defaults (flushgateway) and 10.9.0.0/16 (delroutes) go; the addroutes follow
    expected.routes = [Route("192.168.0.0/24", "10.1.0.254"), Route("2001:db9::/64", "2001:db8::1")]
    assert out == expected.to_dict(cni_version)
    assert_result_shape(out, cni_version)
    assert routes(lab, pod) == AFTER

    rc, out_check, err = exec_plugin(lab, plugin_dir, "CHECK", dict(conf, prevResult=out), pod)
    if expects_check(cni_version):
        assert (rc, out_check) == (0, None), err
    else:
        assert_check_refused(rc, out_check)
    for _ in range(2):
        rc, out_del, err = exec_plugin(lab, plugin_dir, "DEL", dict(conf, prevResult=out), pod)
        assert (rc, out_del) == (0, None), err
    assert routes(lab, pod) == AFTER  # DEL reverts nothing, as the reference


def test_no_keys_is_a_pass_through(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    before = routes(lab, pod)
    conf = ro_conf(cni_version, pod)
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0 and out == Result.from_dict(conf["prevResult"], cni_version).to_dict(cni_version)
    assert routes(lab, pod) == before


def test_flushroutes_keeps_connected_and_link_local(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = ro_conf(cni_version, pod, flushroutes=True, addroutes=[{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}])
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0
    assert_result_shape(out, cni_version)
    assert result_routes(out) == [{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}]
    assert routes(lab, pod) == {("10.1.0.0/24", ""), ("2001:db8::/64", ""), ("fe80::/64", ""), ("192.168.0.0/24", "10.1.0.254")}
    rc, out_check, _ = exec_plugin(lab, plugin_dir, "CHECK", dict(conf, prevResult=out), pod)
    if expects_check(cni_version):
        assert (rc, out_check) == (0, None)
    else:
        assert_check_refused(rc, out_check)
    # the peer interface is not the pod's result interface: its routes are untouched
    assert "fe80::/64" in lab.run(pod, "ip", "-6", "route", "show", "dev", "peer0").stdout


def test_kernel_errors_are_reported_and_tolerated(lab, plugin_dir, cni_version):
    """As the original route-override: a route the kernel refuses is printed to stderr and
    skipped, and ADD succeeds (a conflist that worked with it keeps creating pods)."""
    pod = make_pod(lab)
    conf = ro_conf(cni_version, pod, addroutes=[{"dst": "192.168.0.0/24", "gw": "10.99.0.1"},
                                                {"dst": "192.168.1.0/24", "gw": "10.1.0.1"}])
    rc, _out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0
    assert "failed to add route 192.168.0.0/24 via 10.99.0.1 dev eth0: Network is unreachable" in err
    routes = lab.run(pod, "ip", "route", "show").stdout
    assert "192.168.1.0/24 via 10.1.0.1" in routes and "192.168.0.0/24" not in routes  # the next one still added
    # a route that clashes with an existing one is reported too, an identical one silently passes
    conf = ro_conf(cni_version, pod, addroutes=[{"dst": "10.9.0.0/16", "gw": "10.1.0.7"}])
    rc, _out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0 and "failed to add route 10.9.0.0/16 via 10.1.0.7 dev eth0: File exists" in err
    conf = ro_conf(cni_version, pod, addroutes=[{"dst": "10.9.0.0/16", "gw": "10.1.0.1"}])
    rc, _out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0 and "failed" not in err
    # a route no kernel would take (host bits) is skipped the same way, the others still go in
    conf = ro_conf(cni_version, pod, addroutes=[{"dst": "192.168.5.1/24", "gw": "10.1.0.1"},
                                                {"dst": "192.168.6.0/24", "gw": "10.1.0.1"}])
    rc, out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0 and "destination has host bits set" in err
    assert "192.168.6.0/24 via 10.1.0.1" in lab.run(pod, "ip", "route", "show").stdout
    assert "192.168.5.0/24" not in lab.run(pod, "ip", "route", "show").stdout


def test_check_detects_drift_and_skipcheck(lab, plugin_dir, check_version):
    pod = make_pod(lab)
    conf = ro_conf(check_version, pod, **KEYS)
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0
    check = dict(conf, prevResult=out)
    lab.run(pod, "ip", "route", "add", "default", "via", "10.1.0.1")
    rc, out_check, _ = exec_plugin(lab, plugin_dir, "CHECK", check, pod)
    assert rc == 1
    assert_cni_error(out_check, 999, "route-override: route is not removed: 0.0.0.0/0 via 10.1.0.1", prefix=True)
    lab.run(pod, "ip", "route", "del", "default")
    lab.run(pod, "ip", "route", "del", "192.168.0.0/24")
    rc, out_check, _ = exec_plugin(lab, plugin_dir, "CHECK", check, pod)
    assert rc == 1
    assert_cni_error(out_check, 999, "route-override: route 192.168.0.0/24 is missing from the pod")
    assert exec_plugin(lab, plugin_dir, "CHECK", dict(check, skipcheck=True), pod)[0] == 0


def test_args_cni_override(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = ro_conf(cni_version, pod, flushgateway=False, args={"cni": {"flushgateway": True}})
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0 and [r["dst"] for r in result_routes(out)] == ["10.9.0.0/16"]
    assert_result_shape(out, cni_version)
    assert ("default", "10.1.0.1") not in routes(lab, pod) and ("default", "2001:db8::1") not in routes(lab, pod)


def test_netns_gone(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = ro_conf(cni_version, pod, **KEYS)
    lab.delete_netns(pod)
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 1
    assert_cni_error(out, 999, "failed to override routes: failed to open netns", prefix=True)
    for netns in (pod, ""):
        assert exec_plugin(lab, plugin_dir, "DEL", conf, netns)[:2] == (0, None)


@pytest.mark.parametrize("version", ["0.3.0", "1.1.0"])
def test_corpus_readme_conflist_behind_bridge(lab, make_runtime, plugin_dir, reference_dir, version):
    """The README's conflist with macvlan swapped for bridge + host-local; route-override as written
    (its entry has no version of its own: run below and above the CHECK/GC thresholds)."""
    with open(os.path.join(CORPUS, "routeoverride-readme.conflist")) as fh:
        data = json.load(fh)
    entry = data["plugins"][1]
    primary = {"type": "bridge", "bridge": "cni0", "isGateway": True,
               "ipam": {"type": "host-local", "subnet": "10.1.254.0/24", "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": lab.path("ipam")}}
    conf = ConfList.from_dict({"cniVersion": version, "name": data["name"], "plugins": [primary, entry]})
    runtime = make_runtime([plugin_dir, reference_dir])
    # a router on the bridge at the addroute's gateway, owning an address in 192.168.0.0/24
    rtr = lab.netns("rtr")
    lab.run(lab.node, "ip", "link", "add", "cni0", "type", "bridge")
    lab.run(lab.node, "ip", "link", "set", "cni0", "up")
    lab.run(lab.node, "ip", "link", "add", "vrtr", "type", "veth", "peer", "name", "eth0", "netns", os.path.basename(rtr))
    lab.run(lab.node, "ip", "link", "set", "vrtr", "master", "cni0", "up")
    lab.run(rtr, "ip", "addr", "add", "10.1.254.254/24", "dev", "eth0")
    lab.run(rtr, "ip", "link", "set", "eth0", "up")
    lab.run(rtr, "ip", "addr", "add", "192.168.0.1/32", "dev", "lo")

    pod = lab.netns("pod")
    att = Attachment("corpus-ro", pod, "eth0")
    res = runtime.add(conf, att)
    assert res["routes"] == [{"dst": "192.168.0.0/24", "gw": "10.1.254.254"}]
    assert ("default", "10.1.254.1") not in routes(lab, pod)
    assert ("192.168.0.0/24", "10.1.254.254") in routes(lab, pod)
    assert lab.run(pod, "ping", "-c1", "-W2", "192.168.0.1", check=False).returncode == 0
    check_as_runtime(runtime, conf, att)
    if expects_gc(version):
        runtime.gc(conf, [("corpus-ro", "eth0")])
        runtime.status(conf)
    runtime.delete(conf, att)
    runtime.delete(conf, att)
    assert "eth0" not in lab.run(pod, "ip", "-o", "link").stdout


def test_missing_prev_result_through_runtime(lab, make_runtime, plugin_dir):
    runtime = make_runtime([plugin_dir])
    conf = ConfList.from_dict({"cniVersion": "1.0.0", "name": "solo", "plugins": [{"type": "route-override", "flushroutes": True}]})
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", lab.netns("pod"), "eth0"))
    assert_failed(info.value, Code.INVALID_NETWORK_CONFIG,
                  "Required prevResult missing: route-override must be chained after the plugin that creates the interface")


def test_shipped_example_conflist(lab, make_runtime, plugin_dir, reference_dir, cni_version):
    """conflists/bridge-tuning-route-override.conflist, run at every version."""
    from cnichain.node.launchers import conflists_dir
    from cnichain.tools.lab import isolate_conflist

    with open(os.path.join(conflists_dir(), "bridge-tuning-route-override.conflist")) as fh:
        data = isolate_conflist(json.load(fh), lab.workdir)
    data["cniVersion"] = cni_version
    conf = ConfList.from_dict(data)
    runtime = make_runtime([plugin_dir, reference_dir])
    pod = lab.netns("pod")
    att = Attachment("example1", pod, "eth0", capability_args={"mac": "02:00:00:00:23:01"})
    res = runtime.add(conf, att)
    assert_result_shape(res, cni_version)
    if result_has_interfaces(cni_version):
        assert next(i for i in res["interfaces"] if i["name"] == "eth0")["mac"] == "02:00:00:00:23:01"
        assert {"dst": "192.0.2.0/24", "gw": "10.23.0.1"} in res["routes"]
    else:
        assert {"dst": "192.0.2.0/24", "gw": "10.23.0.1"} in res["ip4"]["routes"]
    link = json.loads(lab.run(pod, "ip", "-j", "link", "show", "eth0").stdout)[0]
    assert (link["address"], link["mtu"]) == ("02:00:00:00:23:01", 1450)
    assert lab.run(pod, "cat", "/proc/sys/net/ipv4/conf/eth0/arp_filter").stdout.strip() == "1"
    assert ("192.0.2.0/24", "10.23.0.1") in routes(lab, pod)
    assert lab.run(pod, "ping", "-c1", "-W2", "10.23.0.1", check=False).returncode == 0
    check_as_runtime(runtime, conf, att)
    runtime.delete(conf, att)
    runtime.delete(conf, att)
    assert "eth0" not in lab.run(pod, "ip", "-o", "link").stdout
