"""The node agent: plugin handlers kept warm, one forked worker per request.

A cold plugin exec pays for interpreter start-up and the pyroute2 import (150-200 ms).  The agent
pays once: at start it imports every plugin and what they use, then serves requests from the
installed shims (:mod:`cnichain.common.shim`) on a root-only unix socket.  Each request runs the
same :func:`cnichain.common.skel.dispatch` the cold path runs, in a child forked for it:

* the child enters the caller's network and mount namespaces (opened from the peer's pid the
  moment the connection is accepted, then checked against the namespace the shim says it is in),
  so a caller whose "node" is a namespace of its own sees exactly what a cold exec would do;
* the child gets the request's environment, umask and a private stdout/stderr; nothing it does
  reaches the agent, and a crash or hang only fails that request (it is killed after a limit);
* the child writes the answer to the shim itself, so the answer survives the agent being killed
  or restarted mid-request (see the shim's docstring for the handshake and retry semantics).

The server is one thread around an epoll loop: forking from a multi-threaded process is unsafe,
and the loop only parses small frames and forks, so it is never the bottleneck.  Counters and
latency histograms per plugin and command are served in Prometheus text format over HTTP on a
second root-only unix socket (``<socket>.metrics``) and, opt-in, on a loopback TCP port.

This module must stay importable without typer: ``cnichain agent`` (cli/app.py) is a thin wrapper
over :func:`serve`, and benchmarks use :func:`running_agent`.
"""

from __future__ import annotations

import errno
import gc
import importlib
import io
import os
import re
import selectors
import signal
import socket
import struct
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from cnichain.common import shim
from cnichain.common.errors import CniError, Code

MAX_REQUEST = 4 << 20  # a network config with a large prevResult is tens of kB
MAX_ENV_ENTRIES = 512
MAX_TYPE_LEN = 64
READ_TIMEOUT = 5.0  # from accept to a complete request
GO_TIMEOUT = 5.0  # from ACK to the shim's GO
KILL_GRACE = 2.0  # after the per-request limit (the worker's own alarm) before SIGKILL
EXIT_OK, EXIT_CNI_ERROR, EXIT_UNDELIVERED, EXIT_FAILED = 0, 1, 2, 3
_ENV_KEY = re.compile(rb"^[A-Za-z_][A-Za-z0-9_]*$")
_CID = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RequestError(ValueError):
    """A request that is malformed or hostile: answered with a CNI error, never run."""


class Refusal(Exception):
    """A request the agent will not serve; the shim falls back to the cold path."""


@dataclass
class AgentRequest:
    plugin_type: str
    netns_id: tuple[int, int]
    umask: int
    env: dict[str, str]
    stdin: bytes

    @property
    def command(self) -> str:
        return self.env.get("CNI_COMMAND", "")

    @property
    def container_id(self) -> str:
        cid = self.env.get("CNI_CONTAINERID", "")
        return cid if _CID.match(cid) else ("-" if not cid else "<invalid>")


def decode_request(payload: bytes, known_types: Any) -> AgentRequest:
    """Parse and validate a REQUEST payload (bounds first, then contents)."""
    fixed = struct.Struct("!QQIHII")
    if len(payload) < fixed.size:
        raise RequestError("request too short")
    dev, ino, umask, n_type, n_env, n_stdin = fixed.unpack_from(payload)
    if fixed.size + n_type + n_env + n_stdin != len(payload):
        raise RequestError("request field lengths do not add up")
    if not 0 < n_type <= MAX_TYPE_LEN:
        raise RequestError("plugin type missing or too long")
    if umask > 0o777:
        raise RequestError("invalid umask")
    pos = fixed.size
    raw_type = payload[pos : pos + n_type]
    pos += n_type
    env_block = payload[pos : pos + n_env]
    pos += n_env
    stdin = payload[pos:]
    try:
        plugin_type = raw_type.decode("ascii")
    except UnicodeDecodeError:
        raise RequestError("plugin type is not ASCII") from None
    if not re.fullmatch(r"[a-z0-9][a-z0-9._\-]*", plugin_type):
        raise RequestError("invalid plugin type")
    if plugin_type not in known_types:
        raise Refusal(f"plugin type {plugin_type!r} is not served by this agent")
    env: dict[str, str] = {}
    if env_block:
        if not env_block.endswith(b"\0"):
            raise RequestError("environment block is not terminated")
        records = env_block[:-1].split(b"\0")
        if len(records) > MAX_ENV_ENTRIES:
            raise RequestError("too many environment variables")
        for record in records:
            key, sep, value = record.partition(b"=")
            if not sep or not _ENV_KEY.match(key):
                raise RequestError("invalid environment record")
            env[os.fsdecode(key)] = os.fsdecode(value)
    return AgentRequest(plugin_type, (dev, ino), umask, env, stdin)


def error_result(msg: str, details: str = "", code: int = Code.INTERNAL) -> bytes:
    """A RESULT frame carrying a CNI error, formatted exactly as the skeleton prints errors."""
    from cnichain.common.skel import error_json

    out = (error_json(CniError(code, msg, details)) + "\n").encode()
    return shim.encode_result(1, out, b"")


