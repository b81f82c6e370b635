"""portmap without a kernel: config validation, the layout planner and no-op handler paths."""

from __future__ import annotations

import pytest

from cnichain.common.types import Result
from cnichain.plugins.portmap import names, plan as planning, rebuild as slow
from cnichain.plugins.portmap.config import PortMapping, container_ips, load
from cnichain.plugins.portmap.plugin import PLUGIN
from tests.helpers import dispatch
from tests.portmap_json import briefs, jump_targets, rules
from tests.specver import result_has_interfaces

PREV = {
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "cni0", "mac": "0a:00:00:00:00:01"},
        {"name": "veth1", "mac": "0a:00:00:00:00:02"},
        {"name": "eth0", "mac": "0a:00:00:00:00:03", "sandbox": "/var/run/netns/p"},
    ],
    "ips": [
        {"interface": 1, "address": "10.9.9.9/24"},
        {"interface": 2, "address": "10.1.0.5/24", "gateway": "10.1.0.1"},
        {"interface": 2, "address": "10.1.0.6/24"},
        {"interface": 2, "address": "fd00::5/64"},
    ],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.1.0.1"]},
}


def conf(**extra):
    base = {"cniVersion": "1.0.0", "name": "pmnet", "type": "portmap"}
    base.update(extra)
    return base


def maps(*entries):
    return {"runtimeConfig": {"portMappings": list(entries)}}


# -- config ------------------------------------------------------------------------------------


def test_defaults():
    cfg = load(conf())
    assert cfg.snat and not cfg.masq_all and cfg.mappings == ()


def test_mapping_parse_normalises_protocol_and_host_ip():
    cfg = load(conf(**maps(
        {"hostPort": 8080, "containerPort": 80, "protocol": "TCP"},
        {"hostPort": 53, "containerPort": 53, "protocol": "udp", "hostIP": "::ffff:192.0.2.1"},
        {"hostPort": 9, "containerPort": 9, "protocol": "Sctp", "hostIP": "2001:db8::1"},
    )))
    assert cfg.mappings == (
        PortMapping(8080, 80, "tcp", ""),
        PortMapping(53, 53, "udp", "192.0.2.1"),
        PortMapping(9, 9, "sctp", "2001:db8::1"),
    )


@pytest.mark.parametrize(
    "entry,msg",
    [
        ({"hostPort": 8080, "containerPort": 0}, "Invalid container port number: 0"),
        ({"hostPort": 8080, "containerPort": -1}, "Invalid container port number: -1"),
        ({"hostPort": 0, "containerPort": 80}, "Invalid host port number: 0"),
        ({"hostPort": 70000, "containerPort": 80}, "Invalid host port number: 70000"),
        ({"hostPort": 1, "containerPort": 80, "protocol": "icmp"}, "unsupported protocol 'icmp'"),
        ({"hostPort": 1, "containerPort": 80, "hostIP": "nope"}, "invalid hostIP 'nope'"),
        (
            {"hostPort": "80", "containerPort": 80},
            "json: cannot unmarshal string into Go struct field PortMapEntry.runtimeConfig.portMappings.hostPort of type int",
        ),
        ({"hostPort": 80.5, "containerPort": 80}, "cannot unmarshal number 80.5 into Go struct field"),
    ],
)
def test_mapping_errors(entry, msg):
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=PREV, **maps(entry)))
    assert code == 1 and out["code"] == 999
    assert out["msg"].startswith("failed to parse config: ") and msg in out["msg"]


@pytest.mark.parametrize(
    "extra,msg",
    [
        ({"markMasqBit": 32}, "MasqMarkBit must be between 0 and 31"),
        ({"markMasqBit": -1}, "MasqMarkBit must be between 0 and 31"),
        ({"markMasqBit": 13, "externalSetMarkChain": "KUBE-MARK-MASQ"}, "Cannot specify externalSetMarkChain and markMasqBit"),
        ({"backend": "xtables"}, 'unrecognized backend "xtables"'),
        (
            {"conditionsV4": "ip saddr 10.0.0.1"},
            "cannot unmarshal string into Go struct field PortMapConf.conditionsV4 of type []string",
        ),
        ({"snat": "yes"}, "json: cannot unmarshal string into Go struct field PortMapConf.snat of type bool"),
    ],
)
def test_config_errors(extra, msg):
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=PREV, **extra))
    assert code == 1 and msg in out["msg"], out
    assert out["code"] == 999
    # DEL removes by container ID and needs no key: it cleans up anyway and says what it skipped
    assert dispatch(PLUGIN, "DEL", conf(**extra)) == (0, None)


