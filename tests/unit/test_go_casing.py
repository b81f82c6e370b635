"""Every key of every chained plugin, in camelCase and in Go field casing, and every capability in
the exact shape each runtime marshals it.

Runtimes marshal with Go and the reference plugins decode with Go's case-insensitive encoding/json,
so a config written by containerd's go-cni (structs without json tags: ``HostPort``, ``IngressRate``)
must mean the same as one written by CRI-O's ocicni or podman (camelCase json tags).  For each
plugin a *full* config sets every key its schema declares; it must parse identically when every key
is respelled the Go way or in upper case, and dropping any one key must change the parsed record
(so each key really is read, through the schema).  bridge and host-local have their own tables.
"""

from __future__ import annotations

import pytest

from cnichain.common import gojson, skel
from cnichain.common.errors import CniError
from cnichain.common.types import RESULT, RESULT_020, Result
from cnichain.plugins.bandwidth import config as bandwidth
from cnichain.plugins.portmap import config as portmap
from cnichain.plugins.route_override import config as route_override
from cnichain.plugins.tuning import config as tuning
from tests import gocase


def _unwrap(t: gojson.GoType) -> gojson.GoType:
    while isinstance(t, (gojson.Ptr, gojson.List, gojson.Custom)):
        t = t.inner if isinstance(t, gojson.Custom) else t.elem
    return t


def respell(value: dict, schema: gojson.Struct, style: str) -> dict:
    """``value`` with every key the schema knows respelled: ``go`` (``HostPort``, ``SNAT``) or ``upper``."""
    return gocase.recase_all(value, schema, gocase.go_casing if style == "go" else gocase.upper_casing)


PORTMAP_FULL = {
    "snat": False,
    "masqAll": True,
    "conditionsV4": ["ip saddr 10.0.0.0/8"],
    "conditionsV6": ["ip6 saddr fd00::/8"],
    "markMasqBit": 5,
    "runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "udp", "hostIP": "192.0.2.1"},
    ]},
}
BANDWIDTH_RUNTIME = {"runtimeConfig": {"bandwidth": {
    "ingressRate": 8000, "ingressBurst": 800, "egressRate": 16000, "egressBurst": 1600,
}}}
BANDWIDTH_TOP = {"ingressRate": 8000, "ingressBurst": 800, "egressRate": 16000, "egressBurst": 1600}
TUNING_FULL = {
    "sysctl": {"net.core.somaxconn": "512"},
    "mac": "c2:11:22:33:44:55",
    "promisc": True,
    "mtu": 1400,
    "allmulti": True,
    "txQLen": 500,
    "dataDir": "/run/tuning-test",
    "runtimeConfig": {"mac": "c2:11:22:33:44:66"},
    "args": {"cni": {
        "sysctl": {"net.ipv4.ip_forward": "1"},
        "mac": "c2:11:22:33:44:77",
        "promisc": False,
        "mtu": 1300,
        "allmulti": False,
        "txQLen": 100,
    }},
}
ROUTE_OVERRIDE_FULL = {
    "flushroutes": True,
    "flushgateway": True,
    "delroutes": [{"dst": "192.0.2.0/24", "gw": "10.1.0.1"}],
    "addroutes": [{"dst": "198.51.100.0/24", "gw": "10.1.0.1"}],
    "skipcheck": True,
}
ROUTE_OVERRIDE_ARGS = {"args": {"cni": {
    "flushroutes": False,
    "flushgateway": False,
    "delroutes": [{"dst": "203.0.113.0/24", "gw": "10.1.0.1"}],
    "addroutes": [{"dst": "10.9.0.0/16", "gw": "10.1.0.254"}],
    "skipcheck": False,
}}}

