"""route-override without a kernel: config, the pure planner, and the handlers' no-netns paths."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from cnichain.common.errors import CniError, Code
from cnichain.common.types import Result
from cnichain.plugins.route_override.config import RouteOverrideConfig, load
from cnichain.plugins.route_override.plan import (
    KernelRoute,
    check_problems,
    new_result,
    routes_to_delete,
    target_interfaces,
)
from cnichain.plugins.route_override.plugin import PLUGIN
from tests.helpers import dispatch
from tests.specver import ips_carry_version, result_has_interfaces

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
net = ipaddress.ip_network


def prev_for(version: str) -> dict:
    if not result_has_interfaces(version):
        return {"cniVersion": version,
                "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.1"}]},
                "ip6": {"ip": "2001:db8::5/64", "gateway": "2001:db8::1", "routes": [{"dst": "::/0"}]}}
    v = {"version": "4"} if ips_carry_version(version) else {}
    v6 = {"version": "6"} if ips_carry_version(version) else {}
    return {
        "cniVersion": version,
        "interfaces": [{"name": "cni0", "mac": "0a:00:00:00:00:01"}, {"name": "eth0", "mac": "0a:00:00:00:00:02", "sandbox": "/var/run/netns/x"}],
        "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1, **v},
                {"address": "2001:db8::5/64", "gateway": "2001:db8::1", "interface": 1, **v6}],
        "routes": [{"dst": "0.0.0.0/0"}, {"dst": "10.9.0.0/16", "gw": "10.1.0.1"}, {"dst": "::/0"}],
        "dns": {},
    }


# -- config -----------------------------------------------------------------------------------


def test_defaults():
    assert load({"name": "n"}) == RouteOverrideConfig()


def test_keys_and_args_cni_override():
    conf = {"flushroutes": True, "delroutes": [{"dst": "192.168.0.0/24"}],
            "addroutes": [{"dst": "192.168.0.0/24", "gw": "10.1.254.254"}],
            "args": {"cni": {"flushroutes": False, "flushgateway": True, "skipcheck": True,
                             "addroutes": [{"dst": "2001:db9::/64", "gw": "2001:db8::1"}]}}}
    cfg = load(conf)
    assert (cfg.flushroutes, cfg.flushgateway, cfg.skipcheck) == (False, True, True)
    assert [str(d.dst) for d in cfg.delroutes] == ["192.168.0.0/24"]  # not overridden
    assert [(str(a.dst), str(a.gw)) for a in cfg.addroutes] == [("2001:db9::/64", "2001:db8::1")]
    assert [str(d.dst) for d in cfg.all_delroutes()] == ["192.168.0.0/24", "0.0.0.0/0", "::/0"]


def test_args_without_cni_is_ignored():
    # the reference dereferences a nil pointer here
    assert load({"args": {"foo": 1}, "flushroutes": True}).flushroutes


def test_delroute_host_bits_match_the_network():
    assert load({"delroutes": [{"dst": "10.2.3.4/16"}]}).delroutes[0].dst == net("10.2.0.0/16")


@pytest.mark.parametrize(
    "conf,msg",
    [
        ({"flushroutes": "yes"}, "failed to load netconf: json: cannot unmarshal string into Go struct field RouteOverrideConfig.flushroutes of type bool"),
        ({"delroutes": {"dst": "1.2.3.0/24"}}, "cannot unmarshal object into Go struct field RouteOverrideConfig.delroutes of type []*types.Route"),
        ({"addroutes": [{"dst": "10.0.0.0"}]}, "failed to load netconf: invalid CIDR address: 10.0.0.0"),
        ({"addroutes": [{"dst": "10.0.0.0/33"}]}, "invalid CIDR address: 10.0.0.0/33"),
        ({"addroutes": [{"dst": "10.0.0.0/8", "gw": "10.0.0.300"}]}, "invalid IP address: 10.0.0.300"),
        ({"args": {"cni": {"skipcheck": 1}}}, "cannot unmarshal number into Go struct field IPAMArgs.args.cni.skipcheck of type bool"),
    ],
)
def test_bad_config(conf, msg):
    with pytest.raises(CniError) as info:
        load(conf)
    assert info.value.code == Code.INTERNAL and msg in info.value.msg


@pytest.mark.parametrize(
    "conf,msg",
    [
        ({"addroutes": [{"gw": "10.0.0.1"}]}, 'route is missing "dst"'),
        ({"addroutes": [{"dst": "10.0.0.1/8", "gw": "10.0.0.2"}]}, "destination has host bits set (did you mean 10.0.0.0/8?)"),
        ({"addroutes": [{"dst": "10.0.0.0/8", "gw": "2001:db8::1"}]}, "is not of the same IP family"),
        ({"args": {"cni": {"delroutes": [{"gw": "10.0.0.1"}]}}}, 'route is missing "dst"'),
    ],
)
def test_unusable_routes_are_skipped_not_refused(conf, msg):
    """The original hands them to netlink, prints the kernel's refusal and carries on."""
    cfg = load({**conf, "addroutes": conf.get("addroutes", []) + [{"dst": "192.0.2.0/24"}]})
    assert [str(r.dst) for r in cfg.addroutes] == ["192.0.2.0/24"]
    assert len(cfg.skipped) == 1 and msg in cfg.skipped[0]


