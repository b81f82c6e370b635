"""The node agent, seen from the outside: real shims, real forked workers, lab namespaces.

Each test starts its own agent on a socket in a private tmp dir (never /run/cnichain) and writes
two sets of launchers with the real installer: warm ones that try that socket and cold ones that
never do.  The test-only ``probe`` plugin (tests/integration/agent_probe.py) records where it
ran, so isolation, fallback, limits and draining are observed rather than assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from typing import Iterator

import pytest

from cnichain.node import launchers
from cnichain.agent import fetch_metrics, running_agent
from cnichain.podstate.runtime import Attachment, ConfList, Runtime
from cnichain.common import shim

from tests import required
from tests.integration.agent_setup import (
    AGENT_ENV, PROBE, Setup, answered, finish, ns_inode, probe_conf, run, served_warm, settled, start, wait_for, workers,
)

pytestmark = pytest.mark.integration

@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))


@pytest.fixture
def open_setup() -> Iterator[Setup]:
    """Like ``setup`` but directly under /tmp, so a test can let other users reach the socket."""
    root = tempfile.mkdtemp(prefix="cnichain-agent-test-")
    try:
        yield Setup(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- byte-for-byte the same as the cold path -----------------------------------------------------


def test_host_local_warm_equals_cold_byte_for_byte(setup, lab, cni_version):
    results = {}
    pod = lab.netns("pod")
    with setup.agent() as agent:
        for mode, bin_dir in (("warm", setup.warm), ("cold", setup.cold)):
            conf = {"cniVersion": cni_version, "name": "agentnet", "type": "bridge",
                    "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "gateway": "10.77.0.1",
                             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": os.path.join(setup.root, mode)}}
            steps = []
            for command in ("ADD", "CHECK", "DEL", "DEL"):
                proc = start(bin_dir, "host-local", command, conf, lab.node, CNI_NETNS=pod)
                steps.append(finish(proc))
            results[mode] = steps
        assert "plugin=host-local command=ADD" in open(agent.log_path).read()
    assert results["warm"] == results["cold"]
    assert results["warm"][0][0] == 0 and b"10.77.0.2" in results["warm"][0][1]


def test_same_netns_check_sees_the_callers_namespace(setup, lab):
    """CNI_NETNS equal to the namespace the plugin was exec'd in is code 8, warm as cold."""
    conf = {"cniVersion": "1.1.0", "name": "agentnet", "type": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": os.path.join(setup.root, "same")}}
    with setup.agent() as agent:
        warm = run(setup.warm, "host-local", "DEL", conf, lab.node, CNI_NETNS=lab.node)
        wait_for(lambda: 'plugin="host-local",command="DEL",outcome="error"} 1' in agent.metrics())  # warm, truly
        cold = run(setup.cold, "host-local", "DEL", conf, lab.node, CNI_NETNS=lab.node)
    assert warm == cold
    assert warm[0] == 1 and json.loads(warm[1])["code"] == 8


@pytest.mark.parametrize(
    "command,stdin,env",
    [
        ("VERSION", b"", {}),
        ("", b"", {}),  # no command: the "about" text on stderr
        ("ADD", b"{not json", {}),
        ("ADD", b'{"cniVersion":"9.9.9","name":"n"}', {}),
        ("ADD", b'{"cniVersion":"1.0.0","name":"n"}', {"CNI_IFNAME": ""}),
        ("FROB", b'{"cniVersion":"1.0.0","name":"n"}', {}),
        ("DEL", b'{"cniVersion":"1.0.0","name":"n","type":"x"}', {"CNI_CONTAINERID": "../etc"}),
    ],
)
def test_every_plugin_answers_errors_and_version_like_the_cold_path(setup, command, stdin, env):
    with setup.agent() as agent:
        for n, plugin in enumerate(launchers.available_plugins(), 1):
            warm = run(setup.warm, plugin, command, stdin, **env)
            wait_for(lambda n=n: answered(agent) == n)  # the agent answered it, not the cold fallback
            cold = run(setup.cold, plugin, command, stdin, **env)
            assert warm == cold, plugin


# -- where and how the worker runs -----------------------------------------------------------------


def test_worker_runs_in_the_callers_namespace_with_its_env_and_umask(setup, lab):
    with setup.agent():
        proc = start(setup.warm, "probe", "ADD", probe_conf(setup), lab.node, umask=0o027, MY_VAR="1")
        code, out, err = finish(proc)
        assert code == 0, out + err
        rec, end = setup.records()
        assert (rec["phase"], end["phase"], end["pid"]) == ("start", "end", rec["pid"])
        assert rec["pid"] != proc.pid  # it ran in an agent worker ...
        assert rec["netns"] == ns_inode(lab.node)  # ... in the caller's namespace, not the agent's
        assert rec["netns"] != ns_inode("/proc/self/ns/net")
        assert rec["umask"] == 0o027 and rec["cwd"] == "/"
        assert "MY_VAR" in rec["env"] and "CNI_CONTAINERID" in rec["env"]
        assert "CNICHAIN_TEST_AGENT_ONLY" not in rec["env"]  # the agent's own env stays out
        # the next request does not inherit the previous one's variables
        code, out, err = run(setup.warm, "probe", "ADD", probe_conf(setup), lab.node)
        assert code == 0, out + err
        assert "MY_VAR" not in setup.records()[-1]["env"]


def test_parallel_requests_run_concurrently(setup):
    with setup.agent():
        procs = [start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=3.0), CNI_CONTAINERID=f"par{i}")
                 for i in range(6)]
        assert [finish(p)[0] for p in procs] == [0] * 6
    recs = setup.records()
    starts = sorted(r["time"] for r in recs if r["phase"] == "start")
    ends = sorted(r["time"] for r in recs if r["phase"] == "end")
    assert len(starts) == len(ends) == 6
    assert all(r["pid"] not in [p.pid for p in procs] for r in recs)
    # at least two requests were inside their handler at the same moment
    assert starts[1] < ends[0]


