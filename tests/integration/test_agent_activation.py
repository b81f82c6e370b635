"""Socket activation end to end: the agent started with listening sockets inherited as systemd passes
them (fds from 3, LISTEN_FDS, LISTEN_PID = the agent's pid, LISTEN_FDNAMES) serves the shims on
them, never replaces or removes systemd's socket file, and a restarted agent serves on the same
socket.  Two ways of passing: a small exec wrapper built here (no systemd needed), and systemd's own
``systemd-socket-activate`` when it is installed (it starts the agent on the first connection, as
the .socket unit does)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from cnichain.agent import agent_command, fetch_metrics
from tests import required
from tests.integration.agent_setup import AGENT_ENV, PROBE, Setup, probe_conf, run, wait_for

pytestmark = pytest.mark.integration

# What systemd does between fork and exec, as a program: the inherited sockets moved to 3, 4, ...,
# the variables set for this very pid (exec keeps it), then the agent exec'd in its place.
_PASS_FDS = """
import fcntl, os, sys
src = [int(x) for x in sys.argv[1].split(",")]
high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in src]
for fd in src:
    os.close(fd)
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.close(fd)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS=str(len(src)))
if sys.argv[2]:
    os.environ["LISTEN_FDNAMES"] = sys.argv[2]
os.execv(sys.argv[3], sys.argv[3:])
"""


@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    s = Setup(str(tmp_path))
    os.makedirs(os.path.dirname(s.sock), mode=0o700, exist_ok=True)
    return s


def listening(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        s.bind(path)
    finally:
        os.umask(old)
    s.listen(64)
    return s


def start_passing(setup: Setup, socks: list[socket.socket], names: str) -> subprocess.Popen:
    argv = agent_command(setup.sock, "--plugin", PROBE, "--pool", "1")
    log = open(setup.sock + ".log", "ab")
    try:
        return subprocess.Popen([sys.executable, "-I", "-c", _PASS_FDS, ",".join(str(s.fileno()) for s in socks),
                                 names, *argv], pass_fds=[s.fileno() for s in socks], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, env={**os.environ, **AGENT_ENV})
    finally:
        log.close()


def log_text(setup: Setup) -> str:
    with open(setup.sock + ".log", errors="replace") as fh:
        return fh.read()


def serving(setup: Setup, times: int = 1) -> bool:
    return log_text(setup).count("serving on") >= times


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(30)


def test_the_agent_serves_on_the_sockets_it_is_passed_and_leaves_them_to_systemd(setup, lab):
    cni, metrics = listening(setup.sock), listening(setup.sock + ".metrics")
    inodes = (os.stat(setup.sock).st_ino, os.stat(setup.sock + ".metrics").st_ino)
    try:
        for round_ in (1, 2):  # a restart: the second agent gets the very same sockets
            proc = start_passing(setup, [metrics, cni], "metrics:cni")
            try:
                wait_for(lambda p=proc, n=round_: serving(setup, n) or p.poll() is not None, timeout=60)
                assert proc.poll() is None, log_text(setup)
                assert "(from systemd: cni, metrics)" in log_text(setup)
                code, out, err = run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node,
                                     CNI_CONTAINERID=f"act{round_}")
                assert code == 0, (out, err)
                wait_for(lambda n=round_: log_text(setup).count("request plugin=probe command=ADD") == n)
                assert "cnichain_agent_requests_total" in fetch_metrics(setup.sock + ".metrics")
            finally:
                assert stop(proc) == 0
            # Not rebound, not removed: the files are still the sockets systemd (here: the test) made.
            assert (os.stat(setup.sock).st_ino, os.stat(setup.sock + ".metrics").st_ino) == inodes
        assert len([r for r in setup.records() if r.get("phase") == "end"]) == 2, setup.records()
    finally:
        cni.close()
        metrics.close()


def test_an_unnamed_socket_is_known_by_its_path(setup, lab):
    cni = listening(setup.sock)
    try:
        proc = start_passing(setup, [cni], "")
        try:
            wait_for(lambda: serving(setup) or proc.poll() is not None, timeout=60)
            assert proc.poll() is None, log_text(setup)
            code, out, err = run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node)
            assert code == 0, (out, err)
            wait_for(lambda: "request plugin=probe command=ADD" in log_text(setup))
        finally:
            assert stop(proc) == 0
    finally:
        cni.close()


def test_a_socket_the_shims_do_not_use_stops_the_agent(setup):
    elsewhere = listening(os.path.join(os.path.dirname(setup.sock), "elsewhere.sock"))
    try:
        proc = start_passing(setup, [elsewhere], "cni")
        assert proc.wait(60) != 0
    finally:
        elsewhere.close()
    assert "keep ListenStream= and --socket in step" in log_text(setup)
    assert not os.path.exists(setup.sock)  # nothing half set up where the shims look


def test_systemd_socket_activate_starts_the_agent_on_the_first_exec(setup, lab):
    required.command("systemd-socket-activate", "systemd")
    argv = agent_command(setup.sock, "--plugin", PROBE, "--pool", "1")
    log = open(setup.sock + ".log", "ab")
    try:
        proc = subprocess.Popen(["systemd-socket-activate", "-l", setup.sock, "--fdname=cni", *argv],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, umask=0o177,
                                env={**os.environ, **AGENT_ENV})
    finally:
        log.close()
    try:
        wait_for(lambda: os.path.exists(setup.sock), timeout=30)
        assert not serving(setup)  # listening, nothing started yet
        # The first exec starts the agent; it is answered warm, or cold past the shim's ACK deadline
        # while the agent warms up -- the same bytes either way.
        first = run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, CNI_CONTAINERID="first")
        assert first[0] == 0, first
        wait_for(lambda: serving(setup), timeout=60)
        assert "(from systemd: cni)" in log_text(setup)
        code, out, err = run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, CNI_CONTAINERID="second")
        assert code == 0, (out, err)
        wait_for(lambda: "container=second" in log_text(setup))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