@pytest.mark.parametrize(
    "extra,msg",
    [
        ({"conditionsV4": ["ip saddr 10.0.0.0/8", "-p tcp"]}, "conditionsV4 is not a single nftables match"),
        ({"conditionsV4": ["ip saddr 10.0.0.1; add rule inet x y drop"]}, "conditionsV4 is not a single nftables match"),
        ({"conditionsV4": ["meta", "mark", "0x1"]}, "conditionsV4 is not a single nftables match"),
        ({"conditionsV4": ["-m", "mark", "--mark", "1"]}, "unsupported match module 'mark'"),
        ({"conditionsV6": ["-j", "DROP"]}, "unsupported token '-j'"),
        ({"backend": "nftables", "conditionsV4": ["-s", "10.0.0.0/8"]},
         "nftables backend was requested but configuration contains iptables-specific options [conditionsV4]"),
        ({"backend": "iptables", "conditionsV4": ["ip saddr 10.0.0.0/8"]},
         "iptables backend was requested but configuration contains nftables-specific options [conditionsV4]"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]}},
         "unsupported protocol 'icmp'"),
        ({"runtimeConfig": {"portMappings": [{"hostPort": 80, "containerPort": 80, "hostIP": "x"}]}},
         "invalid hostIP 'x'"),
    ],
)
def test_refused_at_add_only(extra, msg, capfd):
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=PREV, **extra))
    assert code == 1 and msg in out["msg"], out
    # every other command carries on and says on stderr what it left out
    assert dispatch(PLUGIN, "DEL", conf(**extra)) == (0, None)
    assert "skipped what ADD would refuse" in capfd.readouterr().err
    assert dispatch(PLUGIN, "STATUS", conf(cniVersion="1.1.0", **extra)) == (0, None)


@pytest.mark.parametrize("backend", ["iptables", "nftables", "", None])
def test_backend_both_values(backend):
    cfg = load(conf(backend=backend, conditionsV4=["!", "-d", "192.0.2.0/24"]) if backend != "nftables"
               else conf(backend=backend))
    assert cfg.backend == (backend or "")
    assert ('backend "iptables"' in cfg.ignored_keys) == (backend == "iptables")


def test_mark_keys_are_accepted():
    assert load(conf(externalSetMarkChain="KUBE-MARK-MASQ")).ignored_keys == ["externalSetMarkChain"]
    assert load(conf(markMasqBit=13)).ignored_keys == ["markMasqBit"]


def test_nft_conditions_are_kept():
    cfg = load(conf(conditionsV4=["ip", "saddr", "!=", "10.0.0.1"], conditionsV6=["ip6 saddr fd00::/8"]))
    assert cfg.conditions(4) == [_match(_pl("ip", "saddr"), "10.0.0.1", "!=")]
    assert cfg.conditions(6) == [_match(_pl("ip6", "saddr"), {"prefix": {"addr": "fd00::", "len": 8}})]


def test_container_ips_follow_the_reference_choice():
    prev = Result.from_dict(PREV, "1.0.0")
    assert container_ips(prev, "eth0") == {4: "10.1.0.5", 6: "fd00::5"}
    assert container_ips(prev, "eth1") == {}
    # no interface index: accepted
    bare = Result.from_dict({"cniVersion": "0.2.0", "ip4": {"ip": "10.2.0.7/16"}}, "0.2.0")
    assert container_ips(bare, "eth0") == {4: "10.2.0.7"}


# -- planner -----------------------------------------------------------------------------------


def _pl(protocol, field_):
    return {"payload": {"protocol": protocol, "field": field_}}


def _match(left, right, op="=="):
    return {"match": {"op": op, "left": left, "right": right}}


def _nfproto(family):
    return _match({"meta": {"key": "nfproto"}}, f"ipv{family}")


MASQ = {"masquerade": None}


def _plan(cid="c1", ips=None, **extra):
    cfg = load(conf(**extra))
    return planning.plan_owner("pmnet", cid, cfg, ips or {4: "10.1.0.5", 6: "fd00::5"})


