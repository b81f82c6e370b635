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


def test_plan_reads_only_what_exists():
    calls = []
    listings = {
        "list tables": [{"table": {"family": "ip", "name": "cni_hostport"}}],
        "list table ip cni_hostport": [
            _rule("hostports", 3, comment="c1", table="cni_hostport"),
            _rule("hostports", 4, comment="c10", table="cni_hostport"),
            _rule("masquerading", 9, comment="c1", table="cni_hostport"),
            _rule("prerouting", 2, comment="c1", table="cni_hostport"),  # not one of the reference's per-pod chains
        ],
    }

    def list_cmd(cmd):
        calls.append(cmd)
        return listings.get(cmd)

    out = rr.plan(rr.portmap_target("n", "c1"), list_cmd)
    assert [c["delete"]["rule"]["handle"] for c in out] == [3, 9]
    assert calls == ["list tables", "list table ip cni_hostport"]  # no nat table: no chain lookups, no hashing


def test_plan_on_a_node_without_reference_tables_lists_once():
    calls = []
    assert rr.plan(rr.masquerade_target("n", "c1", "eth0"), lambda c: calls.append(c) or []) == []
    assert calls == ["list tables"]


def test_spoof_check_chains_and_their_prerouting_jump():
    iface = "cni-br-iface-c1-eth0"
    listing = [
        _chain("PREROUTING", "bridge"), _chain(iface, "bridge"), _chain(iface + "-mac", "bridge"),
        _chain("cni-br-iface-c2-eth0", "bridge"),
        _rule("PREROUTING", 4, [{"jump": {"target": iface}}], family="bridge"),
        _rule("PREROUTING", 5, [{"jump": {"target": "cni-br-iface-c2-eth0"}}], family="bridge"),
        _rule(iface, 6, [{"jump": {"target": iface + "-mac"}}], family="bridge"),
    ]
    listings = {"list tables": [{"table": {"family": "bridge", "name": "nat"}}],
                f"list chain bridge nat {iface}": [], "list table bridge nat": listing}
    out = rr.plan(rr.spoof_check_target("c1", "eth0"), listings.get)
    assert out[0] == {"delete": {"rule": {"family": "bridge", "table": "nat", "chain": "PREROUTING", "handle": 4}}}
    assert [list(c)[0] + " " + c[list(c)[0]]["chain"]["name"] for c in out[1:]] == [
        f"flush {iface}", f"delete {iface}", f"flush {iface}-mac", f"delete {iface}-mac"]