# -- metrics -----------------------------------------------------------------------------------


@dataclass
class Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += seconds


class Metrics:
    """Counters and histograms, kept by the server loop only (workers never touch them)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.requests: dict[tuple[str, str, str], int] = {}
        self.latency: dict[tuple[str, str], Histogram] = {}
        self.refused: dict[str, int] = {}
        self.rejected = 0
        self.inflight = 0

    def done(self, plugin: str, command: str, outcome: str, seconds: float) -> None:
        key = (plugin, command, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.latency.setdefault((plugin, command), Histogram()).observe(seconds)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def render(self) -> str:
        def esc(value: str) -> str:
            return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines = [
            "# HELP cnichain_agent_requests_total Requests run by the agent, by outcome.",
            "# TYPE cnichain_agent_requests_total counter",
        ]
        for (plugin, command, outcome), n in sorted(self.requests.items()):
            lines.append(
                f'cnichain_agent_requests_total{{plugin="{esc(plugin)}",command="{esc(command)}",outcome="{outcome}"}} {n}'
            )
        lines += [
            "# HELP cnichain_agent_request_duration_seconds Time from the go-ahead to the worker's exit.",
            "# TYPE cnichain_agent_request_duration_seconds histogram",
        ]
        for (plugin, command), hist in sorted(self.latency.items()):
            labels = f'plugin="{esc(plugin)}",command="{esc(command)}"'
            running = 0
            for bound, n in zip(BUCKETS, hist.counts):
                running += n
                lines.append(f'cnichain_agent_request_duration_seconds_bucket{{{labels},le="{bound:g}"}} {running}')
            running += hist.counts[-1]
            lines.append(f'cnichain_agent_request_duration_seconds_bucket{{{labels},le="+Inf"}} {running}')
            lines.append(f"cnichain_agent_request_duration_seconds_sum{{{labels}}} {hist.total:.6f}")
            lines.append(f"cnichain_agent_request_duration_seconds_count{{{labels}}} {running}")
        lines += [
            "# HELP cnichain_agent_refused_total Connections sent back to the cold path, by reason.",
            "# TYPE cnichain_agent_refused_total counter",
        ]
        for reason, n in sorted(self.refused.items()):
            lines.append(f'cnichain_agent_refused_total{{reason="{esc(reason)}"}} {n}')
        lines += [
            "# HELP cnichain_agent_rejected_total Malformed requests answered with a CNI error.",
            "# TYPE cnichain_agent_rejected_total counter",
            f"cnichain_agent_rejected_total {self.rejected}",
            "# HELP cnichain_agent_inflight Requests whose worker is running.",
            "# TYPE cnichain_agent_inflight gauge",
            f"cnichain_agent_inflight {self.inflight}",
            "# HELP cnichain_agent_start_time_seconds Unix time the agent started.",
            "# TYPE cnichain_agent_start_time_seconds gauge",
            f"cnichain_agent_start_time_seconds {self.started:.3f}",
        ]
        return "\n".join(lines) + "\n"


# -- plugins and warm-up -----------------------------------------------------------------------


def load_plugins(extra: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Plugin type -> ``Plugin`` for every plugin package present, plus ``extra`` (type -> module)."""
    from cnichain.cli.install import available_plugins

    modules = {t: f"cnichain.plugins.{m}.plugin" for t, m in available_plugins().items()}
    modules.update(extra or {})
    plugins = {}
    for plugin_type, module in modules.items():
        try:
            plugins[plugin_type] = importlib.import_module(module).PLUGIN
        except Exception as exc:  # noqa: BLE001 - that type then runs cold; the others stay warm
            print(f"cnichain-agent: not serving {plugin_type}: cannot load {module}: {exc}", file=sys.stderr)
    return plugins


