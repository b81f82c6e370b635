"""The agent protocol, request validation, metrics text and the shim's fallback decisions (no root).

The shim is driven against a scripted in-process server on a unix socket in a tmp dir, one
scenario per agent behaviour: absent, refusing, silent, dying before or after the go-ahead,
answering.  The rule under test: the shim prints the agent's answer, or returns None with stdin
untouched or replayable, so the cold path runs instead.
"""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from typing import Optional

import pytest

from cnichain import agent as agent_mod
from cnichain.node import launchers
from cnichain.common import shim
from cnichain.common.errors import CniError
from cnichain.common.skel import Plugin, error_json

KNOWN = {"host-local": object(), "probe": object()}


def _payload(ptype: bytes = b"probe", env: bytes = b"CNI_COMMAND=ADD\0", stdin: bytes = b"{}", ns=(1, 2), umask=0o22):
    return (struct.pack("!QQIHII", ns[0], ns[1], umask, len(ptype), len(env), len(stdin)) + ptype + env + stdin)


# -- framing ------------------------------------------------------------------------------------


def test_header_round_trip_and_rejects_foreign_bytes():
    h = shim.header(shim.ACK, 1234)
    assert len(h) == shim.HEADER_SIZE
    assert shim.parse_header(h) == (shim.VERSION, shim.ACK, 1234)
    with pytest.raises(ValueError):
        shim.parse_header(b"HTTP/1.1 200")
    with pytest.raises(ValueError):
        shim.parse_header(b"CNIA")


def test_request_encoding_is_what_the_agent_decodes():
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "abc", "EMPTY": "", "WITH_EQ": "a=b"}
    frame = shim.encode_request("host-local", env, b'{"name":"n"}', (7, 99), 0o027)
    version, kind, length = shim.parse_header(frame[: shim.HEADER_SIZE])
    assert (version, kind, length) == (shim.VERSION, shim.REQUEST, len(frame) - shim.HEADER_SIZE)
    req = agent_mod.decode_request(frame[shim.HEADER_SIZE :], KNOWN)
    assert req.plugin_type == "host-local" and req.env == env and req.stdin == b'{"name":"n"}'
    assert req.netns_id == (7, 99) and req.umask == 0o027
    assert req.command == "ADD" and req.container_id == "abc"


def test_result_round_trip_keeps_bytes_exactly():
    out, err = b'{\n    "code": 7\n}\n', b"\xff raw"
    frame = shim.encode_result(1, out, err)
    _, kind, length = shim.parse_header(frame[:12])
    assert kind == shim.RESULT and length == len(frame) - 12
    assert shim.decode_result(frame[12:]) == (1, out, err)
    with pytest.raises(ValueError):
        shim.decode_result(frame[12:-1])


@pytest.mark.parametrize(
    "payload,match",
    [
        (b"\0" * 5, "too short"),
        (_payload()[:-1], "do not add up"),
        (_payload(ptype=b""), "missing or too long"),
        (_payload(ptype=b"x" * 65), "missing or too long"),
        (_payload(ptype=b"Bad/Type"), "invalid plugin type"),
        (_payload(ptype=b"\xff\xfe"), "not ASCII"),
        (_payload(umask=0o1000), "invalid umask"),
        (_payload(env=b"A=1"), "not terminated"),
        (_payload(env=b"=1\0"), "invalid environment record"),
        (_payload(env=b"NOEQUALS\0"), "invalid environment record"),
        (_payload(env=b"1X=1\0"), "invalid environment record"),
        (_payload(env=b"A=1\0" * (agent_mod.MAX_ENV_ENTRIES + 1)), "too many"),
    ],
)
def test_malformed_requests_are_rejected(payload, match):
    with pytest.raises(agent_mod.RequestError, match=match):
        agent_mod.decode_request(payload, KNOWN)


def test_unknown_plugin_type_is_a_refusal_not_an_error():
    with pytest.raises(agent_mod.Refusal, match="not served"):
        agent_mod.decode_request(_payload(ptype=b"bridge"), KNOWN)