CASES = {
    "portmap": (portmap.load, portmap.SCHEMA, PORTMAP_FULL),
    "portmap-external-chain": (
        portmap.load, portmap.SCHEMA,
        {"externalSetMarkChain": "KUBE-MARK-MASQ", "backend": "nftables", **BANDWIDTH_TOP,
         "runtimeConfig": PORTMAP_FULL["runtimeConfig"]},
    ),
    "bandwidth-top-level": (bandwidth.load, bandwidth.SCHEMA, dict(BANDWIDTH_TOP, layout="pod")),
    "bandwidth-capability": (bandwidth.load, bandwidth.SCHEMA, BANDWIDTH_RUNTIME),
    "tuning": (tuning.load, tuning.SCHEMA, TUNING_FULL),
    "tuning-without-args": (tuning.load, tuning.SCHEMA, {k: v for k, v in TUNING_FULL.items() if k != "args"}),
    "route-override": (route_override.load, route_override.SCHEMA, ROUTE_OVERRIDE_FULL),
    "route-override-args": (route_override.load, route_override.SCHEMA, ROUTE_OVERRIDE_ARGS),
}
# Keys whose absence legitimately leaves the record unchanged.
NO_EFFECT = {
    ("portmap-external-chain", "backend"),  # "nftables" is the default
    ("portmap-external-chain", "ingressRate"), ("portmap-external-chain", "ingressBurst"),
    ("portmap-external-chain", "egressRate"), ("portmap-external-chain", "egressBurst"),
    ("tuning", "promisc"), ("tuning", "allmulti"), ("tuning", "mac"), ("tuning", "mtu"),
    ("tuning", "txQLen"), ("tuning", "runtimeConfig"),  # args.cni overrides all of these
    ("tuning-without-args", "mac"),  # runtimeConfig.mac overrides it
}


def _conf(body: dict) -> dict:
    return {"cniVersion": "1.0.0", "name": "net", "type": "x", **body}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("style", ["go", "upper"])
def test_every_key_in_go_casing_means_the_same(case, style):
    parse, schema, full = CASES[case]
    expected = parse(_conf(full))
    respelled = respell(full, schema, style)
    assert respelled != full
    assert parse(_conf(respelled)) == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_key_is_read(case):
    parse, _schema, full = CASES[case]
    expected = parse(_conf(full))
    for key in full:
        if (case, key) in NO_EFFECT:
            continue
        without = {k: v for k, v in full.items() if k != key}
        try:
            changed = parse(_conf(without)) != expected
        except CniError:  # e.g. a rate left without its burst: the key was read
            changed = True
        assert changed, f"{case}: dropping {key!r} changed nothing"


def test_every_schema_field_is_exercised():
    """The full configs above cover every field each schema declares (nested ones included)."""
    def names(schema: gojson.GoType, prefix: str = "") -> set[str]:
        schema = _unwrap(schema)
        if isinstance(schema, gojson.Map):
            return names(schema.elem, prefix)
        if not isinstance(schema, gojson.Struct):
            return set()
        out = set()
        for f in schema.fields:
            out.add(prefix + f.name)
            out |= names(f.type, prefix + f.name + ".")
        return out

    def used(value, schema: gojson.GoType, prefix: str = "") -> set[str]:
        schema = _unwrap(schema)
        if isinstance(value, list):
            return set().union(*(used(v, schema, prefix) for v in value)) if value else set()
        if isinstance(schema, gojson.Map) or not isinstance(schema, gojson.Struct) or not isinstance(value, dict):
            return set()
        out = set()
        for key, item in value.items():
            f = schema.field(key)
            if f is not None:
                out.add(prefix + f.name)
                out |= used(item, f.type, prefix + f.name + ".")
        return out

    for plugin in ("portmap", "bandwidth", "tuning", "route-override"):
        cases = [v for k, v in CASES.items() if k.startswith(plugin)]
        schema = cases[0][1]
        covered = set().union(*(used(full, schema) for _, _, full in cases))
        assert names(schema) - covered == set(), plugin


# -- capabilities, exactly as each runtime marshals them -----------------------------------------

