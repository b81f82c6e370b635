"""The node installer (node/) in temp directories: atomic writes, versions and the symlink, order, undo.

A fake tree (a directory with a manifest) stands in for the bundle and a fake runner for the
VERSION check; tests/integration/test_node_install.py runs the real tree.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cnichain.node.bundle import layout
from cnichain.node import atomic, bundle_install
from cnichain.node.state import NodeState
from tests import required

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")


def fake_tree(base, tree_id: str = "0123456789abcdef", prefix: str = "/opt/cni") -> str:
    tree = base / f"src-{tree_id}-{prefix.replace('/', '_')}"
    if tree.exists():
        return str(tree)
    (tree / "share/cnichain").mkdir(parents=True)
    (tree / "share/cnichain/manifest.json").write_text(json.dumps({"prefix": prefix, "tree_id": tree_id}))
    (tree / "bin").mkdir()
    (tree / "bin/python3.11").write_bytes(b"\x7fELF fake " + tree_id.encode())
    os.symlink("python3.11", tree / "bin/python3")
    return str(tree)


class Calls:
    def __init__(self, fail: str = ""):
        self.paths: list[str] = []
        self.fail = fail

    def __call__(self, path: str):
        self.paths.append(path)
        return (not (self.fail and path.endswith(self.fail)), path)


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "host"
    (root / "etc/cni/net.d").mkdir(parents=True)
    return root


def cfg(host, src, **kw) -> bundle_install.NodeConfig:
    return bundle_install.NodeConfig(host_root=str(host), source_tree=src, **kw)


def test_own_install_writes_tree_link_launchers_then_conflist(host, tmp_path):
    src = fake_tree(tmp_path)
    calls = Calls()
    report = bundle_install.install(cfg(host, src), runner=calls)
    assert os.readlink(host / "opt/cni/cnichain/current") == "versions/0123456789abcdef"
    assert (host / "opt/cni/cnichain/versions/0123456789abcdef/bin/python3").is_symlink()
    for t in ("bridge", "host-local", "portmap", "bandwidth", "tuning", "route-override"):
        text = (host / "opt/cni/bin" / t).read_text()
        assert text.startswith("#!/opt/cni/cnichain/current/bin/python3 -IS\n")
        assert os.stat(host / "opt/cni/bin" / t).st_mode & 0o777 == 0o755
    assert sorted(calls.paths) == sorted(f"/opt/cni/bin/{t}" for t in bundle_install.launcher_names("own"))
    conf = json.loads((host / "etc/cni/net.d/10-cnichain.conflist").read_text())
    assert conf["plugins"][0]["type"] == "bridge"
    assert report.written[-1] == "/etc/cni/net.d/10-cnichain.conflist"  # conflist last
    state = NodeState.load(str(host / "opt/cni/cnichain/node-state.json"))
    assert os.stat(host / "opt/cni/cnichain/node-state.json").st_mode & 0o777 == 0o600
    assert state.conflist == "/etc/cni/net.d/10-cnichain.conflist" and len(state.launchers) == 6


def test_rerun_skips_identical_files_and_keeps_the_conflist(host, tmp_path):
    src = fake_tree(tmp_path)
    bundle_install.install(cfg(host, src), runner=Calls())
    inode = os.stat(host / "etc/cni/net.d/10-cnichain.conflist").st_ino
    again = bundle_install.install(cfg(host, src), runner=Calls())
    assert not again.written
    assert os.stat(host / "etc/cni/net.d/10-cnichain.conflist").st_ino == inode


def test_upgrade_stages_a_new_version_switches_the_link_and_keeps_the_previous(host, tmp_path):
    launcher = host / "opt/cni/bin/portmap"
    bundle_install.install(cfg(host, fake_tree(tmp_path, "aaaaaaaaaaaaaaaa")), runner=Calls())
    before = launcher.read_bytes()
    bundle_install.install(cfg(host, fake_tree(tmp_path, "bbbbbbbbbbbbbbbb")), runner=Calls())
    assert os.readlink(host / "opt/cni/cnichain/current") == "versions/bbbbbbbbbbbbbbbb"
    assert launcher.read_bytes() == before  # launchers go through 'current': never rewritten
    assert (host / "opt/cni/cnichain/versions/aaaaaaaaaaaaaaaa").is_dir()
    report = bundle_install.install(cfg(host, fake_tree(tmp_path, "cccccccccccccccc")), runner=Calls())
    assert sorted(os.listdir(host / "opt/cni/cnichain/versions")) == ["bbbbbbbbbbbbbbbb", "cccccccccccccccc"]
    assert "/opt/cni/cnichain/versions/aaaaaaaaaaaaaaaa" in report.removed
    assert (host / "etc/cni/net.d/10-cnichain.conflist").exists()


def test_failed_version_check_rolls_back_the_link_and_writes_no_conflist(host, tmp_path):
    bundle_install.install(cfg(host, fake_tree(tmp_path, "aaaaaaaaaaaaaaaa")), runner=Calls())
    (host / "etc/cni/net.d/10-cnichain.conflist").unlink()
    with pytest.raises(bundle_install.InstallError, match="VERSION"):
        bundle_install.install(cfg(host, fake_tree(tmp_path, "bbbbbbbbbbbbbbbb")), runner=Calls(fail="/tuning"))
    assert os.readlink(host / "opt/cni/cnichain/current") == "versions/aaaaaaaaaaaaaaaa"
    assert not (host / "etc/cni/net.d/10-cnichain.conflist").exists()


def test_foreign_plugins_are_refused_unless_replacing_is_asked_for(host, tmp_path):
    (host / "opt/cni/bin").mkdir(parents=True)
    (host / "opt/cni/bin/portmap").write_bytes(b"\x7fELF reference portmap")
    with pytest.raises(bundle_install.InstallError, match="replace-foreign"):
        bundle_install.install(cfg(host, fake_tree(tmp_path)), runner=Calls())
    assert (host / "opt/cni/bin/portmap").read_bytes() == b"\x7fELF reference portmap"
    assert not os.listdir(host / "etc/cni/net.d")
    bundle_install.install(cfg(host, fake_tree(tmp_path), replace_foreign=True), runner=Calls())
    assert (host / "opt/cni/bin/portmap").read_bytes().startswith(b"#!")


def test_chain_mode_uses_our_names_and_derives_from_the_primary(host, tmp_path):
    shutil.copy(os.path.join(CORPUS, "calico-k8s-pod-network.conflist"), host / "etc/cni/net.d/10-calico.conflist")
    (host / "opt/cni/bin").mkdir(parents=True)
    (host / "opt/cni/bin/portmap").write_bytes(b"calico's portmap")
    c = cfg(host, fake_tree(tmp_path), mode="chain")
    bundle_install.install(c, runner=Calls())
    assert (host / "opt/cni/bin/portmap").read_bytes() == b"calico's portmap"  # never touched
    assert (host / "opt/cni/bin/cnichain-portmap").exists() and (host / "opt/cni/bin/cnichain-host-local").exists()
    ours = json.loads((host / "etc/cni/net.d/00-cnichain.conflist").read_text())
    assert [p["type"] for p in ours["plugins"]] == ["calico", "cnichain-portmap", "cnichain-bandwidth"]
    assert bundle_install.refresh_chain(c) is None  # primary unchanged
    primary = json.loads((host / "etc/cni/net.d/10-calico.conflist").read_text())
    primary["plugins"][0]["mtu"] = 1400
    atomic.write_file(str(host / "etc/cni/net.d/10-calico.conflist"), json.dumps(primary).encode(), 0o644)
    assert bundle_install.refresh_chain(c) is not None
    assert json.loads((host / "etc/cni/net.d/00-cnichain.conflist").read_text())["plugins"][0]["mtu"] == 1400
    (host / "etc/cni/net.d/10-calico.conflist").unlink()
    assert bundle_install.refresh_chain(c) is None  # primary gone: ours stays
    assert (host / "etc/cni/net.d/00-cnichain.conflist").exists()


def test_chain_mode_without_a_primary_writes_nothing_to_the_conf_dir(host, tmp_path):
    with pytest.raises(bundle_install.InstallError, match="no primary"):
        bundle_install.install(cfg(host, fake_tree(tmp_path), mode="chain"), runner=Calls())
    assert not os.listdir(host / "etc/cni/net.d")


def test_watch_is_bounded_and_rewrites_on_change(host, tmp_path):
    shutil.copy(os.path.join(CORPUS, "flannel-kube-flannel.conflist"), host / "etc/cni/net.d/10-flannel.conflist")
    c = cfg(host, fake_tree(tmp_path), mode="chain")
    bundle_install.install(c, runner=Calls())
    (host / "etc/cni/net.d/10-flannel.conflist").write_text(
        json.dumps({"cniVersion": "0.3.1", "name": "cbr0", "plugins": [{"type": "flannel"}]}))
    logs: list[str] = []
    assert bundle_install.watch(c, 1.0, rounds=3, log=logs.append, sleep=lambda s: None) == 0
    assert logs == ["rewrote /etc/cni/net.d/00-cnichain.conflist (primary changed)"]


def test_uninstall_removes_exactly_ours(host, tmp_path):
    shutil.copy(os.path.join(CORPUS, "antrea-cni.conflist"), host / "etc/cni/net.d/10-antrea.conflist")
    c = cfg(host, fake_tree(tmp_path), mode="chain")
    bundle_install.install(c, runner=Calls())
    (host / "opt/cni/bin/other").write_bytes(b"someone else's")
    report = bundle_install.uninstall(bundle_install.NodeConfig(host_root=str(host)))
    assert "/etc/cni/net.d/00-cnichain.conflist" in report.removed
    assert sorted(os.listdir(host / "etc/cni/net.d")) == ["10-antrea.conflist"]
    assert os.listdir(host / "opt/cni/bin") == ["other"]
    assert not (host / "opt/cni/cnichain").exists()


def test_paths_are_validated_before_anything_is_touched(host, tmp_path):
    for bad in ({"prefix": "opt/cni"}, {"conf_dir": "/etc/cni/../x"}, {"bin_dir": "/opt/cni bin"},
                {"mode": "both"}, {"conf_name": "../x.conflist"}, {"conf_name": "..conflist"}):
        with pytest.raises((bundle_install.InstallError, layout.LayoutError)):
            bundle_install.install(cfg(host, fake_tree(tmp_path), **bad), runner=Calls())
    assert not (host / "opt").exists()
    with pytest.raises(bundle_install.InstallError, match="built for prefix"):
        bundle_install.install(cfg(host, fake_tree(tmp_path, prefix="/home/kubernetes")), runner=Calls())


def test_temp_names_never_look_like_network_configs(tmp_path):
    for name in ("10-x.conflist", "a.conf", "b.json"):
        assert not atomic.temp_name(str(tmp_path / name)).endswith(atomic.CONF_SUFFIXES)
    path = str(tmp_path / "f.conflist")
    assert atomic.write_file(path, b"1", 0o644) and not atomic.write_file(path, b"1", 0o644)
    assert os.listdir(tmp_path) == ["f.conflist"]


def test_a_tree_carrying_the_native_shim_installs_it_with_the_trees_launcher_as_fallback(host, tmp_path):
    from cnichain.node import native_shim
    from cnichain.node.bundle import executables

    binary = required.native_shim()
    src = fake_tree(tmp_path, "dddddddddddddddd")
    os.makedirs(os.path.dirname(os.path.join(src, executables.SHIM_REL)), exist_ok=True)
    shutil.copyfile(binary, os.path.join(src, executables.SHIM_REL))
    calls = Calls()
    report = bundle_install.install(cfg(host, src), runner=calls)
    cold_dir = f"/opt/cni/bin/{native_shim.COLD_DIR}"
    written = [p for p in report.written if p.startswith("/opt/cni/bin/")]
    assert written.index(f"{cold_dir}/portmap") < written.index("/opt/cni/bin/portmap")  # fallback first
    for t in bundle_install.launcher_names("own"):
        config = native_shim.read_config((host / "opt/cni/bin" / t).read_bytes())
        assert config == native_shim.ShimConfig(t, "/run/cnichain/agent.sock", f"{cold_dir}/{t}")
        assert (host / cold_dir.lstrip("/") / t).read_text().startswith("#!/opt/cni/cnichain/current/bin/python3 -IS\n")
    assert sorted(calls.paths) == sorted(f"/opt/cni/bin/{t}" for t in bundle_install.launcher_names("own"))
    again = bundle_install.install(cfg(host, src), runner=Calls())
    assert not again.written  # byte-identical shims and launchers are skipped
    gone = bundle_install.uninstall(cfg(host, src))
    assert gone.removed.index("/opt/cni/bin/portmap") < gone.removed.index(f"{cold_dir}/portmap")  # shim first
    assert not (host / cold_dir.lstrip("/")).exists() and not (host / "opt/cni/bin/portmap").exists()


def test_chained_shims_forward_as_the_plugin_type_and_fall_back_by_their_own_name():
    from cnichain.node import native_shim
    from cnichain.node.bundle import executables

    binary = required.native_shim()
    with open(binary, "rb") as fh:
        shim = fh.read()
    plan = executables.planned("/opt/cni", "/opt/cni/bin", bundle_install.launcher_names("chain"), "/run/a.sock", shim)
    entries = {path: native_shim.read_config(data) for path, data, entry in plan if entry}
    assert entries["/opt/cni/bin/cnichain-portmap"] == native_shim.ShimConfig(
        "portmap", "/run/a.sock", f"/opt/cni/bin/{native_shim.COLD_DIR}/cnichain-portmap")
    colds = [path for path, _data, entry in plan if not entry]
    assert len(colds) == len(entries) == 6 and plan[:6] == [p for p in plan if not p[2]]  # fallbacks first
    # no socket: Python launchers, no shim
    plain = executables.planned("/opt/cni", "/opt/cni/bin", bundle_install.launcher_names("own"), "", shim)
    assert all(entry and data.startswith(b"#!") for _path, data, entry in plain)