def preload(plugins: dict[str, Any]) -> list[str]:
    """Import everything a request may need, so workers start warm; returns what was loaded.

    Nothing here may leave a socket, thread or library context behind: every worker opens its own
    netlink sockets and nftables context after entering the caller's namespace.
    """
    import pkgutil

    loaded = []
    seen = {n for n in sys.modules if n.startswith("cnichain.plugins.") and n.count(".") == 2}
    for pkg_name in sorted(seen):
        pkg = sys.modules[pkg_name]
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
            if info.name == "__main__":
                continue
            try:
                importlib.import_module(f"{pkg_name}.{info.name}")
            except Exception as exc:  # noqa: BLE001 - a broken optional module must not stop the agent
                print(f"cnichain-agent: cannot preload {pkg_name}.{info.name}: {exc}", file=sys.stderr)
    for module in ("cnichain.common.netlink", "cnichain.common.nft", "cnichain.common.sysctl",
                   "cnichain.common.invoke", "cnichain.common.cniargs", "cnichain.common.types",
                   "subprocess", "ipaddress", "hashlib", "fcntl", "ctypes", "traceback", "json"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
    try:
        from pyroute2 import IPRoute  # noqa: F401 - the ~90 ms we are here to save

        import pyroute2.netlink.rtnl.ifinfmsg  # noqa: F401
        import pyroute2.netlink.rtnl.tcmsg  # noqa: F401

        loaded.append("pyroute2")
    except ImportError as exc:
        print(f"cnichain-agent: pyroute2 unavailable, workers will import it: {exc}", file=sys.stderr)
    try:
        import ctypes

        ctypes.CDLL("libnftables.so.1")  # dlopen once; a worker's Nftables() then only binds symbols
        import nftables  # noqa: F401

        loaded.append("nftables")
    except (ImportError, OSError) as exc:
        print(f"cnichain-agent: nftables binding unavailable: {exc}", file=sys.stderr)
    loaded.extend(sorted(n for n in sys.modules if n.startswith("cnichain.plugins.") and n.endswith(".plugin")))
    return loaded


# -- namespaces --------------------------------------------------------------------------------

_libc: Any = None


def setns(fd: int, nstype: int) -> None:
    global _libc
    if hasattr(os, "setns"):
        os.setns(fd, nstype)  # type: ignore[attr-defined]
        return
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, nstype) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _ns_id(fd_or_path: Any) -> tuple[int, int]:
    st = os.stat(fd_or_path) if isinstance(fd_or_path, str) else os.fstat(fd_or_path)
    return st.st_dev, st.st_ino


# -- the worker (runs in the forked child only) ---------------------------------------------------

_LAUNCHER_FORWARD = re.compile(r"^code = forward\('([a-z0-9][a-z0-9._\-]*)', '([^'\\]*)'\)$", re.M)