# -- planner ------------------------------------------------------------------------------------


def res(version="1.0.0") -> Result:
    return Result.from_dict(prev_for(version))


def test_target_interfaces():
    assert target_interfaces(res(), "net1") == ["eth0"]
    assert target_interfaces(Result(), "net1") == ["net1"]


def test_new_result_delroutes_and_addroutes():
    cfg = load({"delroutes": [{"dst": "10.9.0.0/16"}], "addroutes": [{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}]})
    out = new_result(res(), cfg)
    assert [(r.dst, r.gw) for r in out.routes] == [("0.0.0.0/0", ""), ("::/0", ""), ("192.168.0.0/24", "10.1.0.254")]
    assert [ip.gateway for ip in out.ips] == ["10.1.0.1", "2001:db8::1"]


def test_new_result_flushroutes():
    cfg = load({"flushroutes": True, "addroutes": [{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}]})
    assert [(r.dst, r.gw) for r in new_result(res(), cfg).routes] == [("192.168.0.0/24", "10.1.0.254")]


def test_new_result_flushgateway():
    out = new_result(res(), load({"flushgateway": True}))
    assert [r.dst for r in out.routes] == ["10.9.0.0/16"]
    assert [ip.gateway for ip in out.ips] == ["0.0.0.0", "::"]


def kernel_route(dst, gw=None, oif=3, scope=0):
    return KernelRoute(dst=net(dst), gw=gw, oif=oif, scope=scope)


KERNEL = [
    kernel_route("0.0.0.0/0", "10.1.0.1"),
    kernel_route("10.1.0.0/24", None, scope=253),
    kernel_route("10.9.0.0/16", "10.1.0.1"),
    kernel_route("192.168.7.0/24", "10.1.0.1"),
    kernel_route("169.254.0.0/16", "10.1.0.1"),
    kernel_route("::/0", "2001:db8::1"),
    kernel_route("2001:db8::/64", None),
    kernel_route("fe80::/64", None),
    kernel_route("10.50.0.0/16", "10.60.0.1", oif=7),  # another interface: never touched
]


def dsts(routes):
    return [str(r.dst) for r in routes]


def test_delete_delroutes_even_when_not_in_prev_result():
    cfg = load({"delroutes": [{"dst": "192.168.7.0/24"}, {"dst": "10.50.0.0/16"}]})
    assert dsts(routes_to_delete(KERNEL, {3}, cfg)) == ["192.168.7.0/24"]


def test_delete_flushroutes_keeps_link_scope_link_local_and_gatewayless():
    cfg = load({"flushroutes": True})
    assert dsts(routes_to_delete(KERNEL, {3}, cfg)) == ["0.0.0.0/0", "10.9.0.0/16", "192.168.7.0/24", "::/0"]


def test_delete_flushgateway_takes_both_defaults():
    assert dsts(routes_to_delete(KERNEL, {3}, load({"flushgateway": True}))) == ["0.0.0.0/0", "::/0"]


