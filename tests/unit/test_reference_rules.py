"""The reference's per-container firewall tags, and the deletions planned from a listing (pure)."""

from __future__ import annotations

import hashlib

from cnichain.common import reference_rules as rr


def test_chain_names_follow_the_reference():
    digest = hashlib.sha512(b"mynet" + b"abc").hexdigest()
    assert rr.iptables_chain("mynet", "abc") == ("CNI-" + digest)[:28]
    assert rr.iptables_chain("mynet", "abc", "DN-") == ("CNI-DN-" + digest)[:28]
    assert len(rr.iptables_chain("n", "c", "DN-")) == 28
    h = lambda t: hashlib.sha512(t.encode()).hexdigest()[:16]  # noqa: E731
    assert rr.masq_comment_prefix("mynet", "eth0", "abc") == f"{h('mynet')}-{h('eth0:abc')}"


def _rule(chain, handle, expr=(), comment=None, family="ip", table="nat"):
    r = {"family": family, "table": table, "chain": chain, "handle": handle, "expr": list(expr)}
    if comment is not None:
        r["comment"] = comment
    return {"rule": r}


def _chain(name, family="ip", table="nat"):
    return {"chain": {"family": family, "table": table, "name": name}}


def test_chain_deletions_remove_references_then_the_chain():
    mine, theirs = rr.iptables_chain("n", "c1", "DN-"), rr.iptables_chain("n", "c2", "DN-")
    listing = [
        _chain("CNI-HOSTPORT-DNAT"), _chain(mine), _chain(theirs),
        _rule("CNI-HOSTPORT-DNAT", 5, [{"jump": {"target": mine}}]),
        _rule("CNI-HOSTPORT-DNAT", 6, [{"jump": {"target": theirs}}]),
        _rule("OUTPUT", 7, [{"goto": {"target": mine}}]),
        _rule(mine, 8, [{"accept": None}]),
    ]
    out = rr.chain_deletions(listing, "ip", "nat", {mine})
    assert out == [
        {"delete": {"rule": {"family": "ip", "table": "nat", "chain": "CNI-HOSTPORT-DNAT", "handle": 5}}},
        {"delete": {"rule": {"family": "ip", "table": "nat", "chain": "OUTPUT", "handle": 7}}},
        {"flush": {"chain": {"family": "ip", "table": "nat", "name": mine}}},
        {"delete": {"chain": {"family": "ip", "table": "nat", "name": mine}}},
    ]
    assert rr.chain_deletions(listing, "ip", "nat", {"CNI-absent"}) == []


def test_plan_reads_only_the_reference_chains_by_name():
    calls = []
    listings = {
        "list chain ip cni_hostport hostports": [
            _chain("hostports", table="cni_hostport"),
            _rule("hostports", 3, comment="c1", table="cni_hostport"),
            _rule("hostports", 4, comment="c10", table="cni_hostport"),
        ],
        "list chain ip cni_hostport masquerading": [
            _rule("masquerading", 9, comment="c1", table="cni_hostport"),
        ],
    }

    def list_cmd(cmd):
        calls.append(cmd)
        return listings.get(cmd)

    out = rr.plan(rr.portmap_target("n", "c1"), list_cmd)
    assert [c["delete"]["rule"]["handle"] for c in out] == [3, 9]
    dn, sn = rr.iptables_chain("n", "c1", "DN-"), rr.iptables_chain("n", "c1", "SN-")
    # none of the container's nat chains: no entry chain is read; of cni_hostport only its per-pod chains
    assert calls == [
        f"list chain ip nat {dn}", f"list chain ip nat {sn}", f"list chain ip6 nat {dn}", f"list chain ip6 nat {sn}",
        "list chain ip cni_hostport hostports", "list chain ip cni_hostport hostip_hostports",
        "list chain ip cni_hostport masquerading",
        "list chain ip6 cni_hostport hostports", "list chain ip6 cni_hostport hostip_hostports",
        "list chain ip6 cni_hostport masquerading",
    ]


def test_plan_never_lists_a_table_or_the_ruleset_on_a_node_without_the_reference():
    calls = []

    def absent(cmd):
        calls.append(cmd)
        return None

    for target in (rr.portmap_target("n", "c1"), rr.masquerade_target("n", "c1", "eth0"),
                   rr.spoof_check_target("c1", "eth0")):
        assert rr.plan(target, absent) == []
    assert calls and all(c.startswith("list chain ") for c in calls), calls


def test_plan_reads_the_entry_chains_not_the_table_unless_asked():
    mine = rr.iptables_chain("n", "c1", "DN-")
    listings = {
        f"list chain ip nat {mine}": [_chain(mine), _rule(mine, 8, [{"accept": None}])],
        "list chain ip nat CNI-HOSTPORT-DNAT": [
            _chain("CNI-HOSTPORT-DNAT"), _rule("CNI-HOSTPORT-DNAT", 5, [{"jump": {"target": mine}}])],
        "list table ip nat": [
            _chain("CNI-HOSTPORT-DNAT"), _chain("KUBE-X"), _chain(mine),
            _rule("CNI-HOSTPORT-DNAT", 5, [{"jump": {"target": mine}}]),
            _rule("KUBE-X", 6, [{"goto": {"target": mine}}])],
    }
    calls = []

    def list_cmd(cmd):
        calls.append(cmd)
        return listings.get(cmd)

    handles = lambda out: [c["delete"]["rule"]["handle"] for c in out if "rule" in c.get("delete", {})]  # noqa: E731
    assert handles(rr.plan(rr.portmap_target("n", "c1"), list_cmd)) == [5]
    assert "list table ip nat" not in calls
    # the kernel refused (a jump from elsewhere): remove() plans again over the whole table
    assert handles(rr.plan(rr.portmap_target("n", "c1"), list_cmd, whole_tables=True)) == [5, 6]


def test_spoof_check_chains_and_their_prerouting_jump():
    iface = "cni-br-iface-c1-eth0"
    listings = {
        f"list chain bridge nat {iface}": [_chain(iface, "bridge"),
                                           _rule(iface, 6, [{"jump": {"target": iface + "-mac"}}], family="bridge")],
        f"list chain bridge nat {iface}-mac": [_chain(iface + "-mac", "bridge")],
        "list chain bridge nat PREROUTING": [
            _chain("PREROUTING", "bridge"),
            _rule("PREROUTING", 4, [{"jump": {"target": iface}}], family="bridge"),
            _rule("PREROUTING", 5, [{"jump": {"target": "cni-br-iface-c2-eth0"}}], family="bridge"),
        ],
    }
    out = rr.plan(rr.spoof_check_target("c1", "eth0"), listings.get)
    assert out[0] == {"delete": {"rule": {"family": "bridge", "table": "nat", "chain": "PREROUTING", "handle": 4}}}
    assert [list(c)[0] + " " + c[list(c)[0]]["chain"]["name"] for c in out[1:]] == [
        f"flush {iface}", f"delete {iface}", f"flush {iface}-mac", f"delete {iface}-mac"]


def test_chain_names_need_no_openssl():
    import subprocess
    import sys

    code = ("import sys; from cnichain.common import reference_rules as rr; rr.iptables_chain('n', 'c');"
            "rr.masq_comment_prefix('n', 'eth0', 'c'); print(int('_hashlib' in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "0"
