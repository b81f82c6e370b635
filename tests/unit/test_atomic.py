"""The one atomic file write (common/atomic.py): whole file or old file, exact mode, no leftovers."""

from __future__ import annotations

import os
import stat

import pytest

from cnichain.common import atomic


def test_write_file_replaces_whole_with_the_mode_asked_whatever_the_umask(tmp_path):
    path = tmp_path / "state.json"
    path.write_bytes(b"old")
    old_umask = os.umask(0o077)
    try:
        atomic.write_file(str(path), b"new" * 10_000, 0o644)
    finally:
        os.umask(old_umask)
    assert path.read_bytes() == b"new" * 10_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["state.json"]


def test_default_mode_is_root_only_and_durable_writes_the_same(tmp_path):
    path = tmp_path / "a"
    atomic.write_file(str(path), b"x", durable=True)
    assert path.read_bytes() == b"x" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_temporary_names_are_hidden_and_never_a_network_config(tmp_path):
    for name in ("10-x.conflist", "99.conf", "k.json"):
        tmp = atomic.temp_sibling(str(tmp_path / name))
        base = os.path.basename(tmp)
        assert os.path.dirname(tmp) == str(tmp_path) and base.startswith(f".{name}.tmp-")
        assert not base.endswith((".conf", ".conflist", ".json"))
    assert os.path.basename(atomic.temp_sibling(str(tmp_path / "x"), ".sweep-")).startswith(f".sweep-{os.getpid()}-")
    assert atomic.temp_sibling(str(tmp_path / "x")) != atomic.temp_sibling(str(tmp_path / "x"))


def test_a_failed_rename_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "dir-in-the-way"
    (target / "inside").mkdir(parents=True)
    with pytest.raises(OSError):
        atomic.write_file(str(target), b"x")
    assert sorted(os.listdir(tmp_path)) == ["dir-in-the-way"]


def test_write_new_is_exclusive_and_follows_no_symlink(tmp_path):
    path = tmp_path / "t"
    atomic.write_new(str(path), b"1", 0o600)
    with pytest.raises(FileExistsError):
        atomic.write_new(str(path), b"2", 0o600)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        atomic.write_new(str(tmp_path / "link"), b"3", 0o600)
    assert path.read_bytes() == b"1" and not (tmp_path / "elsewhere").exists()


def test_fsync_dir_needs_a_directory(tmp_path):
    atomic.fsync_dir(str(tmp_path))
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(NotADirectoryError):
        atomic.fsync_dir(str(tmp_path / "f"))


def test_a_killed_writers_temp_sibling_starts_with_the_default_prefix(tmp_path):
    path = str(tmp_path / "ctr_eth0.json")
    assert os.path.basename(atomic.temp_sibling(path)).startswith(atomic.default_temp_prefix(path))