def test_plan_rules_per_family_and_host_ip():
    plan = _plan(**maps(
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
        {"hostPort": 53, "containerPort": 5353, "protocol": "udp", "hostIP": "192.0.2.1"},
        {"hostPort": 443, "containerPort": 443, "protocol": "tcp", "hostIP": "::"},
    ))
    assert plan.dnat_keys == ["any/4/tcp/8080", "ip/192.0.2.1/udp/53", "any/6/tcp/8080", "any/6/tcp/443"]
    assert plan.masq_keys == ["masq/10.1.0.5", "masq/fd00::5"]
    assert plan.dnat_rules == [
        {"expr": [{"continue": None}], "comment": plan.identity},
        {"expr": [_nfproto(4), _match(_pl("tcp", "dport"), 8080), {"dnat": {"family": "ip", "addr": "10.1.0.5", "port": 80}}],
         "comment": "any/4/tcp/8080"},
        {"expr": [_match(_pl("ip", "daddr"), "192.0.2.1"), _match(_pl("udp", "dport"), 53),
                  {"dnat": {"family": "ip", "addr": "10.1.0.5", "port": 5353}}],
         "comment": "ip/192.0.2.1/udp/53"},
        {"expr": [{"continue": None}], "comment": "masq/10.1.0.5"},
        {"expr": [_nfproto(6), _match(_pl("tcp", "dport"), 8080), {"dnat": {"family": "ip6", "addr": "fd00::5", "port": 80}}],
         "comment": "any/6/tcp/8080"},
        {"expr": [_nfproto(6), _match(_pl("tcp", "dport"), 443), {"dnat": {"family": "ip6", "addr": "fd00::5", "port": 443}}],
         "comment": "any/6/tcp/443"},
        {"expr": [{"continue": None}], "comment": "masq/fd00::5"},
    ]
    assert plan.masq_rules == [
        {"expr": [_match(_pl("ip", "daddr"), "10.1.0.5"), _match(_pl("ip", "saddr"), "10.1.0.5"), MASQ]},
        {"expr": [_match(_pl("ip", "daddr"), "10.1.0.5"), _match(_pl("ip", "saddr"), "127.0.0.1"), MASQ]},
        {"expr": [_match(_pl("ip6", "daddr"), "fd00::5"), _match(_pl("ip6", "saddr"), "fd00::5"), MASQ]},
    ]


def test_plan_snat_off_and_masq_all():
    m = maps({"hostPort": 8080, "containerPort": 80})
    assert _plan(snat=False, **m).masq_rules == [] and _plan(snat=False, **m).masq_keys == []
    assert _plan(masqAll=True, **m).masq_rules == [
        {"expr": [_match(_pl("ip", "daddr"), "10.1.0.5"), MASQ]},
        {"expr": [_match(_pl("ip6", "daddr"), "fd00::5"), MASQ]},
    ]


def test_plan_conditions_prefix_each_rule():
    plan = _plan(conditionsV4=["iifname", '"eth1"'], conditionsV6=["ip6 saddr fd00::/8"],
                 **maps({"hostPort": 8080, "containerPort": 80}, {"hostPort": 53, "containerPort": 53, "protocol": "udp"}))
    iifname = _match({"meta": {"key": "iifname"}}, "eth1")
    ip6_saddr = _match(_pl("ip6", "saddr"), {"prefix": {"addr": "fd00::", "len": 8}})
    dnat = {r["comment"]: r["expr"] for r in plan.dnat_rules if "dnat" in r["expr"][-1]}
    assert dnat["any/4/tcp/8080"][:3] == [iifname, _nfproto(4), _match(_pl("tcp", "dport"), 8080)]
    assert dnat["any/4/udp/53"][:2] == [iifname, _nfproto(4)]
    assert dnat["any/6/tcp/8080"][:2] == [ip6_saddr, _nfproto(6)]
    assert dnat["any/6/udp/53"][:2] == [ip6_saddr, _nfproto(6)]


