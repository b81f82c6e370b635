"""Paths of a bundled tree (node/bundle/layout.py) and the builder's refusal of bad input before any write."""

from __future__ import annotations

import os

import pytest

from cnichain.node.bundle import layout
from cnichain.node.bundle.__main__ import main
from cnichain.node.bundle.sources import _requirement_applies


@pytest.mark.parametrize("bad", ["", "opt/cni", "/opt/cni/", "/opt//cni", "/opt/../cni", "/opt/c ni", "/opt/$x", "/opt/cni\n"])
def test_bad_prefixes_are_refused(bad):
    with pytest.raises(layout.LayoutError):
        layout.check_abs_path(bad)


def test_layout_paths():
    assert layout.home("/opt/cni") == "/opt/cni/cnichain"
    assert layout.version_dir("/opt/cni", "0123456789abcdef") == "/opt/cni/cnichain/versions/0123456789abcdef"
    assert layout.launcher_python("/home/kubernetes") == "/home/kubernetes/cnichain/current/bin/python3"
    assert layout.under("/host", "/etc/cni/net.d") == "/host/etc/cni/net.d"
    assert layout.under("/", "/etc/cni/net.d") == "/etc/cni/net.d"
    with pytest.raises(layout.LayoutError):
        layout.version_dir("/opt/cni", "../x")


def test_builder_refuses_a_bad_prefix_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(out), "--prefix", "opt/cni"]) == 1
    assert not out.exists()
    assert "prefix" in capsys.readouterr().err
    long_prefix = "/" + "p" * 120
    assert main([str(out), "--prefix", long_prefix]) == 1
    assert not os.path.exists(out)


def test_runtime_requirements_only():
    assert _requirement_applies("rich>=13.8.0")
    assert _requirement_applies('typing-extensions>=4; python_version < "3.13"')
    assert not _requirement_applies('colorama; platform_system == "Windows"')
    assert not _requirement_applies('pytest; extra == "dev"')


def test_the_tree_carries_the_shim_but_not_its_fuzz_harness():
    """shim/fuzz (harness, corpus) is for tests only: the tree, like the wheel, leaves it out."""
    from cnichain.node.bundle import sources

    plan = sources.Plan()
    sources._add_package("cnichain", plan)
    assert any(rel.endswith("/cnichain/shim/cnichain-shim.c") for rel in plan.dists)
    assert not [rel for rel in plan.dists if "/cnichain/shim/fuzz/" in rel]
