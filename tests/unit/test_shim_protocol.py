"""Both shims -- the Python ``forward`` and the native binary -- against one scripted agent.

Every scenario runs each shim as a real process, exactly as a runtime execs a plugin, against a
fake agent on a unix socket in a short private dir.  The cold path both fall back to is the same
small Python program, which prints the stdin and CNI environment it got and exits 3, so "the shim
ran cold, with the bytes it had already read" is observed rather than assumed.  The rule under
test, for both: the agent's answer relayed exactly (bytes, stderr, exit status), or else the cold
result -- never a crash, never a partial answer.  Nothing here reaches the kernel's network state;
the one test that needs root (a non-root caller against a real agent) is skipped without it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Callable, Iterator, Optional

import pytest

from cnichain.node import native_shim
from cnichain.agent import decode_request, error_result
from cnichain.common import shim
from tests import required

PYTHON = os.path.realpath(sys.executable)  # the real interpreter: uid 65534 may not enter a venv
KNOWN = {"probe": object()}
COLD_CODE = 3
# The cold path of both shims: what a plugin run in-process would print, reduced to what matters.
COLD_BODY = """
import os, sys
data = sys.stdin.buffer.read()
env = sorted((k, v) for k, v in os.environb.items() if k.startswith(b"CNI") or k == b"MARK")
sys.stdout.buffer.write(b"COLD " + repr((data, env)).encode() + b"\\n")
sys.stdout.flush()
sys.stderr.buffer.write(b"cold stderr\\n")
sys.exit(%d)
""" % COLD_CODE
BASE_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "CNI_COMMAND": "ADD",
            "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
STDIN = b'{"cniVersion":"1.0.0","name":"n","type":"probe"}'


def cold_output(stdin: bytes, env: dict) -> tuple[int, bytes, bytes]:
    """What the cold path prints for ``stdin`` and ``env`` (run once, directly, for comparison)."""
    proc = subprocess.run([PYTHON, "-IS", "-c", COLD_BODY], input=stdin, env=env, capture_output=True, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


class Shim:
    """One shim kind installed in ``folder``, configured for plugin type "probe" and ``sock``."""

    def __init__(self, kind: str, folder: str, sock: str) -> None:
        self.kind = kind
        self.exe = os.path.join(folder, f"probe-{kind}")
        cold = os.path.join(folder, "cold-launcher")
        if not os.path.exists(cold):
            _write(cold, f"#!{PYTHON} -IS\n{COLD_BODY}".encode())
        if kind == "native":
            binary = required.native_shim()
            with open(binary, "rb") as fh:
                data = native_shim.configure(fh.read(), native_shim.ShimConfig("probe", sock, cold))
            _write(self.exe, data)
        else:
            # common/shim.py copied beside the launcher: importable by any uid, like the real one.
            shutil.copy(shim.__file__, os.path.join(folder, "cnichain_shim_copy.py"))
            _write(self.exe, (
                f"#!{PYTHON} -IS\nimport sys\nsys.path[0:0] = [{folder!r}]\n"
                "from cnichain_shim_copy import forward\n"
                f"code = forward('probe', {sock!r})\n"
                "if code is not None:\n    import posix\n    posix._exit(code)\n" + COLD_BODY).encode())

    def run(self, stdin: bytes = STDIN, user: Optional[int] = None, **env: Optional[str]) -> tuple[int, bytes, bytes]:
        full = {**BASE_ENV, **env}
        full = {k: v for k, v in full.items() if v is not None}
        extra = {"user": user, "group": user} if user is not None else {}
        proc = subprocess.run([self.exe], input=stdin, env=full, capture_output=True, timeout=60, **extra)
        return proc.returncode, proc.stdout, proc.stderr


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o755)


class FakeAgent:
    """Serves up to ``connections`` connections on ``path``, each played by ``script``."""

    def __init__(self, path: str, script: Callable[["FakeAgent", socket.socket], None], connections: int = 1) -> None:
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(8)
        self.srv.settimeout(0.1)
        self.requests: list[bytes] = []
        self.accepted = 0
        self.release = threading.Event()  # ends a script that plays dead
        self.errors: list[BaseException] = []  # raised by close(): a script's failure fails the test
        self.kinds: list[int] = []  # every message kind read, in order (GO arriving is proven here)
        self.finished = 0  # scripts that ran to their end
        self.thread = threading.Thread(target=self._serve, args=(script, connections), daemon=True)
        self.thread.start()

    def _serve(self, script, connections: int) -> None:
        while self.accepted < connections and not self.release.is_set():
            try:
                conn, _ = self.srv.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.settimeout(20)
            try:
                script(self, conn)
                self.finished += 1
            except BaseException as exc:  # noqa: B036 - handed to the test by close()
                self.errors.append(exc)
            finally:
                conn.close()

    def read_message(self, conn: socket.socket) -> tuple[int, bytes]:
        head = _recv(conn, shim.HEADER_SIZE)
        version, kind, length = shim.parse_header(head)
        assert version == shim.VERSION, f"the shim speaks protocol {version}, not {shim.VERSION}"
        self.kinds.append(kind)
        body = _recv(conn, length)
        if kind == shim.REQUEST:
            self.requests.append(body)
        return kind, body

    def close(self) -> None:
        """Stop serving; the first failure of a script (an assertion of its own, the shim hanging
        up early) is raised here, so a fake's check can fail the test that started it."""
        self.release.set()
        self.thread.join(30)
        self.srv.close()
        assert not self.thread.is_alive(), "the fake agent's script did not end"
        if self.errors:
            errors, self.errors = self.errors, []
            raise AssertionError(f"the fake agent's script failed: {errors[0]!r}") from errors[0]


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def ack(conn: socket.socket, ms: int = 5000) -> None:
    conn.sendall(shim.header(shim.ACK, 4) + ms.to_bytes(4, "big"))