def test_owner_names_are_stable_and_distinct():
    # Pinned: a release's DEL must find the chains an earlier release named for the same pod, so
    # the value may never change (nor depend on the process, e.g. on Python's hash seed).
    assert names.owner_id("a", "b") == "ef4bb8660d28cda2ceded4022e9cb7a0"
    assert names.dnat_chain(names.owner_id("a", "b")) == "c-ef4bb8660d28cda2ceded4022e9cb7a0"
    assert names.owner_id("a", "b") != names.owner_id("ab", "") != names.owner_id("a", "c")
    assert len(names.dnat_chain(names.owner_id("a", "b"))) == 34


def test_key_round_trip():
    assert names.key_map("any/6/udp/53") == ("dnat_any", {"concat": ["ipv6", "udp", 53]})
    assert names.key_map("ip/2001:db8::1/tcp/80") == ("dnat_ip6", {"concat": ["2001:db8::1", "tcp", 80]})
    assert names.key_map("masq/fd00::5") == ("masq6", "fd00::5")
    for key in ("any/4/tcp/8080", "ip/192.0.2.1/udp/53", "ip/2001:db8::1/tcp/80", "masq/10.1.0.5", "masq/fd00::5"):
        assert names.key_from_element(*names.key_map(key)) == key
    assert names.key_from_element("dnat_any", {"concat": ["ipv6", "udp", 53]}) == "any/6/udp/53"
    assert names.key_from_element("dnat_ip6", {"concat": ["2001:db8::1", "tcp", 80]}) == "ip/2001:db8::1/tcp/80"
    assert names.key_from_element("masq4", "10.1.0.5") == "masq/10.1.0.5"


def test_fast_add_creates_only_this_containers_objects():
    plan = _plan(**maps({"hostPort": 8080, "containerPort": 80}), ips={4: "10.1.0.5"})
    c, m = f"c-{plan.owner}", f"m-{plan.owner}"
    assert briefs(planning.fast_add(plan)) == [
        ("create", "element", "owners", plan.owner, names.CHAIN_LAYOUT),
        ("create", "chain", c),
        ("add", "rule", c, plan.identity),
        ("add", "rule", c, "any/4/tcp/8080"),
        ("add", "rule", c, "masq/10.1.0.5"),
        ("create", "chain", m),
        ("add", "rule", m, None),
        ("add", "rule", m, None),
        ("create", "element", "dnat_any", "any/4/tcp/8080", c),
        ("create", "element", "masq4", "masq/10.1.0.5", m),
    ]


def test_skeleton_declares_the_shared_layout():
    commands = planning.skeleton()
    own_maps = [names.OWN_MAPS[n] for n in names.MAPS]
    assert briefs(commands)[:20] == [
        ("add", "table"), *[("add", "map", n) for n in names.MAPS], *[("add", "map", n) for n in own_maps],
        ("add", "map", names.OWNERS), *[("add", "set", n) for n in names.SETS],
        ("add", "chain", "prerouting"), ("add", "chain", "output"), ("add", "chain", "postrouting"),
        ("add", "chain", "hostports"),
    ]
    hooks = {c["add"]["chain"]["name"]: (c["add"]["chain"].get("hook"), c["add"]["chain"].get("prio"))
             for c in commands if "chain" in c.get("add", {})}
    assert hooks == {"prerouting": ("prerouting", -100), "output": ("output", -100),
                     "postrouting": ("postrouting", 95), "hostports": (None, None)}
    types = {c["add"]["map"]["name"]: (c["add"]["map"]["type"], c["add"]["map"]["map"])
             for c in commands if "map" in c.get("add", {})}
    assert types["dnat_any"] == (["nf_proto", "inet_proto", "inet_service"], "verdict")
    assert types["own_any"] == (["nf_proto", "inet_proto", "inet_service"], "ipv6_addr")
    assert types["masq6"] == ("ipv6_addr", "verdict") and types["owners"] == ("ipv6_addr", "ipv6_addr")
    for chain, count in planning.SKELETON_RULES.items():
        assert len(rules(commands, chain)) == count
    # hostports: by address before any address, and within each the maps before the chains
    lookups = []
    for r in rules(commands, "hostports") + rules(commands, "postrouting"):
        last = r["expr"][-1]
        if "vmap" in last:
            lookups.append(last["vmap"]["data"])
        elif "dnat" in last:
            lookups.append(last["dnat"]["addr"]["map"]["data"])
        else:
            lookups.append(r["expr"][-2]["match"]["right"])
    assert lookups == ["@to_ip4", "@to_ip6", "@dnat_ip4", "@dnat_ip6", "@to_any4", "@to_any6", "@dnat_any",
                       "@masq4", "@masq6", "@hairpin4", "@masqall4", "@hairpin6", "@masqall6"]
    assert [jump_targets(r) for r in rules(commands, "prerouting") + rules(commands, "output")] == [["hostports"]] * 2


