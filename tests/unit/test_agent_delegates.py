"""A delegated STATUS (bridge -> host-local) runs in the delegating worker itself: the answer is the
cold exec's, byte for byte and error code for error code, the agent is never asked, and the
delegating request's streams and log settings are what they were before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import pytest

from cnichain.node import launchers
from cnichain.agent import DelegateRunner, load_plugins, protocol
from cnichain.agent.delegates import IN_PROCESS_COMMANDS
from cnichain.common import log as log_mod


@pytest.fixture
def bins(tmp_path):
    """host-local installed twice: warm (pointing at a listening socket that must stay untouched)
    and cold; and that socket."""
    sock_path = str(tmp_path / "agent.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(4)
    srv.setblocking(False)
    launchers.install(str(tmp_path / "warm"), plugins=["host-local"], agent_socket=sock_path)
    launchers.install(str(tmp_path / "cold"), plugins=["host-local"], agent_socket="")
    yield tmp_path, sock_path, srv
    srv.close()


def _conf(tmp_path, **ipam) -> bytes:
    base = {"type": "host-local", "subnet": "10.77.0.0/30", "dataDir": str(tmp_path / "ipam")}
    base.update(ipam)
    return json.dumps({"cniVersion": "1.1.0", "name": "dnet", "type": "bridge", "ipam": base}).encode()


def _cold(tmp_path, env: dict, stdin: bytes) -> tuple[int, bytes, bytes]:
    proc = subprocess.run([str(tmp_path / "cold" / "host-local")], input=stdin, env=env, capture_output=True,
                          timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def _cases(tmp_path):
    full = tmp_path / "ipam" / "dnet"
    yield "free", _conf(tmp_path), None
    yield "exhausted", _conf(tmp_path), full  # the /30's one usable address reserved below
    yield "bad range", _conf(tmp_path, subnet="10.77.0.0/33"), None
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    yield "store not creatable", _conf(tmp_path, dataDir=str(blocker / "ipam")), None
    yield "bad json", b'{"cniVersion": "1.1.0", "name": "dnet", "ipam": {', None
    yield "old version", _conf(tmp_path).replace(b'"1.1.0"', b'"0.4.0"'), None


def test_status_runs_here_with_the_cold_answer(bins):
    tmp_path, sock_path, srv = bins
    runner = DelegateRunner(load_plugins({}), sock_path, 5.0)
    binary = str(tmp_path / "warm" / "host-local")
    env = {"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path / "warm"), "PATH": os.environ.get("PATH", "/usr/bin"),
           "CNICHAIN_AGENT_SOCKET": sock_path}
    assert "STATUS" in IN_PROCESS_COMMANDS
    seen = []
    for name, stdin, reserve in _cases(tmp_path):
        if reserve is not None:
            reserve.mkdir(parents=True, exist_ok=True)
            (reserve / "10.77.0.2").write_text("ctr\r\neth0")
        warm = runner(binary, env, stdin)
        cold = _cold(tmp_path, {**env, "CNICHAIN_AGENT_SOCKET": "off"}, stdin)
        assert warm == cold, name
        seen.append((name, warm[0], json.loads(warm[1]).get("code") if warm[1] else None))
    # STATUS is node health: a full range or a key STATUS does not read never fails it (the next
    # ADD reports those); a store that cannot be created does, with the spec's "not available".
    assert [s[1] for s in seen] == [0, 0, 0, 1, 1, 1], seen
    assert seen[3][2] == 50
    with pytest.raises(BlockingIOError):
        srv.accept()  # nothing went through the agent


def test_the_delegating_requests_streams_and_log_are_put_back(bins, tmp_path):
    root, sock_path, _srv = bins
    runner = DelegateRunner(load_plugins({}), sock_path, 5.0)
    env = {"CNI_COMMAND": "STATUS", "CNI_PATH": str(root / "warm"), "CNICHAIN_AGENT_SOCKET": sock_path}
    conf = json.loads(_conf(root))
    conf["ipam"]["log"] = {"file": str(tmp_path / "delegate.log"), "level": "debug"}
    conf["log"] = {"file": str(tmp_path / "delegate.log"), "level": "debug"}
    streams = sys.stdout, sys.stderr
    log_mod.log.configure({"file": str(tmp_path / "bridge.log"), "level": "info"}, "bridge")
    try:
        before = dict(vars(log_mod.log))
        code, _out, _err = runner(str(root / "warm" / "host-local"), env, json.dumps(conf).encode())
        assert code == 0
        assert (sys.stdout, sys.stderr) == streams
        assert dict(vars(log_mod.log)) == before
    finally:
        log_mod.log.__init__()  # type: ignore[misc]


def test_other_commands_still_go_to_the_agent(bins):
    """VERSION (like ADD, DEL, CHECK, GC) keeps its own worker: the agent is asked (here it refuses,
    so the delegate is forked from this worker)."""
    tmp_path, sock_path, srv = bins
    srv.setblocking(True)
    srv.settimeout(10.0)
    seen = []

    def agent():
        conn, _ = srv.accept()
        seen.append(conn.recv(65536))
        conn.sendall(protocol.refusal("agent is at its worker limit"))
        conn.close()

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    runner = DelegateRunner(load_plugins({}), sock_path, 5.0)
    env = {"CNI_COMMAND": "VERSION", "CNICHAIN_AGENT_SOCKET": sock_path}
    code, out, _ = runner(str(tmp_path / "warm" / "host-local"), env, b"")
    thread.join(10)
    assert code == 0 and "supportedVersions" in json.loads(out)
    assert seen and seen[0].startswith(b"CNIA")
