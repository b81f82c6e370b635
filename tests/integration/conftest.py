"""Fixtures for the bundled tree (node/bundle/): built once per session, removed afterwards."""

from __future__ import annotations

import shutil
from typing import Iterator

import pytest

from cnichain.node.bundle import layout


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    """The BuildReport of a tree built for the default prefix under a temp OUT (root only)."""
    import os

    from tests import required

    if os.geteuid() != 0:
        pytest.skip("building a tree needs root")
    required.command("patchelf")
    from cnichain.node.bundle.build import build

    out = tmp_path_factory.mktemp("bundle-out")
    report = build(str(out), layout.DEFAULT_PREFIX)
    report.out = str(out)  # type: ignore[attr-defined]
    try:
        yield report
    finally:
        shutil.rmtree(out, ignore_errors=True)
