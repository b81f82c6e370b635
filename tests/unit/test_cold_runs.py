"""tests/coldruns.py, the callers' record of plugin execs that ran cold: a shim that cannot reach
its agent runs the plugin itself, and the record must show that exec (the agent never hears of it),
then leave the bin dir as the installer wrote it."""

from __future__ import annotations

import os
import subprocess

import pytest

from cnichain.node import launchers
from tests.coldruns import noted


def _installed(tmp_path) -> str:
    bin_dir = str(tmp_path / "bin")
    report = launchers.install(bin_dir, agent_socket=str(tmp_path / "no-agent.sock"))
    assert not report.refused
    return bin_dir


def _files(bin_dir: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, names in os.walk(bin_dir):
        for name in names:
            with open(os.path.join(root, name), "rb") as fh:
                out[os.path.join(root, name)] = fh.read()
    return out


def test_an_exec_whose_agent_is_gone_is_recorded_cold(tmp_path):
    bin_dir = _installed(tmp_path)
    with noted(bin_dir, str(tmp_path / "cold.log")) as cold:
        assert cold.runs() == []
        proc = subprocess.run([os.path.join(bin_dir, "bandwidth")], capture_output=True, timeout=60,
                              env={"CNI_COMMAND": "VERSION", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        assert proc.returncode == 0, proc.stderr
        assert b"supportedVersions" in proc.stdout  # the plugin answered, in-process
        assert cold.runs() == [("bandwidth", "VERSION")]


def test_the_bin_dir_is_put_back_as_installed(tmp_path):
    bin_dir = _installed(tmp_path)
    before = _files(bin_dir)
    with noted(bin_dir, str(tmp_path / "cold.log")):
        assert _files(bin_dir) != before
    assert _files(bin_dir) == before
    assert not launchers.install(bin_dir, agent_socket=str(tmp_path / "no-agent.sock")).refused


def test_a_record_that_was_never_made_is_an_error(tmp_path):
    bin_dir = _installed(tmp_path)
    with noted(bin_dir, str(tmp_path / "cold.log")) as cold:
        os.unlink(cold.log)
        with pytest.raises(FileNotFoundError):
            cold.runs()


def test_a_bin_dir_without_launchers_is_refused(tmp_path):
    with pytest.raises(AssertionError, match="cold entry"):
        with noted(str(tmp_path), str(tmp_path / "cold.log")):
            pass
