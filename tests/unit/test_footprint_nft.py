"""tests/integration/footprint.py: an nft that failed is not an empty ruleset, so a "nothing
left" check cannot pass on a listing that never happened."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.footprint import nft_items


class _Lab:
    node = "stand-in"

    def __init__(self, rc: int, out: str, err: str = "") -> None:
        self.proc = subprocess.CompletedProcess(["nft"], rc, out, err)

    def run(self, ns: str, *argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess:
        return self.proc


def test_a_failed_nft_raises():
    with pytest.raises(AssertionError, match="Operation not permitted"):
        nft_items(_Lab(1, "", "netlink: Error: Operation not permitted"))  # type: ignore[arg-type]


def test_an_nft_that_printed_nothing_raises():
    with pytest.raises(AssertionError):
        nft_items(_Lab(0, ""))  # type: ignore[arg-type]


def test_an_empty_ruleset_reads_as_empty():
    assert nft_items(_Lab(0, '{"nftables": [{"metainfo": {"version": "1.0.6"}}]}')) == set()  # type: ignore[arg-type]