def launcher_target(binary: str) -> Optional[tuple[str, str]]:
    """(plugin type, baked socket) when ``binary`` is a launcher written by our installer."""
    try:
        with open(binary, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    from cnichain.cli.install import MARKER

    if MARKER not in head:
        return None
    found = _LAUNCHER_FORWARD.search(head)
    return (found.group(1), found.group(2)) if found else None


def _reset_process_state(env: dict) -> None:
    """What a fresh exec would start with: the request's environment, no cached library handles."""
    from cnichain.common import log as log_mod
    from cnichain.common import nft as nft_mod

    os.environ.clear()
    os.environ.update(env)
    nft_mod._nft = None  # a libnftables context belongs to the namespace it was made in
    log_mod.log.__init__()  # type: ignore[misc]


class DelegateRunner:
    """Runs IPAM delegates that would exec one of our launchers -- and so come back to this very
    agent -- in a forked process instead: the same isolation as an exec (own process, own state,
    own limit), without interpreter start-up and a second round trip through the socket."""

    def __init__(self, plugins: dict[str, Any], socket_path: str, limit: float) -> None:
        self.plugins = plugins
        self.socket_path = socket_path
        self.limit = limit

    def __call__(self, binary: str, env: dict, stdin: bytes) -> Optional[tuple[int, bytes, bytes]]:
        target = launcher_target(binary)
        if target is None or target[0] not in self.plugins:
            return None
        path = env.get(shim.ENV_SOCKET, target[1])
        if path.lower() in shim.DISABLED or path != self.socket_path:
            return None  # that exec would not reach this agent: keep the exec semantics exactly
        plugin = self.plugins[target[0]]
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            status = EXIT_FAILED
            try:
                os.close(r)
                signal.alarm(max(1, int(self.limit + 0.999)))
                _reset_process_state(env)
                out, err = io.StringIO(), io.StringIO()
                sys.stdout, sys.stderr = out, err
                from cnichain.common.skel import dispatch

                code = dispatch(plugin, env, stdin, out, err)
                frame = shim.encode_result(code, out.getvalue().encode("utf-8", "surrogateescape"),
                                           err.getvalue().encode("utf-8", "surrogateescape"))
                view = memoryview(frame)
                while view:
                    view = view[os.write(w, view):]
                status = EXIT_OK
            finally:
                os._exit(status)
        os.close(w)
        chunks = []
        try:
            while True:
                chunk = os.read(r, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            os.close(r)
        _pid, status = os.waitpid(pid, 0)
        data = b"".join(chunks)
        try:
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_OK:
                _v, kind, _n = shim.parse_header(data[: shim.HEADER_SIZE])
                if kind == shim.RESULT:
                    return shim.decode_result(data[shim.HEADER_SIZE :])
        except ValueError:
            pass
        # Like an exec'd plugin that died: no JSON, a non-zero status.
        how = f"signal: {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
        return 1, b"", f"{target[0]} worker failed ({how})".encode()


def _worker(conn: socket.socket, req: AgentRequest, plugin: Any, net_fd: int, mnt_fd: int, limit: float,
            delegates: Optional[DelegateRunner] = None) -> int:
    """Run one request in this (forked) process and answer the shim; returns the exit status."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    signal.alarm(max(1, int(limit + 0.999)))  # default action: terminate; bounds any hang
    keep = sorted({0, 1, 2, conn.fileno(), net_fd, mnt_fd})
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 1 << 20)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if _ns_id(mnt_fd) != _ns_id("/proc/self/ns/mnt"):
        setns(mnt_fd, CLONE_NEWNS)
    setns(net_fd, CLONE_NEWNET)
    os.close(net_fd)
    os.close(mnt_fd)
    os.chdir("/")
    os.umask(req.umask)
    _reset_process_state(req.env)

    from cnichain.common import invoke
    from cnichain.common.skel import dispatch

    invoke.delegate_runner = delegates
    out, err = io.StringIO(), io.StringIO()
    sys.stdout, sys.stderr = out, err
    code = dispatch(plugin, req.env, req.stdin, out, err)
    frame = shim.encode_result(code, out.getvalue().encode("utf-8", "surrogateescape"),
                               err.getvalue().encode("utf-8", "surrogateescape"))
    try:
        conn.settimeout(limit)
        conn.sendall(frame)
    except OSError:
        return EXIT_UNDELIVERED
    return EXIT_OK if code == 0 else EXIT_CNI_ERROR


# -- the server ----------------------------------------------------------------------------------


@dataclass
class AgentConfig:
    socket_path: str = shim.DEFAULT_SOCKET
    metrics_socket: Optional[str] = None  # default "<socket_path>.metrics"; "" disables
    metrics_port: int = 0  # opt-in loopback TCP port for Prometheus
    request_timeout: float = 60.0
    max_request: int = MAX_REQUEST
    max_workers: int = 64
    drain_timeout: Optional[float] = None  # default: request_timeout + KILL_GRACE
    log_file: Optional[str] = None  # default: stderr
    extra_plugins: dict[str, str] = field(default_factory=dict)  # type -> module exposing PLUGIN
    fork_delegates: bool = True  # run delegates that would come back to us in a fork, not an exec


class Conn:
    """One accepted connection and where it is in the handshake."""

    __slots__ = ("sock", "kind", "pid", "uid", "net_fd", "mnt_fd", "buf", "state", "deadline",
                 "req", "child", "pidfd", "started", "killed")

    def __init__(self, sock: socket.socket, kind: str) -> None:
        self.sock = sock
        self.kind = kind  # "cni" or "metrics"
        self.pid = self.uid = 0
        self.net_fd = self.mnt_fd = -1
        self.buf = bytearray()
        self.state = "read"  # read -> go -> run
        self.deadline = 0.0
        self.req: Optional[AgentRequest] = None
        self.child = 0
        self.pidfd = -1
        self.started = 0.0
        self.killed = False


def _ensure_private_dir(path: str) -> None:
    """Create the socket directory root-only, or refuse one that others could write."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != 0 or st.st_mode & 0o022:
        raise SystemExit(f"cnichain-agent: {path} must be owned by root and not group/world-writable")


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.cfg = config
        self.metrics = Metrics()
        self.plugins: dict[str, Any] = {}
        self.sel = selectors.DefaultSelector()
        self.listeners: dict[int, tuple[socket.socket, str, str, int]] = {}  # fd -> (sock, kind, path, inode)
        self.conns: dict[int, Conn] = {}
        self.children: dict[int, Conn] = {}  # pidfd -> conn
        self.draining = False
        self.drain_deadline = 0.0
        self.stop_now = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._log_fh: Any = None
        self._signals: list[int] = []

    # -- logging ---------------------------------------------------------------------------
    def log(self, message: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        line = f"{stamp} cnichain-agent[{os.getpid()}] {message}\n"
        try:
            if self._log_fh is not None:
                self._log_fh.write(line)
                self._log_fh.flush()
            else:
                sys.stderr.write(line)
                sys.stderr.flush()
        except (OSError, ValueError):
            pass

    # -- set-up ------------------------------------------------------------------------------
    def prepare(self) -> None:
        if os.geteuid() != 0:
            raise SystemExit("cnichain-agent: must run as root (it runs CNI plugins for the runtime)")
        if self.cfg.log_file:
            fd = os.open(self.cfg.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._log_fh = os.fdopen(fd, "a", buffering=1)
        started = time.perf_counter()
        self.plugins = load_plugins(self.cfg.extra_plugins)
        loaded = preload(self.plugins)
        gc.collect()
        gc.freeze()  # keep the warm heap shared with workers (no copy-on-write from the collector)
        self.log(f"warm in {(time.perf_counter() - started) * 1000:.0f} ms: plugins={','.join(sorted(self.plugins))} "
                 f"preloaded={','.join(x for x in loaded if not x.startswith('cnichain.'))}")
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        self.sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        metrics_socket = self.cfg.metrics_socket
        if metrics_socket is None:
            metrics_socket = self.cfg.socket_path + ".metrics"
        if metrics_socket:
            self._listen_unix(metrics_socket, "metrics")
        if self.cfg.metrics_port:
            tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind(("127.0.0.1", self.cfg.metrics_port))
            tcp.listen(16)
            self._add_listener(tcp, "metrics-tcp", "")
        # Last: once the CNI socket exists, shims use it.
        self._listen_unix(self.cfg.socket_path, "cni")
        self.log(f"serving on {self.cfg.socket_path}" + (f", metrics on {metrics_socket}" if metrics_socket else "")
                 + (f" and 127.0.0.1:{self.cfg.metrics_port}" if self.cfg.metrics_port else ""))

    def _listen_unix(self, path: str, kind: str) -> None:
        """Bind under a temporary name, then rename into place: the path never shows a half-set-up socket."""
        _ensure_private_dir(os.path.dirname(os.path.abspath(path)))
        if os.path.exists(path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            probe.settimeout(0.5)
            try:
                probe.connect(path)
            except OSError:
                pass  # stale socket from a previous run: replaced below
            else:
                probe.close()
                raise SystemExit(f"cnichain-agent: another agent is serving on {path}")
            finally:
                probe.close()
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(tmp)
        finally:
            os.umask(old)
        os.chmod(tmp, 0o600)
        sock.listen(256)
        os.replace(tmp, path)
        self._add_listener(sock, kind, path, os.stat(path).st_ino)

    def _add_listener(self, sock: socket.socket, kind: str, path: str, inode: int = 0) -> None:
        sock.setblocking(False)
        self.listeners[sock.fileno()] = (sock, kind, path, inode)
        self.sel.register(sock, selectors.EVENT_READ, ("listen", kind))

    # -- signals and shutdown --------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only record it: the loop acts on it (the wakeup fd ends its select), so the handler never
        # runs in the middle of the loop's own bookkeeping.
        self._signals.append(signum)

    def _handle_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if self.draining:
                self.stop_now = True  # a second signal: leave now; workers still answer their shims
                self.log(f"signal {signal.Signals(signum).name} while draining: leaving now")
            self.begin_drain(f"signal {signal.Signals(signum).name}")

    def begin_drain(self, why: str) -> None:
        if self.draining:
            return
        self.draining = True
        limit = self.cfg.drain_timeout if self.cfg.drain_timeout is not None else self.cfg.request_timeout + KILL_GRACE
        self.drain_deadline = time.monotonic() + limit
        self.log(f"draining ({why}): {len(self.children)} request(s) in flight")
        self._close_listeners()
        for conn in list(self.conns.values()):
            if conn.kind == "cni" and conn.state in ("read", "go"):
                self._refuse(conn, "agent is shutting down", "draining")

    def _close_listeners(self) -> None:
        for sock, _kind, path, inode in list(self.listeners.values()):
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            if path:
                try:  # remove the path only if it is still ours (a new agent may have replaced it)
                    if os.stat(path).st_ino == inode:
                        os.unlink(path)
                except OSError:
                    pass
            sock.close()
        self.listeners.clear()

    # -- the loop --------------------------------------------------------------------------
    def serve_forever(self) -> int:
        while not self.stop_now:
            if self.draining and not self.children:
                break
            now = time.monotonic()
            if self.draining and now >= self.drain_deadline:
                self.log(f"drain timeout: leaving {len(self.children)} worker(s) to answer on their own")
                break
            timeout = self._next_deadline(now)
            for key, _events in self.sel.select(timeout):
                # An earlier event of this batch may have closed this one's object (a worker reaped
                # before its shim's end-of-stream was read): skip keys that are no longer registered.
                if self.sel.get_map().get(key.fd) is not key:
                    continue
                try:
                    self._dispatch_event(key)
                except Exception as exc:  # noqa: BLE001 - one request's trouble never stops the agent
                    import traceback

                    self.log(f"internal error handling {key.data[0]}: {exc!r}\n{traceback.format_exc()}")
                    if key.data[0] == "conn" and key.data[1].state != "run":
                        self._close(key.data[1])
            self._handle_signals()
            self._expire(time.monotonic())
        self._close_listeners()
        for conn in list(self.conns.values()):
            self._close(conn)
        self.log("stopped")
        return 0

    def _dispatch_event(self, key: selectors.SelectorKey) -> None:
        what, arg = key.data
        if what == "wake":
            self._drain_wakeups()
        elif what == "listen":
            self._accept(key.fileobj, arg)  # type: ignore[arg-type]
        elif what == "conn":
            self._readable(arg)
        elif what == "child":
            self._reap(arg)

    def _next_deadline(self, now: float) -> float:
        deadlines = [c.deadline for c in self.conns.values() if c.deadline]
        if self.draining:
            deadlines.append(self.drain_deadline)
        if not deadlines:
            return 1.0
        return max(0.0, min(min(deadlines) - now, 1.0))

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except BlockingIOError:
            pass

    def _accept(self, listener: socket.socket, kind: str) -> None:
        while True:
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    self.log(f"accept: {exc.strerror}")
                return
            conn = Conn(sock, "metrics" if kind.startswith("metrics") else "cni")
            conn.deadline = time.monotonic() + READ_TIMEOUT
            if kind != "metrics-tcp":
                pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
                conn.pid, conn.uid = pid, uid
                if uid != 0:
                    self.metrics.refuse("not root")
                    self.log(f"refused connection from uid {uid} pid {pid}: not root")
                    self._send_and_close(sock, _refusal(f"permission denied: peer uid {uid} is not root"))
                    continue
            if conn.kind == "cni":
                if self.draining:
                    self._send_and_close(sock, _refusal("agent is shutting down"))
                    continue
                if len(self.children) >= self.cfg.max_workers:
                    self.metrics.refuse("busy")
                    self._send_and_close(sock, _refusal("agent is at its worker limit"))
                    continue
                try:  # now, before the peer could exit and its pid be reused
                    conn.net_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                    conn.mnt_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
                except OSError as exc:
                    self.metrics.refuse("peer namespace")
                    self._close_fds(conn)
                    self._send_and_close(sock, _refusal(f"cannot open the namespaces of pid {pid}: {exc.strerror}"))
                    continue
            sock.setblocking(False)
            self.conns[sock.fileno()] = conn
            self.sel.register(sock, selectors.EVENT_READ, ("conn", conn))

    def _readable(self, conn: Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            # The shim went away before the go-ahead (its timeout, or it was killed): nothing ran.
            if conn.state != "run":
                self._close(conn)
            else:
                self._unregister(conn.sock)  # the worker still owns the reply
            return
        if conn.kind == "metrics":
            self._metrics_readable(conn, chunk)
            return
        conn.buf += chunk
        if conn.state == "read":
            self._try_request(conn)
        elif conn.state == "go":
            self._try_go(conn)
        elif conn.state == "run":
            conn.buf.clear()  # nothing more is expected; ignore chatter

    def _frame(self, conn: Conn) -> Optional[tuple[int, int, bytes]]:
        if len(conn.buf) < shim.HEADER_SIZE:
            return None
        version, kind, length = shim.parse_header(bytes(conn.buf[: shim.HEADER_SIZE]))
        if length > self.cfg.max_request:
            raise RequestError(f"request of {length} bytes exceeds the limit of {self.cfg.max_request}")
        if len(conn.buf) < shim.HEADER_SIZE + length:
            return None
        payload = bytes(conn.buf[shim.HEADER_SIZE : shim.HEADER_SIZE + length])
        del conn.buf[: shim.HEADER_SIZE + length]
        return version, kind, payload

    def _try_request(self, conn: Conn) -> None:
        try:
            frame = self._frame(conn)
            if frame is None:
                return
            version, kind, payload = frame
            if version != shim.VERSION:
                raise Refusal(f"protocol version {version} is not supported (this agent speaks {shim.VERSION})")
            if kind != shim.REQUEST:
                raise RequestError(f"expected a request, got message kind {kind}")
            req = decode_request(payload, self.plugins)
            if req.netns_id != _ns_id(conn.net_fd):
                # The peer's pid now names another process (it exited and the pid was reused), or the
                # shim is not where it claims to be: do not guess, let it run cold.
                raise Refusal("the caller's network namespace could not be verified")
        except Refusal as exc:
            self._refuse(conn, str(exc), "protocol" if "protocol" in str(exc) else "unverified")
            return
        except (RequestError, ValueError) as exc:
            self.metrics.rejected += 1
            self.log(f"rejected request from pid {conn.pid}: {exc}")
            self._send_and_close_conn(conn, error_result("cnichain agent: invalid request", str(exc), Code.DECODING_FAILURE))
            return
        conn.req = req
        conn.state = "go"
        conn.deadline = time.monotonic() + GO_TIMEOUT
        limit_ms = int(self.cfg.request_timeout * 1000)
        try:
            conn.sock.sendall(shim.header(shim.ACK, 4) + limit_ms.to_bytes(4, "big"))
        except OSError:
            self._close(conn)
            return
        if conn.buf:
            self._try_go(conn)

    def _try_go(self, conn: Conn) -> None:
        try:
            frame = self._frame(conn)
        except (RequestError, ValueError):
            self._close(conn)
            return
        if frame is None:
            return
        _version, kind, _payload = frame
        if kind != shim.GO:
            self._close(conn)
            return
        self._start(conn)

    def _start(self, conn: Conn) -> None:
        assert conn.req is not None
        plugin = self.plugins[conn.req.plugin_type]
        conn.state = "run"
        conn.started = time.monotonic()
        conn.deadline = conn.started + self.cfg.request_timeout + KILL_GRACE
        sys.stdout.flush()
        sys.stderr.flush()
        if self._log_fh is not None:
            self._log_fh.flush()
        conn.sock.setblocking(True)
        pid = os.fork()
        if pid == 0:  # the worker
            status = EXIT_FAILED
            try:
                delegates = DelegateRunner(self.plugins, self.cfg.socket_path, self.cfg.request_timeout)
                status = _worker(conn.sock, conn.req, plugin, conn.net_fd, conn.mnt_fd, self.cfg.request_timeout,
                                 delegates if self.cfg.fork_delegates else None)
            except BaseException:  # noqa: BLE001 - the parent reports it; never unwind into the loop
                status = EXIT_FAILED
            finally:
                os._exit(status)
        conn.child = pid
        os.close(conn.net_fd)
        os.close(conn.mnt_fd)
        conn.net_fd = conn.mnt_fd = -1
        conn.pidfd = os.pidfd_open(pid)
        self.children[conn.pidfd] = conn
        self.metrics.inflight = len(self.children)
        self.sel.register(conn.pidfd, selectors.EVENT_READ, ("child", conn))

    def _reap(self, conn: Conn) -> None:
        try:
            _pid, status = os.waitpid(conn.child, 0)
        except ChildProcessError:
            status = 0
        elapsed = time.monotonic() - conn.started
        req = conn.req
        assert req is not None
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) in (EXIT_OK, EXIT_CNI_ERROR):
            code = os.WEXITSTATUS(status)
            outcome = "ok" if code == 0 else "error"
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_UNDELIVERED:
            code, outcome = 1, "undelivered"
        else:
            code = 1
            if conn.killed or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM):
                outcome = "timeout"
                msg = f"cnichain agent: {req.plugin_type} {req.command} did not finish within {self.cfg.request_timeout:g}s"
            else:
                outcome = "crashed"
                how = (f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"status {os.WEXITSTATUS(status)}")
                msg = f"cnichain agent: {req.plugin_type} {req.command} worker failed ({how})"
        self.metrics.done(req.plugin_type, req.command, outcome, elapsed)
        if outcome in ("timeout", "crashed"):
            try:
                conn.sock.settimeout(1.0)
                conn.sock.sendall(error_result(msg))
            except OSError:
                pass
        self.log(
            f"request plugin={req.plugin_type} command={req.command or '-'} container={req.container_id} "
            f"exit={code} outcome={outcome} ms={elapsed * 1000:.1f} worker={conn.child}"
        )
        self._unregister(conn.pidfd)
        del self.children[conn.pidfd]
        os.close(conn.pidfd)
        conn.pidfd = -1
        self.metrics.inflight = len(self.children)
        self._close(conn)

    def _expire(self, now: float) -> None:
        for conn in list(self.conns.values()):
            if not conn.deadline or now < conn.deadline:
                continue
            if conn.state == "run":
                if conn.child and not conn.killed:
                    conn.killed = True
                    try:
                        os.kill(conn.child, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                conn.deadline = 0.0
            else:
                self._close(conn)  # a silent or slow client: its shim has gone cold already

    # -- metrics connections -----------------------------------------------------------------
    def _metrics_readable(self, conn: Conn, chunk: bytes) -> None:
        conn.buf += chunk
        if b"\r\n\r\n" not in conn.buf and b"\n\n" not in conn.buf and len(conn.buf) < 8192:
            return
        first = bytes(conn.buf).split(b"\n", 1)[0].decode("latin-1").split()
        if len(first) >= 2 and first[0] == "GET" and first[1].split("?")[0] in ("/metrics", "/"):
            body = self.metrics.render().encode()
            head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
        else:
            body = b"not found\n"
            head = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
        head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        conn.sock.setblocking(True)
        conn.sock.settimeout(1.0)
        try:
            conn.sock.sendall(head.encode() + body)
        except OSError:
            pass
        self._close(conn)

    # -- helpers ---------------------------------------------------------------------------------
    def _unregister(self, fileobj: Any) -> None:
        try:
            self.sel.unregister(fileobj)
        except (KeyError, ValueError):
            pass

    def _refuse(self, conn: Conn, reason: str, label: str) -> None:
        self.metrics.refuse(label)
        self.log(f"refused request from pid {conn.pid}: {reason}")
        self._send_and_close_conn(conn, _refusal(reason))

    def _send_and_close_conn(self, conn: Conn, data: bytes) -> None:
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(1.0)
            conn.sock.sendall(data)
        except OSError:
            pass
        self._close(conn)

    @staticmethod
    def _send_and_close(sock: socket.socket, data: bytes) -> None:
        try:
            sock.settimeout(1.0)
            sock.sendall(data)
        except OSError:
            pass
        sock.close()

    @staticmethod
    def _close_fds(conn: Conn) -> None:
        for name in ("net_fd", "mnt_fd"):
            fd = getattr(conn, name)
            if fd >= 0:
                os.close(fd)
                setattr(conn, name, -1)

    def _close(self, conn: Conn) -> None:
        fd = conn.sock.fileno()
        if fd >= 0 and self.conns.get(fd) is conn:
            del self.conns[fd]
            self._unregister(conn.sock)
        self._close_fds(conn)
        if conn.pidfd >= 0:  # still running: keep tracking the worker, just forget the socket
            return
        conn.sock.close()


def _refusal(reason: str) -> bytes:
    data = reason.encode("utf-8", "replace")[:1024]
    return shim.header(shim.REFUSED, len(data)) + data


# -- entry points ----------------------------------------------------------------------------------


def serve(socket_path: str = shim.DEFAULT_SOCKET, **options: Any) -> int:
    """Run the agent in the foreground until SIGTERM/SIGINT (then drain); returns the exit code."""
    agent = Agent(AgentConfig(socket_path=socket_path, **options))
    agent.prepare()
    return agent.serve_forever()


@dataclass
class RunningAgent:
    proc: Any
    socket_path: str
    metrics_socket: str
    log_path: str

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def metrics(self) -> str:
        return fetch_metrics(self.metrics_socket)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (drain) and wait; SIGKILL if it does not leave in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def agent_command(socket_path: str, *args: str) -> list[str]:
    """argv that starts an agent with this installation's interpreter and import roots."""
    from cnichain.cli.install import import_roots

    roots = import_roots()
    code = (f"import sys; sys.path[0:0] = {roots!r}; "
            "from cnichain.cli.agent import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-P", "-c", code, "--socket", socket_path, *args]


@contextmanager
def running_agent(
    socket_path: str,
    netns: Optional[str] = None,
    args: tuple[str, ...] = (),
    env: Optional[dict] = None,
    start_timeout: float = 30.0,
) -> Iterator[RunningAgent]:
    """Start ``cnichain agent --socket PATH`` as a subprocess, wait until it serves, stop it after.

    ``netns`` only places the agent itself; every request runs in its caller's namespace anyway.
    ``env`` adds variables (e.g. PYTHONPATH for test-only plugin modules given with ``--plugin``).
    """
    import subprocess

    from cnichain.common import netns as netns_mod

    log_path = socket_path + ".log"
    before = _inode(socket_path)  # ready means: a new socket (ours) at the path, answering
    child_env = dict(os.environ)
    child_env.update(env or {})
    os.makedirs(os.path.dirname(os.path.abspath(socket_path)), mode=0o700, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    argv = agent_command(socket_path, *args)
    try:
        if netns:
            with netns_mod.entered(netns):
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=child_env)
        else:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, env=child_env)
    finally:
        os.close(log_fd)
    metrics_socket = socket_path + ".metrics"
    for a, b in zip(args, args[1:]):
        if a == "--metrics-socket":
            metrics_socket = b
    agent = RunningAgent(proc, socket_path, metrics_socket, log_path)
    try:
        deadline = time.monotonic() + start_timeout
        while not (_inode(socket_path) not in (0, before) and _answers(socket_path)):
            if proc.poll() is not None:
                with open(log_path, errors="replace") as fh:
                    raise RuntimeError(f"agent exited with {proc.returncode}: {fh.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent did not start serving on {socket_path} within {start_timeout}s")
            time.sleep(0.02)
        yield agent
    finally:
        agent.stop()


def _inode(path: str) -> int:
    try:
        return os.stat(path).st_ino
    except OSError:
        return 0


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def fetch_metrics(path: str, timeout: float = 5.0) -> str:
    """GET /metrics from the agent's metrics socket (what ``curl --unix-socket`` would do)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n")
        chunks = []
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"metrics: {head[:100]!r}")
    return body.decode()


def parse_args(argv: Optional[list[str]] = None) -> AgentConfig:
    import argparse

    p = argparse.ArgumentParser(prog="cnichain agent", description="Serve CNI plugin requests warm (see cli/agent.py).")
    p.add_argument("--socket", default=os.environ.get(shim.ENV_SOCKET) or shim.DEFAULT_SOCKET)
    p.add_argument("--metrics-socket", default=None, help='default "<socket>.metrics"; "" disables')
    p.add_argument("--metrics-port", type=int, default=0, help="also serve metrics on 127.0.0.1:PORT")
    p.add_argument("--request-timeout", type=float, default=60.0)
    p.add_argument("--max-workers", type=int, default=64)
    p.add_argument("--drain-timeout", type=float, default=None)
    p.add_argument("--log-file", default=None)
    p.add_argument("--exec-delegates", action="store_true",
                   help="exec IPAM delegates even when they are our own launchers (default: fork them)")
    p.add_argument("--plugin", action="append", default=[], metavar="TYPE=MODULE",
                   help="also serve a plugin from a module exposing PLUGIN (repeatable)")
    ns = p.parse_args(argv)
    extra = {}
    for item in ns.plugin:
        name, sep, module = item.partition("=")
        if not sep or not name or not module:
            p.error(f"--plugin {item!r}: expected TYPE=MODULE")
        extra[name] = module
    return AgentConfig(
        socket_path=ns.socket,
        metrics_socket=ns.metrics_socket,
        metrics_port=ns.metrics_port,
        request_timeout=ns.request_timeout,
        max_workers=ns.max_workers,
        drain_timeout=ns.drain_timeout,
        log_file=ns.log_file,
        extra_plugins=extra,
        fork_delegates=not ns.exec_delegates,
    )


def main(argv: Optional[list[str]] = None) -> int:
    agent = Agent(parse_args(argv))
    agent.prepare()
    return agent.serve_forever()


if __name__ == "__main__":
    raise SystemExit(main())
