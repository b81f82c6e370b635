"""bridge's masquerade in maps, against a real kernel: who owns an address, what a DEL may remove,
the previous release's per-pod rules, and that ADD and DEL list nothing.

The functions of plugins/bridge/firewall.py run in the lab's node namespace (the thread enters
it), as the plugin's handlers call them; the table is read back with ``nft``.
"""

from __future__ import annotations

import pytest

from cnichain.common import nft
from cnichain.common.netns import entered
from cnichain.plugins.bridge import firewall, rules

pytestmark = pytest.mark.integration

NET = "brmaps"


def previous_release_rule(address: str, comment: str) -> list[dict]:
    """What the previous release's ADD wrote for one pod address: its table and base chain, and
    ``ip saddr <pod> ip daddr != <subnet> ip daddr != 224.0.0.0/4 masquerade`` with the owner comment."""
    net, host = address.rsplit("/", 1)[0].rsplit(".", 1)[0] + ".0", address.split("/")[0]
    length = int(address.split("/")[1])

    def daddr_not(addr: str, bits: int) -> dict:
        return {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                          "right": {"prefix": {"addr": addr, "len": bits}}}}

    chain = {"family": "inet", "table": rules.MASQ_TABLE, "name": rules.MASQ_CHAIN, "type": "nat",
             "hook": "postrouting", "prio": 100, "policy": "accept"}
    expr = [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": host}},
            daddr_not(net, length), daddr_not("224.0.0.0", 4), {"masquerade": None}]
    return [{"add": {"table": {"family": "inet", "name": rules.MASQ_TABLE}}}, {"add": {"chain": chain}},
            {"add": {"rule": {"family": "inet", "table": rules.MASQ_TABLE, "chain": rules.MASQ_CHAIN,
                              "comment": comment, "expr": expr}}}]


def owners(lab, family: int = 4) -> str:
    return lab.run(lab.node, "nft", "list", "map", "inet", rules.MASQ_TABLE, rules.POD_OWNERS[family]).stdout


def test_a_reused_address_stays_with_its_new_owner_when_the_old_one_is_deleted(lab):
    """IP reuse: A's element outlived its IPAM reservation, B got the address; B's ADD takes the
    address over, and A's late DEL (with the address in its cached result) leaves B's alone."""
    with entered(lab.node):
        firewall.add_masquerade(NET, "a", "eth0", ["10.91.0.5/24"])
        assert "id: a" in owners(lab)
        firewall.add_masquerade(NET, "b", "eth0", ["10.91.0.5/24"])
        firewall.remove_masquerade(NET, "a", "eth0", ["10.91.0.5/24"])
        assert firewall.masquerade_addresses(NET, "b", "eth0") == ["10.91.0.5"]
        assert firewall.masquerade_addresses(NET, "a", "eth0") == []
        firewall.remove_masquerade(NET, "b", "eth0", ["10.91.0.5/24"])
        assert "10.91.0.5" not in owners(lab)


def test_add_and_del_list_nothing_and_a_repeated_del_is_a_no_op(lab, monkeypatch):
    """With the table in place and the cached result's addresses, ADD and DEL are element
    transactions: a listing of the table would fail here (DEL asks only for the family's chain
    names, to know whether the previous release's chain is there).  Twice the same DEL leaves the
    table as it was."""
    real = nft.list_ruleset
    with entered(lab.node):
        firewall.add_masquerade(NET, "first", "eth0", ["10.91.0.2/24", "fd91::2/64"])  # builds the table
        before = lab.run(lab.node, "nft", "list", "table", "inet", rules.MASQ_TABLE).stdout

        def chain_names_only(command: str) -> object:
            if command != "list chains inet":
                raise AssertionError(f"listed {command!r}")
            return real(command)

        monkeypatch.setattr(nft, "list_ruleset", chain_names_only)
        firewall.add_masquerade(NET, "c", "eth0", ["10.91.0.7/24", "fd91::7/64"])
        firewall.add_masquerade(NET, "c", "eth0", ["10.91.0.7/24", "fd91::7/64"])  # a retried ADD
        firewall.remove_masquerade(NET, "c", "eth0", ["10.91.0.7/24", "fd91::7/64"])
        firewall.remove_masquerade(NET, "c", "eth0", ["10.91.0.7/24", "fd91::7/64"])
        monkeypatch.undo()
        assert lab.run(lab.node, "nft", "list", "table", "inet", rules.MASQ_TABLE).stdout == before


def test_the_previous_releases_rule_is_read_and_removed(lab):
    """A pod masqueraded by the previous release (one rule in ``postrouting``) is seen by CHECK's
    reading and removed by its DEL; nothing of the new layout is written for it."""
    legacy = rules.comment(NET, "old", "eth0")
    with entered(lab.node):
        nft.apply(previous_release_rule("10.91.0.9/24", legacy), "previous release")
        firewall.add_masquerade(NET, "new", "eth0", ["10.91.0.3/24"])
        assert firewall.masquerade_addresses(NET, "old", "eth0") == ["10.91.0.9"]
        assert sorted(a for _t, _c, a in firewall.masquerade_holdings() or []) == ["10.91.0.3", "10.91.0.9"]
        firewall.remove_masquerade(NET, "old", "eth0", ["10.91.0.9/24"])
        assert firewall.masquerade_addresses(NET, "old", "eth0") == []
        assert firewall.masquerade_addresses(NET, "new", "eth0") == ["10.91.0.3"]
    assert "id: old" not in lab.run(lab.node, "nft", "list", "table", "inet", rules.MASQ_TABLE).stdout


def test_a_flushed_subnet_chain_or_dispatch_is_not_counted_and_add_restores_it(lab):
    """CHECK's reading counts an address only where packets are masqueraded: its subnet's chain
    holds the rule and ``pods`` dispatches its family.  The reconciler's repair (an ADD that
    rebuilds) writes both back."""
    with entered(lab.node):
        firewall.add_masquerade(NET, "p", "eth0", ["10.91.0.4/24"])
        chain = rules.net_chain("10.91.0.4/24")
        for damage in (["flush", "chain", "inet", rules.MASQ_TABLE, chain],
                       ["flush", "chain", "inet", rules.MASQ_TABLE, rules.PODS_CHAIN]):
            lab.run(lab.node, "nft", *damage)
            assert firewall.masquerade_addresses(NET, "p", "eth0") == []
            firewall.add_masquerade(NET, "p", "eth0", ["10.91.0.4/24"], rebuild=True)
            assert firewall.masquerade_addresses(NET, "p", "eth0") == ["10.91.0.4"]


def test_del_without_addresses_and_gc_find_the_owner_by_listing(lab):
    """A DEL without a cached result, and GC, find an attachment's elements by their owner."""
    with entered(lab.node):
        for cid, addr in (("keep", "10.91.0.11/24"), ("drop", "10.91.0.12/24"), ("lost", "10.91.0.13/24")):
            firewall.add_masquerade(NET, cid, "eth0", [addr])
        firewall.add_masquerade("othernet", "elsewhere", "eth0", ["10.92.0.2/24"])
        firewall.remove_masquerade(NET, "lost", "eth0")
        firewall.gc(NET, {rules.owner_tag(NET, "keep", "eth0")})
        held = sorted(a for _t, _c, a in firewall.masquerade_holdings() or [])
    assert held == ["10.91.0.11", "10.92.0.2"]