def answering(code: int, out: bytes, err: bytes):
    """The normal exchange: REQUEST, ACK, GO, RESULT."""
    def script(fake: FakeAgent, conn: socket.socket) -> None:
        assert fake.read_message(conn)[0] == shim.REQUEST
        ack(conn)
        assert fake.read_message(conn)[0] == shim.GO
        conn.sendall(shim.encode_result(code, out, err))
    return script


def after_request(reply: bytes, go: bool = False, wait: bool = False):
    """Read the REQUEST (and, with ``go``, ACK and read GO), send ``reply`` raw, then close (or
    with ``wait`` stay silent until the test ends)."""
    def script(fake: FakeAgent, conn: socket.socket) -> None:
        fake.read_message(conn)
        if go:
            ack(conn)
            assert fake.read_message(conn)[0] == shim.GO
        if reply:
            conn.sendall(reply)
        if wait:
            fake.release.wait(20)
    return script


@pytest.fixture
def folder() -> Iterator[str]:
    """A short private dir (unix socket paths are limited to 107 bytes), world-traversable."""
    path = tempfile.mkdtemp(prefix="cnis-")
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["python", "native"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sock(folder: str) -> str:
    return os.path.join(folder, "a.sock")


@pytest.fixture
def the_shim(kind: str, folder: str, sock: str) -> Shim:
    return Shim(kind, folder, sock)


@pytest.fixture
def agent(sock: str) -> Iterator[Callable[..., FakeAgent]]:
    started: list[FakeAgent] = []

    def start(script, connections: int = 1, path: str = sock) -> FakeAgent:
        fake = FakeAgent(path, script, connections)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.close()


def exchanged(fake: FakeAgent, *kinds: int) -> None:
    """The shim's side of the exchange was exactly ``kinds`` and the script ran to its end (so an
    after-GO case proves GO arrived instead of passing through the cold fallback before it)."""
    fake.close()
    assert fake.kinds == list(kinds) and fake.finished == 1


def expect_cold(got: tuple[int, bytes, bytes], stdin: bytes = STDIN, **env: Optional[str]) -> None:
    full = {k: v for k, v in {**BASE_ENV, **env}.items() if v is not None}
    assert got == cold_output(stdin, full)
    assert got[0] == COLD_CODE


# -- the agent's answer, relayed exactly ----------------------------------------------------------

BIG = os.urandom(3 << 20)


@pytest.mark.parametrize("code,out,err", [
    (0, b'{\n    "cniVersion": "1.0.0"\n}\n', b""),
    (1, b'{\n    "code": 7,\n    "msg": "bad"\n}\n', b"a warning\n"),
    (7, b"\x00\xff\xfe binary \x00", b"\xff"),
    (-1, b"", b"negative"),
    (0, BIG, BIG[: 1 << 20]),
])
def test_the_answer_is_relayed_byte_for_byte(the_shim, agent, code, out, err):
    fake = agent(answering(code, out, err))
    assert the_shim.run(MARK="1") == (code & 0xFF, out, err)
    req = decode_request(fake.requests[0], KNOWN)
    assert req.plugin_type == "probe" and req.stdin == STDIN
    assert req.env["MARK"] == "1" and req.env["CNI_COMMAND"] == "ADD"
    assert req.netns_id == (os.stat("/proc/self/ns/net").st_dev, os.stat("/proc/self/ns/net").st_ino)


def test_both_shims_send_the_same_request_bytes(folder, sock, agent):
    """Same env (non-UTF-8 bytes included), stdin and umask: the REQUEST payloads are identical."""
    payloads = []
    for kind in ("python", "native"):
        fake = agent(answering(0, b"{}", b""), path=sock)
        env = {**BASE_ENV, "CNI_ARGS": b"K=v\xff", "EMPTY": "", "WITH_EQ": "a=b"}
        proc = subprocess.run([Shim(kind, folder, sock).exe], input=STDIN + b"\xff", env=env, capture_output=True,
                              timeout=60, umask=0o027)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        fake.close()
        os.unlink(sock)
        payloads.append(fake.requests[0])
    assert payloads[0] == payloads[1]
    req = decode_request(payloads[1], KNOWN)
    assert req.umask == 0o027 and req.stdin == STDIN + b"\xff" and req.env["CNI_ARGS"] == "K=v\udcff"


def test_version_sends_no_stdin(the_shim, agent):
    fake = agent(answering(0, b'{"cniVersion":"1.1.0"}\n', b""))
    assert the_shim.run(b"ignored", CNI_COMMAND="VERSION")[0] == 0
    assert decode_request(fake.requests[0], KNOWN).stdin == b""


def test_a_rejection_before_ack_is_printed_not_retried(the_shim, agent):
    agent(after_request(error_result("cnichain agent: invalid request", "why", 6)))
    code, out, err = the_shim.run()
    assert code == 1 and err == b"" and json.loads(out)["code"] == 6


# -- running cold instead -------------------------------------------------------------------------


def test_no_socket_runs_cold_with_stdin_untouched(the_shim):
    expect_cold(the_shim.run(MARK="x"), MARK="x")


@pytest.mark.parametrize("value", ["off", "OFF", "none", "0", ""])
def test_agent_socket_env_disables(the_shim, agent, value):
    fake = agent(answering(0, b"warm", b""))
    expect_cold(the_shim.run(CNICHAIN_AGENT_SOCKET=value), CNICHAIN_AGENT_SOCKET=value)
    assert fake.accepted == 0


def test_agent_socket_env_redirects(the_shim, agent, folder):
    other = os.path.join(folder, "other.sock")
    agent(answering(0, b"from other", b""), path=other)
    assert the_shim.run(CNICHAIN_AGENT_SOCKET=other) == (0, b"from other", b"")


def test_a_refusal_runs_cold_with_the_stdin_already_read(the_shim, agent):
    big = STDIN + b" " * (1 << 20)  # more than a pipe holds: the replay must not block
    fake = agent(after_request(shim.header(shim.REFUSED, 4) + b"busy"))
    expect_cold(the_shim.run(big), big)
    exchanged(fake, shim.REQUEST)


def test_agent_not_accepting_with_a_full_backlog_runs_cold(the_shim, sock):
    """A wedged agent that accepts nothing: the connect fails at once (or times out), never hangs."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock)
    srv.listen(0)
    fillers: list[socket.socket] = []
    try:
        for _ in range(64):  # until the kernel refuses more pending connections
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            fillers.append(c)
            try:
                c.connect(sock)
            except BlockingIOError:
                break
        expect_cold(the_shim.run())
    finally:
        for c in fillers:
            c.close()
        srv.close()


def test_agent_closing_at_accept_runs_cold(the_shim, agent):
    agent(lambda fake, conn: None)
    expect_cold(the_shim.run())


def test_agent_closing_before_ack_runs_cold(the_shim, agent):
    fake = agent(after_request(b""))
    expect_cold(the_shim.run())
    exchanged(fake, shim.REQUEST)


def test_agent_silent_before_ack_runs_cold_after_the_timeout(the_shim, agent):
    fake = agent(after_request(b"", wait=True))
    expect_cold(the_shim.run())  # after shim.ACK_TIMEOUT, bounded by the run's own timeout
    exchanged(fake, shim.REQUEST)


def test_worker_gone_after_go_runs_cold(the_shim, agent):
    fake = agent(after_request(b"", go=True))
    expect_cold(the_shim.run())
    exchanged(fake, shim.REQUEST, shim.GO)


def test_answer_cut_short_after_go_runs_cold_and_prints_none_of_it(the_shim, agent):
    fake = agent(after_request(shim.encode_result(0, b'{"cniVersion": "1.0.0"}', b"")[:20], go=True))
    expect_cold(the_shim.run())
    exchanged(fake, shim.REQUEST, shim.GO)


GARBAGE = {
    "bad magic": b"HTTP/1.1 200 OK\r\n\r\n",
    "wrong version": b"CNIA" + bytes((2, shim.ACK, 0, 0)) + (4).to_bytes(4, "big") + b"\0\0\x13\x88",
    "oversize": shim.header(shim.RESULT, shim.MAX_RESULT + 1),
    "truncated": shim.header(shim.RESULT, 100) + b"\0" * 10,
    "short ack": shim.header(shim.ACK, 2) + b"\0\1",
    "unknown kind": shim.header(42, 0),
    "lengths": shim.header(shim.RESULT, 13) + (0).to_bytes(4, "big") + (5).to_bytes(4, "big") + bytes(5),
}


@pytest.mark.parametrize("name", sorted(GARBAGE))
@pytest.mark.parametrize("after_go", [False, True], ids=["before-ack", "after-go"])
def test_malformed_frames_run_cold(the_shim, agent, name, after_go):
    fake = agent(after_request(GARBAGE[name], go=after_go))
    expect_cold(the_shim.run())
    exchanged(fake, *([shim.REQUEST, shim.GO] if after_go else [shim.REQUEST]))


def test_a_refusal_after_go_runs_cold(the_shim, agent):
    fake = agent(after_request(shim.header(shim.REFUSED, 0), go=True))
    expect_cold(the_shim.run())
    exchanged(fake, shim.REQUEST, shim.GO)


# -- the native shim's own checks -------------------------------------------------------------------


def test_native_shim_refuses_an_unsafe_or_missing_cold_launcher(folder, sock):
    the_shim = Shim("native", folder, sock)
    cold = os.path.join(folder, "cold-launcher")
    os.chmod(cold, 0o777)
    code, out, err = the_shim.run()
    assert code == 1 and json.loads(out) == {"code": 999, "msg": "cnichain shim: refusing an unsafe cold launcher",
                                             "details": cold}
    os.unlink(cold)
    code, out, _ = the_shim.run()
    assert code == 1 and json.loads(out)["msg"] == "cnichain shim: the cold launcher is missing"
    assert json.loads(out)["code"] == 999


def test_native_shim_unconfigured_is_a_cni_error(folder):
    binary = required.native_shim()
    exe = os.path.join(folder, "raw")
    shutil.copy(binary, exe)
    proc = subprocess.run([exe], input=b"", env=BASE_ENV, capture_output=True, timeout=60)
    assert proc.returncode == 1 and "not configured" in json.loads(proc.stdout)["msg"]
    assert json.loads(proc.stdout)["code"] == 999


# -- a caller that is not root ---------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start an agent and to run as uid 65534")
def test_a_non_root_caller_is_refused_and_runs_cold(folder, sock):
    from cnichain.agent import running_agent

    run_dir = os.path.join(folder, "run")
    agent_sock = os.path.join(run_dir, "agent.sock")
    shims = [Shim(kind, folder, agent_sock) for kind in ("python", "native")]
    with running_agent(agent_sock, args=("--pool", "0")) as agent:
        os.chmod(run_dir, 0o711)  # loosened on purpose: the peer check must still keep them out
        os.chmod(agent_sock, 0o666)
        for one in shims:
            got = one.run(user=65534)
            want = cold_output(STDIN, BASE_ENV)
            assert got == want, one.kind
        assert 'cnichain_agent_refused_total{reason="not root"} 2' in agent.metrics()


# A test helper: run a program with memfd_create failing (ENOSYS), as on a kernel without it.
NO_MEMFD_C = r"""
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {4, f};
    if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 125;
    execv(argv[1], argv + 1);
    return 126;
}
"""


def test_native_shim_replays_stdin_through_a_pipe_without_memfd(folder, sock, agent):
    """Where memfd_create is missing the shim feeds the cold path through a pipe: same bytes."""
    cc = required.command("gcc", "the C compiler ./run installs for the native shim")
    src, helper = os.path.join(folder, "nomemfd.c"), os.path.join(folder, "nomemfd")
    with open(src, "w") as fh:
        fh.write(NO_MEMFD_C)
    subprocess.run([cc, "-o", helper, src], check=True, capture_output=True, timeout=120)
    the_shim = Shim("native", folder, sock)
    big = STDIN + b" " * (1 << 20)  # far more than a pipe buffer: the feeder must not deadlock
    fake = agent(after_request(shim.header(shim.REFUSED, 0)))
    proc = subprocess.run([helper, the_shim.exe], input=big, env=BASE_ENV, capture_output=True, timeout=60)
    expect_cold((proc.returncode, proc.stdout, proc.stderr), big)
    exchanged(fake, shim.REQUEST)