def test_a_crashing_worker_fails_only_its_request(setup):
    with setup.agent() as agent:
        code, out, _ = run(setup.warm, "probe", "ADD", probe_conf(setup, crash=True))
        assert code == 1
        err = json.loads(out)
        assert err["code"] == 999 and "worker failed (signal 11)" in err["msg"]
        code, out, _ = run(setup.warm, "probe", "ADD", probe_conf(setup))
        assert code == 0
        assert agent.proc.poll() is None
        assert 'outcome="crashed"' in agent.metrics()


def test_a_hanging_worker_is_killed_at_the_limit(setup):
    with setup.agent("--request-timeout", "1") as agent:
        code, out, _ = run(setup.warm, "probe", "ADD", probe_conf(setup, hang=True))
        assert code == 1
        err = json.loads(out)
        assert (err["code"], err["msg"]) == (999, "cnichain agent: probe ADD did not finish within 1s")
        assert run(setup.warm, "probe", "ADD", probe_conf(setup))[0] == 0
        assert 'outcome="timeout"' in agent.metrics()


# -- the agent going away --------------------------------------------------------------------------


def test_killing_the_agent_mid_request_still_delivers_the_answer(setup):
    with setup.agent() as agent:
        proc = start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=1.0))
        wait_for(lambda: any(r["phase"] == "start" for r in setup.records()))
        agent.kill()
        code, out, err = finish(proc)
        assert code == 0, out + err
        assert json.loads(out) == {"cniVersion": "1.0.0"}
        phases = [(r["phase"], r["pid"]) for r in setup.records()]
        assert [p for p, _ in phases] == ["start", "end"]  # ran once, in the worker, not again cold
        assert phases[0][1] != proc.pid
        # With the agent dead (its socket file left behind), the next request runs cold.
        assert os.path.exists(setup.sock)
        proc = start(setup.warm, "probe", "ADD", probe_conf(setup))
        assert finish(proc)[0] == 0
        assert setup.records()[-1]["pid"] == proc.pid


def test_sigterm_drains_in_flight_requests(setup):
    with setup.agent() as agent:
        proc = start(setup.warm, "probe", "ADD", probe_conf(setup, sleep=1.0))
        wait_for(lambda: any(r["phase"] == "start" for r in setup.records()))
        agent.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: not os.path.exists(setup.sock))  # no new work is taken ...
        late = start(setup.warm, "probe", "ADD", probe_conf(setup), CNI_CONTAINERID="late")
        assert finish(late)[0] == 0
        assert setup.records()[-1]["pid"] == late.pid  # ... it runs cold instead
        code, out, err = finish(proc)
        assert code == 0, out + err  # and the in-flight one finished in the worker
        assert agent.proc.wait(30) == 0
        log = open(agent.log_path).read()
        assert "draining" in log and "outcome=ok" in log