def test_container_id_is_never_logged_raw():
    req = agent_mod.decode_request(_payload(env=b"CNI_CONTAINERID=../../x y\0"), KNOWN)
    assert req.container_id == "<invalid>"


def test_error_result_is_the_skeletons_error_json():
    frame = agent_mod.error_result("boom", "why")
    code, out, err = shim.decode_result(frame[12:])
    assert code == 1 and err == b""
    assert out.decode() == error_json(CniError(999, "boom", "why")) + "\n"


# -- metrics ------------------------------------------------------------------------------------


def test_metrics_render_cumulative_histograms_and_counters():
    m = agent_mod.Metrics()
    m.done("bridge", "ADD", "ok", 0.004)
    m.done("bridge", "ADD", "ok", 0.03)
    m.done("bridge", "ADD", "error", 120.0)
    m.refuse("not root")
    text = m.render()
    assert 'cnichain_agent_requests_total{plugin="bridge",command="ADD",outcome="ok"} 2' in text
    assert 'cnichain_agent_requests_total{plugin="bridge",command="ADD",outcome="error"} 1' in text
    assert 'cnichain_agent_request_duration_seconds_bucket{plugin="bridge",command="ADD",le="0.005"} 1' in text
    assert 'cnichain_agent_request_duration_seconds_bucket{plugin="bridge",command="ADD",le="0.05"} 2' in text
    assert 'cnichain_agent_request_duration_seconds_bucket{plugin="bridge",command="ADD",le="60"} 2' in text
    assert 'cnichain_agent_request_duration_seconds_bucket{plugin="bridge",command="ADD",le="+Inf"} 3' in text
    assert 'cnichain_agent_request_duration_seconds_count{plugin="bridge",command="ADD"} 3' in text
    assert 'cnichain_agent_refused_total{reason="not root"} 1' in text
    for line in text.splitlines():  # every sample line is "name{labels} value" or "name value"
        if not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_metric_labels_are_escaped():
    m = agent_mod.Metrics()
    m.done('we"ird\\', "ADD", "ok", 0.1)
    assert 'plugin="we\\"ird\\\\"' in m.render()


# -- configuration --------------------------------------------------------------------------------


def test_parse_args_defaults_and_plugins():
    cfg = agent_mod.parse_args(["--socket", "/tmp/x.sock", "--plugin", "probe=pkg.mod", "--request-timeout", "5"])
    assert cfg.socket_path == "/tmp/x.sock" and cfg.extra_plugins == {"probe": "pkg.mod"}
    assert cfg.request_timeout == 5.0 and cfg.metrics_socket is None and cfg.metrics_port == 0
    with pytest.raises(SystemExit):
        agent_mod.parse_args(["--plugin", "nomodule"])


def test_agent_module_imports_no_typer():
    code = "import sys, cnichain.agent; print('typer' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("value,expected", [(None, "/baked"), ("/other", "/other"), ("off", ""), ("", ""), ("none", "")])
