"""Interrupted netlink dumps are redone, as the reference's netlinksafe does (pure: a stand-in base)."""

from __future__ import annotations

from cnichain.common import netlink


def _msgs(flags):
    return [{"header": {"flags": flags}}]


class _Base:
    def __init__(self, interrupted_times):
        self.left = interrupted_times
        self.calls = 0

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls += 1
            if self.left:
                self.left -= 1
                return _msgs(0x2 | netlink.NLM_F_DUMP_INTR)
            return _msgs(0x2)
        return call


def test_interrupted_dump_is_redone():
    ipr = netlink._retrying_dumps(_Base)(2)
    out = ipr.get_addr(family=10)
    assert out == tuple(_msgs(0x2)) and ipr.calls == 3


def test_after_the_last_attempt_the_listing_is_used():
    ipr = netlink._retrying_dumps(_Base)(99)
    out = ipr.get_links()
    assert netlink.interrupted(out) and ipr.calls == netlink.DUMP_ATTEMPTS


def test_every_listing_we_use_retries():
    cls = netlink._retrying_dumps(_Base)
    assert all(name in cls.__dict__ for name in ("get_links", "get_addr", "get_routes", "get_qdiscs", "get_filters"))
