"""The long-lived workers' pure parts: DONE reports, pool sizing, and a home's checks (in a child)."""

from __future__ import annotations

import os
import selectors
import signal
import time

import pytest

from cnichain.agent import pool, pool_keeper
from cnichain.agent.config import AgentConfig
from cnichain.agent.home import Home
from cnichain.agent.log import AgentLog


def test_done_reports_round_trip_and_anything_else_is_not_one():
    done = pool.Done(1, False, 0.0125, 321, "the request left descriptor(s) [7] open")
    assert pool.decode_done(pool.encode_done(done)) == done
    assert pool.decode_done(pool.encode_done(pool.Done(0, True, 0.0, 0, ""))) == pool.Done(0, True, 0.0, 0, "")
    for msg in (b"", pool.READY, b"done", b"done\0"):
        assert pool.decode_done(msg) is None


def test_the_pool_is_sized_to_the_recent_peak_within_the_limits(monkeypatch):
    keeper = pool_keeper.PoolKeeper(AgentConfig(pool_size=2, max_workers=10), {}, selectors.DefaultSelector(), AgentLog())
    assert keeper.target() == 2
    keeper.note_parallel(8)
    keeper.note_parallel(3)  # lower than the peak: remembered peak stays
    assert keeper.target() == 8
    keeper.note_parallel(40)
    assert keeper.target() == 10  # never beyond --max-workers
    later = time.monotonic() + pool_keeper.PEAK_WINDOW + 1
    monkeypatch.setattr(pool_keeper.time, "monotonic", lambda: later)
    assert keeper.target() == 2  # the burst aged out
    keeper.note_parallel(1)
    assert keeper.peak == 1


def _in_child(body) -> str:
    """Run ``body()`` (returns a str) in a forked child; its result, or the child's error."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, body().encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(w, f"error: {exc!r}".encode())
        finally:
            os._exit(0)
    os.close(w)
    out = b""
    while chunk := os.read(r, 65536):
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode()


def _request(change):
    def body() -> str:
        home = Home.capture()
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        mnt = os.open("/proc/self/ns/mnt", os.O_RDONLY)
        home.enter(own, mnt, 0o027, {"CNI_COMMAND": "ADD"})
        os.close(own)
        os.close(mnt)
        change()
        return home.leave() or "clean"
    return body


@pytest.mark.parametrize("change,reason", [
    (lambda: None, "clean"),
    (lambda: os.chdir("/tmp"), "working directory"),
    (lambda: os.umask(0), "umask"),
    (lambda: os.environ.__setitem__("LEFT", "1"), "environment"),
    (lambda: os.open("/dev/null", os.O_RDONLY), "descriptor"),
    (lambda: signal.signal(signal.SIGUSR2, lambda *_: None), "signal"),
])
def test_a_home_finds_what_a_request_left_behind(change, reason):
    assert reason in _in_child(_request(change))


def test_a_home_undoes_the_request_state_it_set_up():
    def body() -> str:
        before = (os.getcwd(), os.umask(0o022), dict(os.environ))
        home = Home.capture()
        own = os.open("/proc/self/ns/net", os.O_RDONLY)
        mnt = os.open("/proc/self/ns/mnt", os.O_RDONLY)
        home.enter(own, mnt, 0o077, {"ONLY": "this"})
        os.close(own)
        os.close(mnt)
        assert dict(os.environ) == {"ONLY": "this"}
        assert home.leave() == ""
        after = (os.getcwd(), os.umask(0o022), dict(os.environ))
        return "same" if after == ("/", before[1], before[2]) else f"{before} != {after}"
    assert _in_child(body) == "same"