def test_socket_path_env_override(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(shim.ENV_SOCKET, raising=False)
    else:
        monkeypatch.setenv(shim.ENV_SOCKET, value)
    assert shim.socket_path("/baked") == expected


def test_launcher_tries_the_agent_then_runs_cold():
    src = launchers.launcher_source("host_local", "/usr/bin/python3", ["/x"], agent_socket="/run/a.sock")
    assert "forward('host-local', '/run/a.sock')" in src
    assert src.index("forward(") < src.index("from cnichain.plugins.host_local.__main__ import main")
    cold = launchers.launcher_source("host_local", "/usr/bin/python3", ["/x"], agent_socket="")
    assert "shim" not in cold and "from cnichain.plugins.host_local.__main__ import main" in cold


def test_shim_imports_only_the_bare_minimum():
    code = ("import sys; before = set(sys.modules); import cnichain.common.shim; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith('cnichain')))")
    out = subprocess.run([sys.executable, "-IS", "-c", f"import sys; sys.path[0:0] = {launchers.import_roots()!r}; " + code],
                         capture_output=True, text=True, check=True).stdout
    # Not even ``os`` (~0.6 ms): the built-in ``posix`` is all the warm path needs.
    assert eval(out) == []


# -- the shim against a scripted agent ---------------------------------------------------------------


_STARTED: list["FakeAgent"] = []


class FakeAgent:
    """Accepts one connection and plays ``script`` (a function of the connected socket).

    The script runs in a thread, so its own checks cannot fail the test directly: its exception is
    kept and raised by :meth:`done`, which the ``_fakes_report`` fixture calls after every test.
    """

    def __init__(self, path: str, script) -> None:
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.srv.settimeout(30)
        self.seen: list[bytes] = []
        self.kinds: list[int] = []  # message kinds read, in order: an after-GO case proves GO came
        self.error: Optional[BaseException] = None
        self.finished = False
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()
        _STARTED.append(self)

    def _serve(self, script) -> None:
        try:
            conn, _ = self.srv.accept()
        except OSError as exc:
            self.error = exc
            self.srv.close()
            return
        conn.settimeout(5)
        try:
            script(self, conn)
            self.finished = True
        except BaseException as exc:  # noqa: B036 - raised in the test by done()
            self.error = exc
        finally:
            conn.close()
            self.srv.close()

    def done(self) -> list[int]:
        """Wait for the script to end; raise what it raised; the kinds it read."""
        self.thread.join(30)
        assert not self.thread.is_alive(), "the fake agent's script did not end"
        if self.error is not None:
            error, self.error = self.error, None
            raise AssertionError(f"the fake agent's script failed: {error!r}") from error
        assert self.finished
        return self.kinds

    def read_message(self, conn) -> tuple[int, bytes]:
        head = b""
        while len(head) < 12:
            chunk = conn.recv(12 - len(head))
            if not chunk:
                raise EOFError
            head += chunk
        _, kind, length = shim.parse_header(head)
        self.kinds.append(kind)
        body = b""
        while len(body) < length:
            chunk = conn.recv(length - len(body))
            if not chunk:
                raise EOFError
            body += chunk
        self.seen.append(body)
        return kind, body


@pytest.fixture(autouse=True)
def _fakes_report():
    """Every fake agent a test started is joined after it, and its script's failure fails it."""
    yield
    started, _STARTED[:] = list(_STARTED), []
    for fake in started:
        fake.done()


def _ack(conn, ms: int = 5000) -> None:
    conn.sendall(shim.header(shim.ACK, 4) + ms.to_bytes(4, "big"))


@pytest.fixture
def sock_path(tmp_path):
    return str(tmp_path / "a.sock")


def _exchange(path: str, stdin: bytes = b'{"name":"n"}'):
    calls = []

    def read():
        calls.append(1)
        return stdin

    answer, got = shim.exchange(path, "probe", {"CNI_COMMAND": "ADD"}, read)
    return answer, got, len(calls)


def test_no_socket_means_cold_without_touching_stdin(sock_path):
    assert _exchange(sock_path) == (None, None, 0)


def test_a_refusal_means_cold_with_stdin_kept(sock_path):
    def script(fake, conn):
        fake.read_message(conn)
        conn.sendall(shim.header(shim.REFUSED, 4) + b"busy")

    FakeAgent(sock_path, script)
    assert _exchange(sock_path) == (None, b'{"name":"n"}', 1)


def test_a_full_exchange_returns_the_agents_answer(sock_path):
    def script(fake, conn):
        kind, body = fake.read_message(conn)
        assert kind == shim.REQUEST
        _ack(conn)
        assert fake.read_message(conn)[0] == shim.GO
        conn.sendall(shim.encode_result(0, b"out\n", b"err"))

    fake = FakeAgent(sock_path, script)
    answer, stdin, calls = _exchange(sock_path)
    assert answer == (0, b"out\n", b"err") and calls == 1
    req = agent_mod.decode_request(fake.seen[0], KNOWN)
    assert req.env == {"CNI_COMMAND": "ADD"} and req.stdin == b'{"name":"n"}'
    assert req.netns_id[1] == os.stat("/proc/self/ns/net").st_ino


def test_an_immediate_error_result_is_printed_not_retried(sock_path):
    def script(fake, conn):
        fake.read_message(conn)
        conn.sendall(agent_mod.error_result("invalid request"))

    FakeAgent(sock_path, script)
    answer, _, _ = _exchange(sock_path)
    assert answer[0] == 1 and json.loads(answer[1])["msg"] == "invalid request"
    assert json.loads(answer[1])["code"] == 999


def test_silence_before_ack_means_cold(sock_path, monkeypatch):
    monkeypatch.setattr(shim, "ACK_TIMEOUT", 0.2)
    done = threading.Event()

    def script(fake, conn):
        fake.read_message(conn)
        done.wait(5)

    FakeAgent(sock_path, script)
    try:
        assert _exchange(sock_path)[0] is None
    finally:
        done.set()


def test_connection_lost_after_go_means_cold(sock_path):
    def script(fake, conn):
        fake.read_message(conn)
        _ack(conn)
        fake.read_message(conn)
        conn.sendall(shim.encode_result(0, b"partial", b"")[:15])  # dies mid-answer

    fake = FakeAgent(sock_path, script)
    assert _exchange(sock_path)[:2] == (None, b'{"name":"n"}')
    assert fake.done() == [shim.REQUEST, shim.GO]  # cold after GO, not a fallback before it


def test_unknown_message_kind_means_cold(sock_path):
    def script(fake, conn):
        fake.read_message(conn)
        conn.sendall(shim.header(42, 0))

    FakeAgent(sock_path, script)
    assert _exchange(sock_path)[0] is None


def test_forward_replays_stdin_for_the_cold_path(sock_path, monkeypatch):
    def script(fake, conn):
        fake.read_message(conn)
        conn.sendall(shim.header(shim.REFUSED, 0))

    FakeAgent(sock_path, script)
    monkeypatch.setenv("CNI_COMMAND", "ADD")
    monkeypatch.delenv(shim.ENV_SOCKET, raising=False)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"cfg":1}')))
    assert shim.forward("probe", sock_path) is None
    assert sys.stdin.buffer.read() == b'{"cfg":1}'


