"""The containerd-log reading the runtime suite uses: it reports failed plugin execs and nothing else."""

from __future__ import annotations

import pytest

from cnichain.tools.containerd_node.process import plugin_failures

FAILED_SETUP = ('time="2026-12-02T10:00:00Z" level=error msg="RunPodSandbox for &PodSandboxMetadata{Name:p0,} failed, '
                'error" error="failed to setup network for sandbox \\"abc\\": plugin type=\\"portmap\\" '
                'name=\\"cnichain\\" failed (add): boom"')
FAILED_TEARDOWN = ('time="2026-12-02T10:00:01Z" level=error msg="StopPodSandbox for \\"abc\\" failed" '
                   'error="failed to destroy network for sandbox \\"abc\\": plugin type=\\"bandwidth\\" failed (delete): x"')
BARE_LIBCNI = 'level=error msg="x" error="plugin type=\\"bridge\\" name=\\"n\\" failed (check): no route"'
TTRPC = ('time="2026-12-02T10:00:02Z" level=error msg="failed sending message on channel" '
         'error="write unix /run/containerd/s/cni-abc->@: write: broken pipe"')
NOT_READY = 'level=error msg="failed to load cni during init, please check CRI plugin status" error="cni config load failed"'


def _log(tmp_path, *lines: str) -> str:
    path = tmp_path / "containerd.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_failed_setup_teardown_and_check_are_reported(tmp_path):
    assert len(plugin_failures(_log(tmp_path, FAILED_SETUP, FAILED_TEARDOWN, BARE_LIBCNI))) == 3


def test_a_ttrpc_broken_pipe_or_a_config_reload_is_not_a_plugin_failure(tmp_path):
    assert plugin_failures(_log(tmp_path, TTRPC, NOT_READY)) == []


def test_a_missing_log_is_an_error_not_a_clean_log(tmp_path):
    with pytest.raises(FileNotFoundError):
        plugin_failures(str(tmp_path / "absent.log"))
