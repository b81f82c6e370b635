"""Every delegated command (bridge -> host-local) runs in the delegating worker itself: the answer
is the cold exec's, byte for byte and error code for error code, the agent is never asked, and the
delegating request's streams and log settings are what they were before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from cnichain.node import launchers
from cnichain.agent import DelegateRunner, load_plugins
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
    runner = DelegateRunner(load_plugins({}), sock_path)
    binary = str(tmp_path / "warm" / "host-local")
    env = {"CNI_COMMAND": "STATUS", "CNI_PATH": str(tmp_path / "warm"), "PATH": os.environ.get("PATH", "/usr/bin"),
           "CNICHAIN_AGENT_SOCKET": sock_path}
    seen = []
    for name, stdin, reserve in _cases(tmp_path):
        if reserve is not None:
            reserve.mkdir(parents=True, exist_ok=True)
            (reserve / "10.77.0.2").write_text("ctr\r\neth0")
        warm = runner(binary, env, stdin)
        cold = _cold(tmp_path, {**env, "CNICHAIN_AGENT_SOCKET": "off"}, stdin)
        assert warm == cold, name
        seen.append((name, warm[0], json.loads(warm[1]).get("code") if warm[1] else None))
    _never_asked(srv)
    # STATUS is node health: a full range or a key STATUS does not read never fails it (the next
    # ADD reports those); a store that cannot be created does, with the spec's "not available".
    assert [s[1] for s in seen] == [0, 0, 0, 1, 1, 1], seen
    assert seen[3][2] == 50
    with pytest.raises(BlockingIOError):
        srv.accept()  # nothing went through the agent


def test_the_delegating_requests_streams_and_log_are_put_back(bins, tmp_path):
    root, sock_path, _srv = bins
    runner = DelegateRunner(load_plugins({}), sock_path)
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


def _never_asked(srv: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        srv.accept()


def test_add_check_del_and_version_run_here_with_the_cold_answer(bins):
    """ADD, CHECK, DEL and VERSION run in place too (in a storm a worker of their own was a fork
    per delegate): each answer equals the cold exec's for the same store state."""
    tmp_path, sock_path, srv = bins
    runner = DelegateRunner(load_plugins({}), sock_path)
    binary = str(tmp_path / "warm" / "host-local")
    base = {"CNI_PATH": str(tmp_path / "warm"), "PATH": os.environ.get("PATH", "/usr/bin"),
            "CNICHAIN_AGENT_SOCKET": sock_path, "CNI_NETNS": "/var/run/netns/a-pod", "CNI_IFNAME": "eth0"}
    conf = _conf(tmp_path, subnet="10.77.0.0/29")
    store = tmp_path / "ipam" / "dnet"

    def both(command: str, cid: str, stdin: bytes = conf) -> tuple:
        env = {**base, "CNI_COMMAND": command, "CNI_CONTAINERID": cid}
        return runner(binary, env, stdin), env

    warm, env = both("VERSION", "v", b"")
    assert warm == _cold(tmp_path, {**env, "CNICHAIN_AGENT_SOCKET": "off"}, b"") and warm[0] == 0
    warm, _ = both("ADD", "ctr-warm")
    cold = _cold(tmp_path, {**base, "CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr-cold",
                            "CNICHAIN_AGENT_SOCKET": "off"}, conf)
    assert warm[0] == cold[0] == 0, (warm, cold)
    got = [json.loads(answer[1])["ips"][0]["address"] for answer in (warm, cold)]
    assert got == ["10.77.0.2/29", "10.77.0.3/29"], got  # one store: the cold exec saw the warm reservation
    assert (store / "10.77.0.2").read_text().startswith("ctr-warm")
    warm, env = both("CHECK", "ctr-warm", json.dumps({**json.loads(conf), "prevResult": json.loads(warm[1])}).encode())
    assert warm[0] == 0, warm
    full = _conf(tmp_path, subnet="10.77.0.0/30")
    warm, env = both("ADD", "ctr-full", full)  # .2 is ctr-warm's: the /30 has no other address
    assert warm == _cold(tmp_path, {**env, "CNICHAIN_AGENT_SOCKET": "off"}, full) and warm[0] != 0, warm
    warm, env = both("DEL", "ctr-warm")
    assert warm[0] == 0 and not (store / "10.77.0.2").exists(), warm
    assert warm == _cold(tmp_path, {**env, "CNICHAIN_AGENT_SOCKET": "off"}, conf)  # DEL again: the same
    _never_asked(srv)
