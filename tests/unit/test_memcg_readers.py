"""tools/memcg.py's readers on a stand-in cgroup directory: a file that cannot be read is an error,
never a reading of 0 (a "peak below the limit" or "no OOM kill" check would pass unmeasured)."""

from __future__ import annotations

import pytest

from cnichain.tools.memcg import MemCgroup, Unreadable


def _cgroup(path: str, v2: bool = True) -> MemCgroup:
    cg = MemCgroup.__new__(MemCgroup)  # no kernel cgroup: only the directory the readers read
    cg.memory, cg.v2, cg.dirs, cg.limit = path, v2, [path], 1 << 20
    return cg


def test_readers_read_what_the_kernel_wrote(tmp_path):
    (tmp_path / "memory.peak").write_text("4096\n")
    (tmp_path / "memory.current").write_text("1024\n")
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    cg = _cgroup(str(tmp_path))
    assert (cg.peak(), cg.usage(), cg.oom_kills()) == (4096, 1024, 2)


@pytest.mark.parametrize("v2", [True, False], ids=["v2", "v1"])
@pytest.mark.parametrize("reader", ["peak", "usage", "oom_kills"])
def test_a_missing_file_raises(tmp_path, reader, v2):
    with pytest.raises(Unreadable):
        getattr(_cgroup(str(tmp_path), v2), reader)()


@pytest.mark.parametrize("reader, name", [("peak", "memory.peak"), ("usage", "memory.current")])
def test_a_file_without_a_number_raises(tmp_path, reader, name):
    (tmp_path / name).write_text("max\n")
    with pytest.raises(Unreadable):
        getattr(_cgroup(str(tmp_path)), reader)()


def test_an_events_file_without_oom_kill_raises(tmp_path):
    (tmp_path / "memory.events").write_text("low 0\nhigh 0\n")
    with pytest.raises(Unreadable):
        _cgroup(str(tmp_path)).oom_kills()


def test_a_directory_in_place_of_the_file_raises(tmp_path):
    (tmp_path / "memory.peak").mkdir()  # open() fails as on an unreadable file (root reads 0400 files)
    with pytest.raises(Unreadable):
        _cgroup(str(tmp_path)).peak()