def test_check_problems():
    cfg = load({"flushgateway": True, "delroutes": [{"dst": "192.168.7.0/24"}]})
    result = new_result(res(), cfg)
    kernel = [kernel_route("10.1.0.0/24", None, scope=253), kernel_route("10.9.0.0/16", "10.1.0.1")]
    assert check_problems(kernel, {3}, result, cfg) == []
    assert check_problems(kernel + [kernel_route("0.0.0.0/0", "10.1.0.1")], {3}, result, cfg) == [
        "route-override: route is not removed: 0.0.0.0/0 via 10.1.0.1 oif 3"]
    assert check_problems(kernel[:1], {3}, result, cfg) == ["route-override: route 10.9.0.0/16 is missing from the pod"]
    wrong_gw = [kernel_route("10.9.0.0/16", "10.1.0.9")]
    assert "failed to match route: 10.9.0.0/16 via 10.1.0.1" in check_problems(wrong_gw, {3}, result, cfg)[0]


def test_check_accepts_deleted_then_re_added_route():
    cfg = load({"flushroutes": True, "delroutes": [{"dst": "192.168.0.0/24"}],
                "addroutes": [{"dst": "192.168.0.0/24", "gw": "10.1.0.254"}]})
    result = new_result(res(), cfg)
    assert check_problems([kernel_route("192.168.0.0/24", "10.1.0.254")], {3}, result, cfg) == []


# -- handlers without a kernel --------------------------------------------------------------------


def conf_for(version, **keys):
    conf = {"cniVersion": version, "name": "ronet", "type": "route-override"}
    conf.update(keys)
    return conf


def test_add_without_prev_result_is_a_clear_error(cni_version):
    code, out = dispatch(PLUGIN, "ADD", conf_for(cni_version, flushroutes=True))
    assert code == 1
    assert out["msg"].startswith("Required prevResult missing: route-override must be chained")
    assert out["code"] == 7


def test_add_with_nothing_to_do_passes_prev_result_through(cni_version):
    prev = prev_for(cni_version)
    code, out = dispatch(PLUGIN, "ADD", conf_for(cni_version, prevResult=prev), CNI_NETNS="/nonexistent")
    assert code == 0 and out == Result.from_dict(prev, cni_version).to_dict(cni_version)


def test_add_with_netns_gone_fails_clearly():
    code, out = dispatch(PLUGIN, "ADD", conf_for("1.0.0", prevResult=prev_for("1.0.0"), flushgateway=True),
                         CNI_NETNS="/nonexistent/netns")
    assert code == 1 and out["msg"].startswith('failed to override routes: failed to open netns "/nonexistent/netns"')
    assert out["code"] == 999


def test_del_is_a_noop(cni_version):
    for netns in ("/nonexistent", ""):
        assert dispatch(PLUGIN, "DEL", conf_for(cni_version, flushroutes=True), CNI_NETNS=netns) == (0, None)


def test_check_skipcheck_and_missing_prev_result():
    assert dispatch(PLUGIN, "CHECK", conf_for("1.0.0", skipcheck=True), CNI_NETNS="/nonexistent") == (0, None)
    code, out = dispatch(PLUGIN, "CHECK", conf_for("1.0.0"))
    assert code == 1 and out["msg"] == "Required prevResult missing"
    assert out["code"] == 7


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_are_silent(command):
    assert dispatch(PLUGIN, command, conf_for("1.1.0")) == (0, None)


def test_version_includes_1_1_0():
    _, out = dispatch(PLUGIN, "VERSION")
    assert out["supportedVersions"][-1] == "1.1.0" and len(out["supportedVersions"]) == 7


@pytest.mark.parametrize("command", ["DEL", "VERSION", "GC"])
def test_del_never_imports_pyroute2(command):
    code = (
        "import sys\n"
        "from cnichain.plugins.route_override.__main__ import main\n"
        "rc = main()\n"
        "sys.stderr.write('RC=%d LOADED=%s' % (rc, sorted(m for m in ('pyroute2', 'nftables', 'typer', 'logging') if m in sys.modules)))\n"
    )
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent", "CNI_IFNAME": "eth0",
           "CNI_PATH": "/x", "PYTHONPATH": ROOT}  # the checkout (cnichain/ links)
    conf = conf_for("1.1.0", flushroutes=True, prevResult=prev_for("1.1.0"))
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(conf).encode(), env=env,
                          capture_output=True, timeout=60)
    assert b"RC=0 LOADED=[]" in proc.stderr, proc.stderr


def test_check_with_nothing_overridden_needs_no_namespace():
    conf = conf_for("1.0.0", prevResult=prev_for("1.0.0"))
    assert dispatch(PLUGIN, "CHECK", conf, CNI_NETNS="/nonexistent") == (0, None)
