"""tuning's DEL takes the temp sibling an ADD killed mid-write left next to its backup (found by
tests/integration/test_agent_killed_mid_request.py: the node was left one hidden file per kill)."""

from __future__ import annotations

import os

from cnichain.plugins.tuning import kernel


def test_remove_backup_takes_a_killed_writers_temp_sibling_and_nothing_else(tmp_path):
    backup = tmp_path / "ctr1_eth0.json"
    backup.write_text("{}")
    (tmp_path / ".ctr1_eth0.json.tmp-4242-0badcafe").write_text("")  # an ADD killed before its rename
    (tmp_path / ".ctr10_eth0.json.tmp-4243-0badcafe").write_text("")  # another container's
    (tmp_path / "ctr2_eth0.json").write_text("{}")
    kernel.remove_backup(str(backup))
    assert sorted(os.listdir(tmp_path)) == [".ctr10_eth0.json.tmp-4243-0badcafe", "ctr2_eth0.json"]


def test_remove_backup_of_a_missing_directory_is_a_no_op(tmp_path):
    kernel.remove_backup(str(tmp_path / "gone" / "ctr1_eth0.json"))