def test_launcher_without_agent_behaves_exactly_like_before(tmp_path):
    """The installed launcher, agent absent: the same bytes as the plain cold launcher."""
    warm = tmp_path / "warm"
    cold = tmp_path / "cold"
    launchers.install(str(warm), plugins=["host-local"], agent_socket=str(tmp_path / "absent.sock"))
    launchers.install(str(cold), plugins=["host-local"], agent_socket="")
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    outs = []
    for folder in (warm, cold):
        proc = subprocess.run([str(folder / "host-local")], input=b'{"cniVersion":"1.0.0","name":"n","ipam":{}}',
                              env=env, capture_output=True, timeout=60)
        outs.append((proc.returncode, proc.stdout, proc.stderr))
    assert outs[0] == outs[1] and outs[0][0] == 1


def test_launcher_target_recognises_only_our_launchers(tmp_path):
    launchers.install(str(tmp_path / "a"), plugins=["host-local"], agent_socket="/run/x/agent.sock")
    launchers.install(str(tmp_path / "b"), plugins=["host-local"], agent_socket="")
    assert agent_mod.launcher_target(str(tmp_path / "a" / "host-local")) == ("host-local", "/run/x/agent.sock")
    assert agent_mod.launcher_target(str(tmp_path / "b" / "host-local")) is None  # never talks to an agent
    other = tmp_path / "fake"
    other.write_text("#!/bin/sh\ncode = forward('host-local', '/run/x/agent.sock')\n")
    assert agent_mod.launcher_target(str(other)) is None  # not written by our installer
    assert agent_mod.launcher_target(str(tmp_path / "missing")) is None


