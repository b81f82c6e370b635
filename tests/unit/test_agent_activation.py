"""sd_listen_fds semantics of the agent's socket activation (agent/activation.py), on real
sockets placed at consecutive descriptors as systemd places them (here from fd 200, not 3)."""

from __future__ import annotations

import os
import socket

import pytest

from cnichain.agent import activation

FIRST = 200


@pytest.fixture
def place(tmp_path):
    """place(*socks) puts the sockets at FIRST, FIRST+1, ...; everything is closed afterwards."""
    placed: list[int] = []

    def put(*socks: socket.socket) -> None:
        for i, s in enumerate(socks):
            os.dup2(s.fileno(), FIRST + i)
            placed.append(FIRST + i)
            s.close()

    yield put
    for fd in placed:
        try:
            os.close(fd)
        except OSError:
            pass


def listening(path: str, mode: int = 0o600) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    os.chmod(path, mode)
    s.listen(4)
    return s


def env(count: int, names=None, pid=None) -> dict:
    e = {"LISTEN_PID": str(os.getpid() if pid is None else pid), "LISTEN_FDS": str(count), "OTHER": "x"}
    if names is not None:
        e["LISTEN_FDNAMES"] = names
    return e


def test_nothing_passed_or_meant_for_another_process(place, tmp_path):
    assert activation.listen_fds({}, FIRST) == []
    place(listening(str(tmp_path / "a.sock")))
    e = env(1, "cni", pid=os.getpid() + 1)
    assert activation.listen_fds(e, FIRST) == []
    assert e == {"OTHER": "x"}  # removed either way: workers and plugins never see them
    os.fstat(FIRST)  # and the descriptor was left alone


def test_named_sockets_are_assigned_by_name(place, tmp_path):
    cni, metrics = str(tmp_path / "agent.sock"), str(tmp_path / "agent.sock.metrics")
    place(listening(metrics), listening(cni))
    e = env(2, "metrics:cni")
    passed = activation.listen_fds(e, FIRST)
    assert [name for _, name in passed] == ["metrics", "cni"] and e == {"OTHER": "x"}
    assert all(not os.get_inheritable(s.fileno()) for s, _ in passed)  # close-on-exec, as sd_listen_fds does
    jobs = activation.assign(passed, {"cni": cni, "metrics": metrics})
    assert {job: path for job, (_, path) in jobs.items()} == {"cni": cni, "metrics": metrics}
    assert jobs["cni"][0].fileno() == FIRST + 1


def test_unnamed_sockets_are_assigned_by_path(place, tmp_path):
    cni = str(tmp_path / "agent.sock")
    place(listening(cni))
    passed = activation.listen_fds(env(1), FIRST)
    assert [name for _, name in passed] == ["unknown"]
    assert list(activation.assign(passed, {"cni": cni, "metrics": ""})) == ["cni"]
    passed[0][0].close()
    place(listening(str(tmp_path / "b.sock")))
    passed = activation.listen_fds(env(1, "cnichain-agent.socket"), FIRST)  # systemd's default: the unit name
    with pytest.raises(SystemExit, match="serves none"):
        activation.assign(passed, {"cni": cni, "metrics": ""})


@pytest.mark.parametrize("bad", ["count", "names", "number"])
def test_inconsistent_variables_stop_the_agent(place, tmp_path, bad):
    place(listening(str(tmp_path / "a.sock")))
    e = {"count": env(20), "names": env(1, "cni:metrics"), "number": {"LISTEN_PID": "me", "LISTEN_FDS": "1"}}[bad]
    with pytest.raises(SystemExit, match="socket activation"):
        activation.listen_fds(e, FIRST)


def test_descriptors_that_are_not_listening_unix_stream_sockets(place, tmp_path):
    r, w = os.pipe()
    os.dup2(r, FIRST)
    os.close(r)
    os.close(w)
    try:
        with pytest.raises(SystemExit, match="not a socket"):
            activation.listen_fds(env(1, "cni"), FIRST)
    finally:
        os.close(FIRST)
    place(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))  # never listening
    with pytest.raises(SystemExit, match="not a listening unix stream socket"):
        activation.listen_fds(env(1, "cni"), FIRST)


def test_a_socket_elsewhere_or_reachable_by_others_is_refused(place, tmp_path):
    cni = str(tmp_path / "agent.sock")
    place(listening(str(tmp_path / "other.sock")), listening(str(tmp_path / "open.sock"), 0o666))
    passed = activation.listen_fds(env(2, "cni:metrics"), FIRST)
    with pytest.raises(SystemExit, match="keep ListenStream= and --socket in step"):
        activation.assign(passed[:1], {"cni": cni, "metrics": ""})
    with pytest.raises(SystemExit, match="configured without one"):
        activation.assign(passed[1:], {"cni": cni, "metrics": ""})
    with pytest.raises(SystemExit, match="others cannot write to"):
        activation.assign(passed[1:], {"cni": cni, "metrics": str(tmp_path / "open.sock")})


def test_two_sockets_for_one_job(place, tmp_path):
    cni = str(tmp_path / "agent.sock")
    first = listening(cni)
    os.unlink(cni)  # the same path bound again: both report it
    place(first, listening(cni))
    passed = activation.listen_fds(env(2, "cni:cni"), FIRST)
    with pytest.raises(SystemExit, match="two sockets were passed for cni"):
        activation.assign(passed, {"cni": cni, "metrics": ""})
