"""``cnichain node install`` with the real tree, the way the DaemonSet's init container runs it.

The installer itself runs from the tree in an empty root (the "container": only the tree, /dev/null,
/proc and the "host" mounted at /host); the host is a temp directory.  Its VERSION check chroots
into /host, so it runs the copy on the host.  Then the host's launchers run in an empty root made
of the host directory alone.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cnichain.node.bundle import layout
from tests.emptyroot import run_in_root

pytestmark = pytest.mark.integration

PREFIX = layout.DEFAULT_PREFIX
CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


@pytest.fixture
def host(tmp_path):
    """The "node": a temp dir with an empty conf dir; removed afterwards (it receives a 70 MB tree)."""
    path = tmp_path / "host"
    (path / "etc/cni/net.d").mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def in_container(bundle, tmp_path, host, *args):
    container = tmp_path / "container"
    container.mkdir(exist_ok=True)
    tree = os.path.join(bundle.out, PREFIX.lstrip("/"))
    cli = f"{layout.current_link(PREFIX)}/{layout.CLI_REL}"
    return run_in_root(str(container), [cli, "node", *args], [(tree, PREFIX, True), (str(host), "/host", False)],
                       timeout=120)


def test_install_from_the_tree_then_plugins_run_from_the_host_copy(bundle, tmp_path, host):
    out = in_container(bundle, tmp_path, host, "install", "--host-root", "/host")
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout.decode()
    assert text.count("verified ") == 6 and text.rstrip().splitlines()[-1].startswith("verified")
    assert (host / "etc/cni/net.d/10-cnichain.conflist").exists()
    assert os.readlink(host / "opt/cni/cnichain/current") == f"versions/{bundle.tree_id}"
    # the host alone (no tree bind-mount): its own copy must be complete
    ran = run_in_root(str(host), [f"{PREFIX}/bin/portmap"], [], env={"CNI_COMMAND": "VERSION"})
    assert ran.returncode == 0, ran.stderr
    assert "1.1.0" in json.loads(ran.stdout)["supportedVersions"]
    again = in_container(bundle, tmp_path, host, "install", "--host-root", "/host")
    assert again.returncode == 0 and b"wrote " not in again.stdout  # byte-identical: nothing rewritten
    gone = in_container(bundle, tmp_path, host, "uninstall", "--host-root", "/host")
    assert gone.returncode == 0, gone.stderr
    assert os.listdir(host / "etc/cni/net.d") == [] and not (host / "opt/cni/cnichain").exists()


def test_chain_install_from_the_tree_next_to_antrea(bundle, tmp_path, host):
    shutil.copy(os.path.join(CORPUS, "antrea-cni.conflist"), host / "etc/cni/net.d/10-antrea.conflist")
    out = in_container(bundle, tmp_path, host, "install", "--host-root", "/host", "--mode", "chain")
    assert out.returncode == 0, out.stdout + out.stderr
    ours = json.loads((host / "etc/cni/net.d/00-cnichain.conflist").read_text())
    assert [p["type"] for p in ours["plugins"]] == ["antrea", "cnichain-portmap", "cnichain-bandwidth"]
    ran = run_in_root(str(host), [f"{PREFIX}/bin/cnichain-bandwidth"], [], env={"CNI_COMMAND": "VERSION"})
    assert ran.returncode == 0, ran.stderr


def test_readiness_probe_follows_the_agent(tmp_path):
    """``cnichain node probe`` (the DaemonSet's readiness probe) passes with an agent and fails without."""
    from typer.testing import CliRunner

    from cnichain.agent import running_agent
    from cnichain.cli.app import app

    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    sock = str(folder / "agent.sock")
    runner = CliRunner()
    assert runner.invoke(app, ["node", "probe", "--socket", sock]).exit_code != 0
    with running_agent(sock, args=("--pool", "0")):
        result = runner.invoke(app, ["node", "probe", "--socket", sock])
        assert result.exit_code == 0, result.output
    assert runner.invoke(app, ["node", "probe", "--socket", sock]).exit_code != 0
