"""The native shim's baked configuration and how the installer lays it out on a node.

The block layout lives twice (shim/cnichain-shim.c and cnichain.node.native_shim); the first test
keeps the two in step.  The rest install into tmp dirs: which files are written, that uninstall
removes exactly those, and that the agent's delegate shortcut still recognises our executables.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from cnichain.node import launchers
from cnichain.node import native_shim
from cnichain.agent import launcher_target
from tests import required

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shim",
                      "cnichain-shim.c")
needs_binary = pytest.mark.usefixtures("built_shim")


@pytest.fixture
def built_shim() -> str:
    """The native shim ./run built; missing fails under ./run (tests/required.py)."""
    return required.native_shim()


def test_block_layout_matches_the_c_source():
    with open(SOURCE) as fh:
        src = fh.read()
    struct = re.search(r"struct shim_config \{(.*?)\};", src, re.S).group(1)
    fields = tuple((name, int(size)) for name, size in re.findall(r"char (\w+)\[(\d+)\];", struct))
    assert fields == native_shim.FIELDS
    assert f'"{native_shim.MAGIC.decode()}"' in src


def _fake_binary() -> bytes:
    return b"\x7fELF" + b"x" * 100 + native_shim.MAGIC + b"\0" * (native_shim.BLOCK_SIZE - len(native_shim.MAGIC)) + b"tail"


def test_configure_round_trips_and_keeps_the_rest_of_the_file():
    config = native_shim.ShimConfig("host-local", "/run/cnichain/agent.sock", "/opt/cni/bin/.cnichain-cold/host-local")
    data = native_shim.configure(_fake_binary(), config)
    assert len(data) == len(_fake_binary()) and data.endswith(b"tail") and data[:104] == _fake_binary()[:104]
    assert native_shim.read_config(data) == config
    assert native_shim.read_config(_fake_binary()) is None  # generic: not configured


@pytest.mark.parametrize("config,match", [
    (("Bad/Type", "/s", "/f"), "plugin type"),
    (("x" * 64, "/s", "/f"), "plugin type"),
    (("ok", "", "/f"), "socket"),
    (("ok", "/" + "s" * 107, "/f"), "socket"),
    (("ok", "/s", "relative/path"), "absolute"),
    (("ok", "/s", "/" + "f" * 600), "does not fit"),
])
def test_configure_refuses_what_the_shim_could_not_use(config, match):
    with pytest.raises(ValueError, match=match):
        native_shim.configure(_fake_binary(), native_shim.ShimConfig(*config))


def test_configure_refuses_a_binary_without_exactly_one_block():
    with pytest.raises(ValueError, match="not a cnichain native shim"):
        native_shim.configure(b"\x7fELF plain", native_shim.ShimConfig("ok", "/s", "/f"))
    with pytest.raises(ValueError, match="ambiguous"):
        native_shim.configure(_fake_binary() * 2, native_shim.ShimConfig("ok", "/s", "/f"))


@needs_binary
def test_native_install_writes_shim_and_cold_launcher_and_uninstall_removes_both(tmp_path):
    bin_dir = str(tmp_path)
    report = launchers.install(bin_dir, plugins=["host-local"], agent_socket="/run/x/agent.sock")
    exe = os.path.join(bin_dir, "host-local")
    cold = native_shim.cold_launcher_path(bin_dir, "host-local")
    assert report.written == [cold, exe]
    with open(exe, "rb") as fh:
        config = native_shim.read_config(fh.read())
    assert config == native_shim.ShimConfig("host-local", "/run/x/agent.sock", cold)
    with open(cold) as fh:
        src = fh.read()
    assert launchers.MARKER in src and "forward(" not in src  # the fallback never asks the agent again
    assert launchers.python_launcher(exe) == cold and launchers.python_launcher(cold) == cold
    assert launcher_target(exe) == ("host-local", "/run/x/agent.sock")
    assert launchers.install(bin_dir, plugins=["host-local"], agent_socket="/run/x/agent.sock").unchanged == [cold, exe]
    report = launchers.uninstall(bin_dir)
    assert sorted(report.removed) == sorted([cold, exe])
    assert os.listdir(bin_dir) == []


@needs_binary
def test_native_executable_runs_cold_without_an_agent(tmp_path):
    launchers.install(str(tmp_path / "n"), plugins=["host-local"], agent_socket=str(tmp_path / "absent.sock"))
    launchers.install(str(tmp_path / "p"), plugins=["host-local"], agent_socket="")
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    outs = []
    for folder in ("n", "p"):
        proc = subprocess.run([str(tmp_path / folder / "host-local")], input=b'{"cniVersion":"1.0.0","name":"n","ipam":{}}',
                              env=env, capture_output=True, timeout=60)
        outs.append((proc.returncode, proc.stdout, proc.stderr))
    assert outs[0] == outs[1] and outs[0][0] == 1
    proc = subprocess.run([str(tmp_path / "n" / "host-local")], env={"CNI_COMMAND": "VERSION"}, capture_output=True,
                          timeout=60)
    assert json.loads(proc.stdout)["supportedVersions"][0] == "0.1.0"


@needs_binary
def test_a_modified_shim_is_kept_and_a_foreign_cold_launcher_blocks_the_shim(tmp_path):
    bin_dir = str(tmp_path)
    launchers.install(bin_dir, plugins=["host-local"], agent_socket="/run/x/agent.sock")
    exe = tmp_path / "host-local"
    exe.write_bytes(exe.read_bytes() + b"\0")
    report = launchers.uninstall(bin_dir)
    assert report.refused == [str(exe)] and exe.exists()
    other = tmp_path / "o"
    cold = native_shim.cold_launcher_path(str(other), "host-local")
    os.makedirs(os.path.dirname(cold))
    with open(cold, "w") as fh:
        fh.write("#!/bin/sh\n")
    report = launchers.install(str(other), plugins=["host-local"], agent_socket="/run/x/agent.sock")
    assert report.refused == [cold, str(other / "host-local")] and not (other / "host-local").exists()


def test_without_an_agent_socket_or_a_binary_the_executable_is_a_python_launcher(tmp_path, monkeypatch):
    report = launchers.install(str(tmp_path / "a"), plugins=["host-local"], agent_socket="")
    assert report.written == [str(tmp_path / "a" / "host-local")]
    monkeypatch.setattr(native_shim, "built_binary", lambda: None)
    report = launchers.install(str(tmp_path / "b"), plugins=["host-local"], agent_socket="/run/x/agent.sock")
    assert report.written == [str(tmp_path / "b" / "host-local")]
    assert (tmp_path / "b" / "host-local").read_text().startswith("#!")
    with pytest.raises(FileNotFoundError, match="not built"):
        launchers.install(str(tmp_path / "c"), plugins=["host-local"], native=True)


def test_cli_install_says_what_it_writes_and_can_keep_python_launchers(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cnichain.cli.app import app

    monkeypatch.setenv("CNICHAIN_AGENT_SOCKET", "/run/x/agent.sock")
    runner = CliRunner()
    assert "--python-launchers" in runner.invoke(app, ["install", "--help"]).output
    result = runner.invoke(app, ["install", "--bin-dir", str(tmp_path / "p"), "--python-launchers"])
    assert result.exit_code == 0 and ".cnichain-cold" not in result.output
    assert (tmp_path / "p" / "host-local").read_bytes().startswith(b"#!")
    if native_shim.built_binary() is not None:
        result = runner.invoke(app, ["install", "--bin-dir", str(tmp_path / "n")])
        assert result.exit_code == 0 and f"wrote      {tmp_path / 'n' / '.cnichain-cold' / 'host-local'}" in result.output
        assert (tmp_path / "n" / "host-local").read_bytes().startswith(b"\x7fELF")
    result = runner.invoke(app, ["uninstall", "--bin-dir", str(tmp_path / "n")])
    assert result.exit_code == 0 and not any(p.name != ".cnichain-install.json" for p in (tmp_path / "n").iterdir())
