"""The installer writes launchers and conflists, refuses foreign files, and uninstalls only its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from cnichain.node import launchers


def test_launcher_runs_isolated_and_without_site(tmp_path):
    src = launchers.launcher_source("host_local", "/usr/bin/python3", ["/x/site"])
    first = src.splitlines()[0]
    assert first == "#!/usr/bin/python3 -IS"
    assert "sys.path[0:0] = ['/x/site']" in src
    assert launchers.MARKER in src


def test_install_then_version_from_launcher(tmp_path):
    report = launchers.install(str(tmp_path), plugins=["host-local"], native=False)
    launcher = tmp_path / "host-local"
    assert [str(launcher)] == report.written
    assert os.access(launcher, os.X_OK)
    out = subprocess.run([str(launcher)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["supportedVersions"][0] == "0.1.0"


def test_refuses_foreign_file_unless_forced(tmp_path):
    foreign = tmp_path / "host-local"
    foreign.write_text("#!/bin/sh\necho not ours\n")
    report = launchers.install(str(tmp_path), plugins=["host-local"])
    assert report.refused == [str(foreign)] and foreign.read_text().startswith("#!/bin/sh")
    report = launchers.install(str(tmp_path), plugins=["host-local"], force=True)
    assert report.written == [str(foreign)]


def test_reinstall_is_unchanged_and_uninstall_removes_only_ours(tmp_path):
    launchers.install(str(tmp_path), plugins=["host-local"], native=False)
    assert launchers.install(str(tmp_path), plugins=["host-local"], native=False).unchanged == [str(tmp_path / "host-local")]
    other = tmp_path / "loopback"
    other.write_text("someone else's plugin")
    report = launchers.uninstall(str(tmp_path))
    assert report.removed == [str(tmp_path / "host-local")]
    assert other.exists() and not (tmp_path / launchers.MANIFEST).exists()


def test_modified_file_is_kept_on_uninstall(tmp_path):
    launchers.install(str(tmp_path), plugins=["host-local"], native=False)
    launcher = tmp_path / "host-local"
    launcher.write_text(launcher.read_text() + "# local edit\n")
    report = launchers.uninstall(str(tmp_path))
    assert report.refused == [str(launcher)] and launcher.exists()


def test_conflist_install(tmp_path):
    conf_dir = tmp_path / "net.d"
    report = launchers.install(str(tmp_path / "bin"), str(conf_dir), "cnichain-default", plugins=[])
    assert str(conf_dir / "cnichain-default.conflist") in report.written
    assert json.loads((conf_dir / "cnichain-default.conflist").read_text())["name"] == "cnichain"
    launchers.uninstall(str(tmp_path / "bin"))
    assert not (conf_dir / "cnichain-default.conflist").exists()


def test_shipped_conflists_are_valid():
    from cnichain.podstate.runtime import ConfList

    folder = launchers.conflists_dir()
    names = [n for n in os.listdir(folder) if n.endswith((".conflist", ".conf"))]
    assert "cnichain-default.conflist" in names
    for name in names:
        conf = ConfList.load(os.path.join(folder, name))
        for plugin in conf.plugins:
            assert plugin["type"] in launchers.PLUGINS, f"{name}: {plugin['type']} is not a cnichain plugin"


def test_cli_is_not_needed_by_launchers():
    src = launchers.launcher_source("bridge", sys.executable, [])
    assert "typer" not in src and "cnichain.cli" not in src