def test_restart_replaces_a_stale_socket_and_refuses_a_second_agent(setup):
    with setup.agent() as first:
        with pytest.raises(RuntimeError, match="another agent is serving"):
            with running_agent(setup.sock, args=("--plugin", PROBE), env=AGENT_ENV, start_timeout=10):
                pass
        first.kill()
    assert os.path.exists(setup.sock)  # SIGKILL left it behind
    with setup.agent():
        assert run(setup.warm, "probe", "ADD", probe_conf(setup))[0] == 0
        assert setup.records()[-1]["pid"] != 0


def test_fallback_when_the_agent_stops_in_the_middle_of_a_chain_run(setup, lab, reference_dir):
    """Six pods through bridge+host-local+tuning+route-override; the agent is killed after three."""
    conf = ConfList.from_dict({
        "cniVersion": "1.0.0", "name": "agentchain",
        "plugins": [
            {"type": "bridge", "bridge": "cnia0", "isGateway": True,
             "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "dataDir": os.path.join(setup.root, "ipam")}},
            {"type": "tuning", "sysctl": {"net.ipv4.conf.IFNAME.arp_notify": "1"}, "dataDir": os.path.join(setup.root, "tuning")},
            {"type": "route-override", "addroutes": [{"dst": "192.0.2.0/24", "gw": "10.78.0.1"}]},
        ],
    })
    runtime = Runtime([setup.warm, reference_dir], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
    pods = [Attachment(f"chain{i}", lab.netns(f"c{i}"), "eth0") for i in range(6)]
    with setup.agent() as agent:
        for att in pods[:3]:
            result = runtime.add(conf, att)
            assert result["ips"][0]["address"].startswith("10.78.0.")
            runtime.check(conf, att)
        agent.kill()
        for att in pods[3:]:
            runtime.add(conf, att)
            runtime.check(conf, att)
        log = open(agent.log_path).read()
    assert log.count("plugin=bridge command=ADD") == 3 and log.count("plugin=tuning command=CHECK") == 3
    # bridge's host-local delegate would come back to this agent: bridge's worker ran it in place
    # (no launcher exec, no request of its own), and it still allocated from the shared store
    assert "plugin=host-local" not in log
    for att in pods:
        lab.run(att.netns, "ping", "-c1", "-W2", "10.78.0.1")
        runtime.delete(conf, att)
        runtime.delete(conf, att)


# -- security and hostile input ----------------------------------------------------------------------


_NOBODY_CLIENT = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("EACCES"); sys.exit(0)
payload = struct.pack("!QQIHII", 0, 0, 0o22, 5, 0, 0) + b"probe"
try:
    s.sendall(b"CNIA" + bytes((1, 1, 0, 0)) + len(payload).to_bytes(4, "big") + payload)
except OSError:
    pass  # the agent may have answered and closed already
head = s.recv(12)
print("KIND", head[5] if len(head) == 12 else "eof")
"""


def test_non_root_clients_are_refused(open_setup):
    setup = open_setup
    with setup.agent() as agent:
        def as_nobody() -> str:
            # the real interpreter: a venv inside a root-only checkout is not executable for uid 65534
            proc = subprocess.run([os.path.realpath(sys.executable), "-I", "-c", _NOBODY_CLIENT, setup.sock], user=65534, group=65534,
                                  capture_output=True, text=True, timeout=30)
            return proc.stdout.strip() + proc.stderr.strip()

        assert oct(os.stat(os.path.dirname(setup.sock)).st_mode & 0o777) == "0o700"
        assert oct(os.stat(setup.sock).st_mode & 0o777) == "0o600"
        assert as_nobody() == "EACCES"  # the file system keeps them out ...
        os.chmod(setup.root, 0o711)
        os.chmod(os.path.dirname(setup.sock), 0o711)
        os.chmod(setup.sock, 0o666)
        assert as_nobody() == f"KIND {shim.REFUSED}"  # ... and the peer check too, if perms were loosened
        assert 'cnichain_agent_refused_total{reason="not root"} 1' in agent.metrics()
        assert run(setup.warm, "probe", "ADD", probe_conf(setup))[0] == 0


def _raw(path: str, data: bytes, close_write: bool = True) -> tuple[int, bytes]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    s.sendall(data)
    if close_write:
        s.shutdown(socket.SHUT_WR)
    chunks = []
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
    s.close()
    raw = b"".join(chunks)
    return (raw[5] if len(raw) >= 12 else -1), raw[12:]


def _request_frame(payload: bytes) -> bytes:
    return shim.header(shim.REQUEST, len(payload)) + payload


def test_malformed_and_hostile_requests_get_cni_errors_and_the_agent_survives(setup):
    st = os.stat("/proc/self/ns/net")
    good_env = b"CNI_COMMAND=VERSION\0"
    fixed = lambda t, e, i: (st.st_dev.to_bytes(8, "big") + st.st_ino.to_bytes(8, "big") + (0o22).to_bytes(4, "big")  # noqa: E731
                             + len(t).to_bytes(2, "big") + len(e).to_bytes(4, "big") + len(i).to_bytes(4, "big"))
    with setup.agent() as agent:
        cases = {
            "garbage": b"GET / HTTP/1.0\r\n\r\n",
            "huge": shim.header(shim.REQUEST, 1 << 30),
            "short": _request_frame(b"\0\0\0"),
            "lengths": _request_frame(fixed(b"probe", good_env, b"") + b"probe"),
            "bad-type": _request_frame(fixed(b"../x", good_env, b"") + b"../x" + good_env),
            "bad-env": _request_frame(fixed(b"probe", b"=x\0", b"") + b"probe=x\0"),
            "unterminated-env": _request_frame(fixed(b"probe", b"A=1", b"") + b"probeA=1"),
            "wrong-kind": shim.header(shim.RESULT, 0),
        }
        for name, data in cases.items():
            kind, payload = _raw(setup.sock, data)
            assert kind == shim.RESULT, name
            code, out, _ = shim.decode_result(payload)
            err = json.loads(out)
            assert code == 1 and err["code"] == 6 and "invalid request" in err["msg"], (name, err)
        # unknown plugin types and other protocol versions are sent back to the cold path
        kind, _ = _raw(setup.sock, _request_frame(fixed(b"nosuch", good_env, b"") + b"nosuch" + good_env))
        assert kind == shim.REFUSED
        other = b"CNIA" + bytes((9, 1, 0, 0)) + (0).to_bytes(4, "big")
        assert _raw(setup.sock, other)[0] == shim.REFUSED
        # a namespace claim that does not match the peer is refused, not trusted
        lie = (st.st_dev.to_bytes(8, "big") + (st.st_ino + 1).to_bytes(8, "big") + (0o22).to_bytes(4, "big")
               + (5).to_bytes(2, "big") + len(good_env).to_bytes(4, "big") + (0).to_bytes(4, "big"))
        assert _raw(setup.sock, _request_frame(lie + b"probe" + good_env))[0] == shim.REFUSED
        # a client that connects and says nothing, or half a header, is dropped without harm
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(setup.sock)
        silent.sendall(b"CNI")
        assert run(setup.warm, "probe", "ADD", probe_conf(setup))[0] == 0
        silent.close()
        assert agent.proc.poll() is None
        assert "cnichain_agent_rejected_total 8" in agent.metrics()


def test_metrics_are_prometheus_text_per_plugin_and_command(setup):
    with setup.agent() as agent:
        for command in ("ADD", "DEL", "DEL"):
            assert run(setup.warm, "probe", command, probe_conf(setup))[0] == 0
        # the counters move when the worker is reaped, just after the shim got its answer
        wait_for(lambda: 'command="DEL",outcome="ok"} 2' in agent.metrics())
        text = fetch_metrics(agent.metrics_socket)
        assert oct(os.stat(agent.metrics_socket).st_mode & 0o777) == "0o600"
    assert 'cnichain_agent_requests_total{plugin="probe",command="ADD",outcome="ok"} 1' in text
    assert 'cnichain_agent_requests_total{plugin="probe",command="DEL",outcome="ok"} 2' in text
    assert 'cnichain_agent_request_duration_seconds_bucket{plugin="probe",command="DEL",le="+Inf"} 2' in text
    assert 'cnichain_agent_request_duration_seconds_count{plugin="probe",command="ADD"} 1' in text
    assert "# TYPE cnichain_agent_request_duration_seconds histogram" in text


def test_many_short_requests_keep_the_agent_up(setup):
    """Workers exit and shims hang up at nearly the same moment: both events in one loop turn."""
    with setup.agent() as agent:
        for batch in range(5):
            procs = [start(setup.warm, "probe", "DEL", probe_conf(setup), CNI_CONTAINERID=f"s{batch}x{i}") for i in range(8)]
            assert [finish(p)[0] for p in procs] == [0] * 8
        assert agent.proc.poll() is None
        wait_for(lambda: 'command="DEL",outcome="ok"} 40' in agent.metrics())
        assert "internal error" not in open(agent.log_path).read()


# -- the pool of pre-forked workers ---------------------------------------------------------------


def _pool_ready(agent, n: int) -> None:
    """Wait until ``n`` pooled workers are warm and idle (the agent's gauge), not just forked."""
    wait_for(lambda: workers(agent, "idle") >= n, timeout=120)


def test_pooled_workers_serve_many_requests_each_in_its_callers_namespace(setup, lab):
    other = lab.netns("other")
    with setup.agent("--pool", "2") as agent:
        _pool_ready(agent, 2)
        for i in range(6):
            node = lab.node if i % 2 == 0 else other
            code, out, err = run(setup.warm, "probe", "ADD", probe_conf(setup), node, CNI_CONTAINERID=f"p{i}")
            assert code == 0, out + err
            settled(agent)
        wait_for(lambda: served_warm(agent, "probe", "ADD") == 6)
        text = agent.metrics()
    recs = [r for r in setup.records() if r["phase"] == "start"]
    assert len({r["pid"] for r in recs}) <= 2  # the warm workers served them all ...
    assert [r["netns"] for r in recs] == [ns_inode(lab.node if i % 2 == 0 else other) for i in range(6)]
    assert all(r["cwd"] == "/" for r in recs)  # ... each in its own caller's namespace
    assert 'cnichain_agent_workers_started_total{how="pooled"} 6' in text


def test_pooled_workers_do_not_keep_a_killed_agents_socket_alive(setup):
    """Idle workers drop the listener at once: a dead agent's socket refuses, the shim goes cold."""
    with setup.agent("--pool", "3") as agent:
        _pool_ready(agent, 3)
        agent.kill()
        # No process holds the listener: a connect is refused outright.  A worker still holding it
        # would let the connect succeed into a queue nobody reads, and the shim would wait out its
        # ACK timeout before running cold, with the same answer in the end.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with pytest.raises(ConnectionRefusedError):
                probe.connect(setup.sock)
        finally:
            probe.close()
        proc = start(setup.warm, "probe", "ADD", probe_conf(setup))
        assert finish(proc)[0] == 0
        assert setup.records()[-1]["pid"] == proc.pid  # ran cold


def test_without_a_pool_and_with_a_request_too_big_for_one_workers_are_forked(setup):
    big = probe_conf(setup, padding="x" * (100 << 10))  # more than one pool message carries
    for args in (("--pool", "0"), ()):
        with setup.agent(*args) as agent:
            code, out, err = run(setup.warm, "probe", "ADD", big)
            assert code == 0, out + err
            assert json.loads(out) == {"cniVersion": "1.0.0"}
            wait_for(lambda: 'how="forked"} 1' in agent.metrics())
            assert 'how="pooled"' not in agent.metrics()


def test_version_is_answered_by_the_agent_itself_like_the_cold_path(setup):
    """VERSION needs no worker and no namespace: the agent answers it in place of the ACK."""
    plugins = list(launchers.available_plugins())
    with setup.agent() as agent:
        for plugin in plugins:
            assert run(setup.warm, plugin, "VERSION", b"") == run(setup.cold, plugin, "VERSION", b"")
        wait_for(lambda: agent.metrics().count('command="VERSION",outcome="ok"} 1') == len(plugins))
        lines = [line for line in open(agent.log_path) if "command=VERSION" in line]
    assert len(lines) == len(plugins) and all("worker=none" in line for line in lines)


def test_native_shim_gets_the_answer_of_a_worker_whose_agent_was_killed_then_runs_cold(setup):
    """The worker, not the agent, owns the reply: the native shim waits for it past the agent's death."""
    if not setup.native_probe:
        required.native_shim()
    native_dir = os.path.dirname(setup.native_probe)
    with setup.agent() as agent:
        proc = start(native_dir, "probe", "ADD", probe_conf(setup, sleep=1.0))
        wait_for(lambda: any(r["phase"] == "start" for r in setup.records()))
        agent.kill()
        code, out, err = finish(proc)
        assert code == 0, out + err
        assert json.loads(out) == {"cniVersion": "1.0.0"}
        assert [r["phase"] for r in setup.records()] == ["start", "end"]  # ran once, in the worker
        assert setup.records()[0]["pid"] != proc.pid
        proc = start(native_dir, "probe", "ADD", probe_conf(setup))  # socket file left, nobody there
        assert finish(proc)[0] == 0
        assert setup.records()[-1]["pid"] == proc.pid  # the cold launcher, exec'd in the shim's place