def test_declarations_are_our_own_fixed_text():
    t = names.FAMILY_TABLE
    assert planning.declarations().splitlines() == [
        f"add table {t}",
        f"add map {t} to_any4 {{ type inet_proto . inet_service : ipv4_addr . inet_service ; }}",
        f"add map {t} to_any6 {{ type inet_proto . inet_service : ipv6_addr . inet_service ; }}",
        f"add map {t} to_ip4 {{ type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service ; }}",
        f"add map {t} to_ip6 {{ type ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service ; }}",
    ]


def _snapshot_with(*plans):
    """A snapshot as if ``plans`` had been installed one after another by the fast path."""
    snap = slow.Snapshot()
    handle = 10
    for p in plans:
        for chain, comments in ((names.dnat_chain(p.owner), planning.rule_comments(p.dnat_rules)),
                                (names.masq_chain(p.owner), [])):
            snap.chains[chain] = handle
            snap.comments[chain] = comments
            handle += 10
        for k in p.dnat_keys:
            snap.elements.setdefault(k, names.dnat_chain(p.owner))
        for k in p.masq_keys:
            snap.elements.setdefault(k, names.masq_chain(p.owner))
    return snap


def test_rebuild_shares_a_key_and_unshares_it_on_delete():
    m = maps({"hostPort": 8080, "containerPort": 80})
    a, b = _plan("a", {4: "10.1.0.5"}, **m), _plan("b", {4: "10.1.0.6"}, **m)
    snap = _snapshot_with(a)
    commands = slow.rebuild(snap, add=b)
    bucket = names.bucket_chain("any/4/tcp/8080")
    lines = briefs(commands)
    assert ("add", "chain", bucket) in lines
    jumps = rules(commands, bucket)
    assert [jump_targets(j) for j in jumps] == [[f"c-{a.owner}"], [f"c-{b.owner}"]]  # oldest first
    assert [j["comment"] for j in jumps] == [a.owner, b.owner]
    assert ("delete", "element", "dnat_any", "any/4/tcp/8080", None) in lines
    assert ("create", "element", "dnat_any", "any/4/tcp/8080", bucket) in lines
    # b's masquerade key is its own IP: straight to its chain
    assert ("create", "element", "masq4", "masq/10.1.0.6", f"m-{b.owner}") in lines

    # now both are installed with the bucket; deleting a hands the key to b alone
    snap2 = _snapshot_with(a, b)
    snap2.elements["any/4/tcp/8080"] = bucket
    snap2.chains[bucket] = 99
    lines = briefs(slow.rebuild(snap2, remove=[a.owner]))
    assert ("create", "element", "dnat_any", "any/4/tcp/8080", f"c-{b.owner}") in lines
    assert ("delete", "chain", bucket) in lines
    assert ("delete", "chain", f"c-{a.owner}") in lines
    assert not any(line[1] == "chain" and line[0] in ("flush", "delete") and line[2] == f"c-{b.owner}" for line in lines)


def test_rebuild_shared_ip_keeps_the_other_owners_masquerade():
    m = maps({"hostPort": 8080, "containerPort": 80})
    a = _plan("a", {4: "10.1.0.5"}, **m)
    b = _plan("b", {4: "10.1.0.5"}, **maps({"hostPort": 9090, "containerPort": 80}))
    snap = _snapshot_with(a, b)
    snap.elements["masq/10.1.0.5"] = names.bucket_chain("masq/10.1.0.5")
    snap.chains[names.bucket_chain("masq/10.1.0.5")] = 99
    lines = briefs(slow.rebuild(snap, remove=[b.owner]))
    assert ("create", "element", "masq4", "masq/10.1.0.5", f"m-{a.owner}") in lines
    assert ("delete", "element", "dnat_any", "any/4/tcp/9090", None) in lines
    assert not any("any/4/tcp/8080" in line for line in lines)