PORTMAP_CAPABILITY = {
    # containerd's go-cni: struct without json tags; HostIP always present, "" when unset.
    "containerd": [{"HostPort": 18081, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""},
                   {"HostPort": 18082, "ContainerPort": 53, "Protocol": "udp", "HostIP": "192.0.2.7"}],
    # CRI-O's ocicni: json tags, hostIP without omitempty.
    "cri-o": [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp", "hostIP": ""},
              {"hostPort": 18082, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.7"}],
    # podman: json tags, hostIP omitted when empty.
    "podman": [{"hostPort": 18081, "containerPort": 80, "protocol": "tcp"},
               {"hostPort": 18082, "containerPort": 53, "protocol": "udp", "hostIP": "192.0.2.7"}],
}
BANDWIDTH_CAPABILITY = {
    "containerd": {"IngressRate": 10_000_000, "IngressBurst": 20_000_000, "EgressRate": 5_000_000, "EgressBurst": 10_000_000},
    "cri-o": {"ingressRate": 10_000_000, "ingressBurst": 20_000_000, "egressRate": 5_000_000, "egressBurst": 10_000_000},
    "podman": {"ingressRate": 10_000_000, "ingressBurst": 20_000_000, "egressRate": 5_000_000, "egressBurst": 10_000_000},
}


@pytest.mark.parametrize("runtime", sorted(PORTMAP_CAPABILITY))
def test_port_mappings_from_each_runtime(runtime):
    cfg = portmap.load(_conf({"runtimeConfig": {"portMappings": PORTMAP_CAPABILITY[runtime]}}))
    assert cfg.mappings == (
        portmap.PortMapping(18081, 80, "tcp", ""),
        portmap.PortMapping(18082, 53, "udp", "192.0.2.7"),
    )


@pytest.mark.parametrize("runtime", sorted(BANDWIDTH_CAPABILITY))
def test_bandwidth_from_each_runtime(runtime):
    cfg = bandwidth.load(_conf({"runtimeConfig": {"bandwidth": BANDWIDTH_CAPABILITY[runtime]}}))
    assert cfg.ingress == bandwidth.Shape(10_000_000, 20_000_000)
    assert cfg.egress == bandwidth.Shape(5_000_000, 10_000_000)
    assert cfg.source == "runtimeConfig"


def test_containerd_dns_capability_is_accepted_beside_the_others():
    """go-cni also sends dns as {"Servers", "Searches", "Options"}; no plugin here consumes it."""
    rc = {
        "portMappings": PORTMAP_CAPABILITY["containerd"],
        "bandwidth": BANDWIDTH_CAPABILITY["containerd"],
        "dns": {"Servers": ["10.96.0.10"], "Searches": ["svc.cluster.local"], "Options": ["ndots:5"]},
    }
    assert len(portmap.load(_conf({"runtimeConfig": rc})).mappings) == 2
    assert bandwidth.load(_conf({"runtimeConfig": rc})).shaped


# -- the shared NetConf keys and prevResult ------------------------------------------------------

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "0a:00:00:00:00:03", "mtu": 1500, "sandbox": "/run/netns/p"}],
    "ips": [{"interface": 0, "address": "10.1.0.5/24", "gateway": "10.1.0.1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.1", "mtu": 1400, "advmss": 1300, "priority": 5, "table": 10, "scope": 0}],
    "dns": {"nameservers": ["10.1.0.1"], "domain": "d", "search": ["s"], "options": ["o"]},
}


@pytest.mark.parametrize("style", ["go", "upper"])
def test_prev_result_in_go_casing(style):
    expected = Result.from_dict(PREV)
    assert Result.from_dict(respell(PREV, RESULT, style)) == expected
    assert expected.routes[0].table == 10 and expected.interfaces[0].mtu == 1500


def test_020_prev_result_in_go_casing():
    prev = {"cniVersion": "0.2.0", "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]}}
    assert Result.from_dict(respell(prev, RESULT_020, "go")) == Result.from_dict(prev)


@pytest.mark.parametrize("style", ["go", "upper"])
def test_netconf_keys_in_go_casing(style):
    conf = {
        "cniVersion": "1.1.0", "name": "net", "type": "portmap", "capabilities": {"portMappings": True},
        "ipam": {"type": "host-local"}, "dns": {"nameservers": ["10.0.0.1"]}, "prevResult": PREV,
        "cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}],
    }
    plain = skel.Request("GC", "", "", "", "", [], b"", conf)
    respelled = skel.Request("GC", "", "", "", "", [], b"", respell(conf, skel.NETCONF, style))
    for req in (plain, respelled):
        assert req.cni_version == "1.1.0" and req.network_name == "net" and req.ipam_type == "host-local"
        assert req.valid_attachments() == [("c1", "eth0")]
        assert req.prev_result == Result.from_dict(PREV)
