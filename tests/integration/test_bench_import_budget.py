"""The lean cold paths that need a real namespace: no pyroute2 where no netlink is needed.

Companion of tests/unit/test_import_budget.py for the paths a unit test cannot reach without root:
tuning with only sysctls (ADD, CHECK, DEL in a real pod namespace; not even the json package or
re), portmap with port mappings
(its nftables work, inside the lab's node namespace), and the default chain's ADD and DEL, whose
netlink goes over plain rtnetlink.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.import_budget import ALWAYS_FORBIDDEN, CONVENIENCE, PARSING, explain, imported_modules, offenders

pytestmark = [pytest.mark.integration, pytest.mark.cold_path]


def _env(command: str, netns: str) -> dict:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": "budget-ctr", "CNI_NETNS": netns, "CNI_IFNAME": "eth0",
            "CNI_PATH": "/nonexistent"}


def test_tuning_sysctls_only_never_loads_pyroute2(lab, plugin_dir, tmp_path):
    launcher = os.path.join(plugin_dir, "tuning")
    pod = lab.netns("pod")
    lab.run(pod, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
    conf = {"cniVersion": "1.0.0", "name": "budget", "type": "tuning", "dataDir": str(tmp_path / "tuning"),
            "sysctl": {"net.core.somaxconn": "512", "net.ipv4.conf.IFNAME.arp_filter": "1"},
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": pod}],
                           "ips": [{"address": "10.9.0.2/24", "interface": 0}]}}
    prefix = ("ip", "netns", "exec", os.path.basename(lab.node))
    for command in ("ADD", "CHECK", "DEL", "DEL"):
        code, mods, out = imported_modules(launcher, _env(command, pod), json.dumps(conf).encode(), prefix)
        assert code == 0, out
        bad = offenders(mods, ALWAYS_FORBIDDEN + CONVENIENCE + PARSING + ("pyroute2", "nftables"))
        assert not bad, f"tuning {command} imported {bad}; {explain(mods)}"
        if command == "ADD":  # the sysctl really was written in the pod (ours restores it on DEL)
            assert lab.run(pod, "cat", "/proc/sys/net/core/somaxconn").stdout.strip() == "512"


def test_portmap_with_mappings_never_loads_pyroute2(lab, plugin_dir):
    launcher = os.path.join(plugin_dir, "portmap")
    pod = lab.netns("pod")
    lab.run(lab.node, "ip", "link", "add", "br-budget", "type", "bridge")
    lab.run(lab.node, "ip", "addr", "add", "10.9.0.1/24", "dev", "br-budget")
    lab.run(lab.node, "ip", "link", "set", "br-budget", "up")
    conf = {"cniVersion": "1.0.0", "name": "budget", "type": "portmap", "snat": True,
            "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]},
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": pod}],
                           "ips": [{"address": "10.9.0.2/24", "interface": 0}]}}
    prefix = ("ip", "netns", "exec", os.path.basename(lab.node))
    for command in ("ADD", "CHECK", "DEL", "DEL"):
        code, mods, out = imported_modules(launcher, _env(command, pod), json.dumps(conf).encode(), prefix)
        assert code == 0, out
        bad = offenders(mods, ALWAYS_FORBIDDEN + CONVENIENCE + ("pyroute2",))
        assert not bad, f"portmap {command} imported {bad}; {explain(mods)}"


def test_the_default_chain_add_and_del_never_load_pyroute2(lab, plugin_dir, tmp_path):
    """bridge (+host-local), bandwidth, tuning with a link attribute and route-override, ADD then DEL
    in reverse, each exec as a runtime makes it: none of them imports pyroute2 (its plain-rtnetlink
    path), so the cold chain pays no pyroute2 import."""
    pod = lab.netns("pod")
    prefix = ("ip", "netns", "exec", os.path.basename(lab.node))
    confs = {
        "bridge": {"type": "bridge", "bridge": "cnibudget0", "isGateway": True,
                   "ipam": {"type": "host-local", "subnet": "10.9.7.0/24", "dataDir": str(tmp_path / "ipam")}},
        "bandwidth": {"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 80_000,
                      "egressRate": 8_000_000, "egressBurst": 80_000},
        "tuning": {"type": "tuning", "mtu": 1400, "dataDir": str(tmp_path / "tuning")},
        "route-override": {"type": "route-override", "addroutes": [{"dst": "10.99.0.0/16", "gw": "10.9.7.1"}]},
    }
    env = dict(_env("ADD", pod), CNI_PATH=plugin_dir)
    prev = None
    for name, extra in confs.items():  # ADD in chain order, each given the previous result
        conf = {"cniVersion": "1.0.0", "name": "budget", **extra, **({"prevResult": prev} if prev else {})}
        code, mods, out = imported_modules(os.path.join(plugin_dir, name), env, json.dumps(conf).encode(), prefix)
        assert code == 0, f"{name} ADD: {out}"
        bad = offenders(mods, ALWAYS_FORBIDDEN + ("pyroute2",))
        assert not bad, f"{name} ADD imported {bad}; {explain(mods)}"
        prev = json.loads(out)
        confs[name] = conf
    assert "10.99.0.0/16" in lab.run(pod, "ip", "route").stdout  # the chain really ran
    for name in reversed(list(confs)):
        conf = dict(confs[name], prevResult=prev)
        code, mods, out = imported_modules(os.path.join(plugin_dir, name), dict(env, CNI_COMMAND="DEL"),
                                           json.dumps(conf).encode(), prefix)
        assert code == 0, f"{name} DEL: {out}"
        bad = offenders(mods, ALWAYS_FORBIDDEN + ("pyroute2",))
        assert not bad, f"{name} DEL imported {bad}; {explain(mods)}"