def test_stale_owners_for_gc():
    m = maps({"hostPort": 8080, "containerPort": 80})
    a, b = _plan("a", **m), _plan("b", **m)
    other = planning.plan_owner("othernet", "z", load(conf(**m)), {4: "10.1.0.9"})
    snap = _snapshot_with(a, b, other)
    assert slow.stale_owners(snap, "pmnet", ["a"]) == [b.owner]
    assert slow.stale_owners(snap, "pmnet", ["a", "b"]) == []


# -- handlers ----------------------------------------------------------------------------------


def test_add_without_mappings_passes_prev_result_through(cni_version):
    prev = Result.from_dict(PREV, "1.0.0").to_dict(cni_version)
    code, out = dispatch(PLUGIN, "ADD", conf(cniVersion=cni_version, prevResult=prev))
    assert code == 0
    assert out == prev


def test_add_for_another_ifname_touches_nothing(chained_version):
    """From 0.3.0 (results with interfaces): a 0.1/0.2 result has no interface index, so its
    address is taken for any ifname and rules would be programmed."""
    cni_version = chained_version
    assert result_has_interfaces(cni_version)
    prev = Result.from_dict(PREV, "1.0.0").to_dict(cni_version)
    code, out = dispatch(PLUGIN, "ADD", conf(cniVersion=cni_version, prevResult=prev, **maps({"hostPort": 8080, "containerPort": 80})), CNI_IFNAME="net1")
    assert code == 0 and out == prev


def test_add_needs_prev_result():
    code, out = dispatch(PLUGIN, "ADD", conf(**maps({"hostPort": 8080, "containerPort": 80})))
    assert code == 1 and out["msg"] == "must be called as chained plugin"
    assert out["code"] == 7


def test_check_needs_prev_result():
    code, out = dispatch(PLUGIN, "CHECK", conf())
    assert code == 1 and out["msg"] == "Required prevResult missing"
    assert out["code"] == 7
    code, out = dispatch(PLUGIN, "CHECK", conf(prevResult=PREV))
    assert code == 0 and out is None  # no mappings: nothing to check


def test_version():
    code, out = dispatch(PLUGIN, "VERSION")
    assert code == 0 and "0.1.0" in out["supportedVersions"] and "1.1.0" in out["supportedVersions"]


def test_no_pyroute2_or_nftables_on_noop_paths():
    import subprocess
    import sys

    code = (
        "import sys, io, json\n"
        "from cnichain.common import skel\n"
        "from cnichain.plugins.portmap.plugin import PLUGIN\n"
        "env={'CNI_COMMAND':'ADD','CNI_CONTAINERID':'c','CNI_NETNS':'/x','CNI_IFNAME':'eth0','CNI_PATH':'/x'}\n"
        f"conf={{'cniVersion':'1.0.0','name':'n','prevResult':{PREV!r}}}\n"
        "skel.dispatch(PLUGIN, env, json.dumps(conf).encode(), io.StringIO(), io.StringIO())\n"
        "bad = [m for m in ('pyroute2','nftables','typer','logging','cnichain.cli') if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- STATUS ------------------------------------------------------------------------------------

class _FakeNft:
    def __init__(self, rc: int, err: str):
        self.rc, self.err, self.calls = rc, err, []

    def cmd(self, command):
        self.calls.append(command)
        return self.rc, "", self.err


def test_status_ok_when_nftables_answers(monkeypatch):
    from cnichain.common import nft

    fake = _FakeNft(0, "")
    monkeypatch.setattr(nft, "handle", lambda: fake)
    # keys ADD would refuse are not read by STATUS
    assert dispatch(PLUGIN, "STATUS", conf(cniVersion="1.1.0", backend="iptables", markMasqBit=99)) == (0, None)
    assert fake.calls == [f"list tables {names.FAMILY}"]  # names only: cheap with any number of pods


def test_status_fails_when_nftables_is_unusable(monkeypatch):
    from cnichain.common import nft

    monkeypatch.setattr(nft, "handle", lambda: _FakeNft(1, "Error: Protocol not supported"))
    code, out = dispatch(PLUGIN, "STATUS", conf(cniVersion="1.1.0"))
    assert code == 1 and out["code"] == 50, out
    assert out["msg"].startswith("portmap: nftables is unusable: Error: Protocol not supported; load the nf_tables")