def test_delegate_runner_keeps_exec_semantics_for_other_sockets(tmp_path):
    launchers.install(str(tmp_path), plugins=["host-local"], agent_socket="/run/other/agent.sock")
    runner = agent_mod.DelegateRunner({"host-local": object()}, "/run/x/agent.sock")
    binary = str(tmp_path / "host-local")
    assert runner(binary, {"CNI_COMMAND": "ADD"}, b"{}") is None  # would reach another agent: exec it
    assert runner(binary, {"CNI_COMMAND": "ADD", shim.ENV_SOCKET: "off"}, b"{}") is None


def test_delegate_runner_runs_a_delegate_of_this_agent_in_place(tmp_path, sock_path):
    """A delegate that would come back to this agent runs here, for every command: the agent is
    never asked (a worker of its own cost a fork per delegate in a storm)."""
    launchers.install(str(tmp_path / "bin"), plugins=["host-local"], agent_socket=sock_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(1)
    srv.setblocking(False)
    plugin = Plugin(name="host-local", add=lambda req: None, delete=lambda req: None, versions=("1.0.0",))
    runner = agent_mod.DelegateRunner({"host-local": plugin}, sock_path)
    try:
        code, out, err = runner(str(tmp_path / "bin" / "host-local"), {"CNI_COMMAND": "VERSION"}, b"")
        assert code == 0 and json.loads(out)["supportedVersions"] == ["1.0.0"] and err == b""
        code, out, _ = runner(str(tmp_path / "bin" / "host-local"), {"CNI_COMMAND": "ADD"}, b"{")
        assert code != 0 and "msg" in json.loads(out)  # the skeleton's own refusal, as an exec prints it
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()


def test_environment_goes_out_as_the_bytes_the_process_has(monkeypatch):
    monkeypatch.setenv("CNI_ARGS", "K=v\udcff")  # not UTF-8: carried as the original byte
    env = shim._environ()
    assert env[b"CNI_ARGS"] == b"K=v\xff"
    frame = shim.encode_request("probe", {b"CNI_ARGS": env[b"CNI_ARGS"]}, b"", (1, 2), 0o22)
    assert agent_mod.decode_request(frame[shim.HEADER_SIZE:], KNOWN).env == {"CNI_ARGS": "K=v\udcff"}


def test_pool_size_option():
    assert agent_mod.parse_args([]).pool_size == 2
    assert agent_mod.parse_args(["--pool", "0"]).pool_size == 0
    assert agent_mod.parse_args(["--pool", "-3"]).pool_size == 0


def test_metrics_count_pooled_and_forked_workers():
    m = agent_mod.Metrics()
    m.worker_started("pooled")
    m.worker_started("pooled")
    m.worker_started("forked")
    text = m.render()
    assert 'cnichain_agent_workers_started_total{how="pooled"} 2' in text
    assert 'cnichain_agent_workers_started_total{how="forked"} 1' in text


def test_a_worker_takes_exactly_the_requests_environment_in_order():
    """What os.environ and an exec'd child (a delegate) see afterwards: the request's variables only."""
    code = ("import os, subprocess; from cnichain.agent import worker; "
            "worker.reset_process_state({'CNI_COMMAND': 'ADD', 'B': '2', 'A': '1'}); "
            "print(list(os.environ.items())); "
            "print(subprocess.run(['env', '-0'], capture_output=True).stdout.split(b'\\0')[:-1])")
    env = {"AGENT_ONLY": "x", "A": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()
    assert eval(first) == [("CNI_COMMAND", "ADD"), ("B", "2"), ("A", "1")]
    assert eval(second) == [b"CNI_COMMAND=ADD", b"B=2", b"A=1"]


@pytest.mark.skipif(os.geteuid() != 0, reason="setns needs CAP_SYS_ADMIN")
def test_rehearsing_namespace_entry_stays_where_it_is_and_resolves_libc_once():
    from cnichain.agent import peer

    before = (peer.ns_id("/proc/self/ns/net"), peer.ns_id("/proc/self/ns/mnt"))
    peer.rehearse()
    assert (peer.ns_id("/proc/self/ns/net"), peer.ns_id("/proc/self/ns/mnt")) == before
    assert hasattr(os, "setns") or peer._libc is not None  # a worker forked now inherits it
