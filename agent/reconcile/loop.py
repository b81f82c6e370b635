"""The reconciler process: wait for kernel notifications and timers, run the engine's passes.

Its own process, started by the agent (:mod:`cnichain.agent.reconcile`): the agent's loop is
one thread that forks workers, so it must not run threads or slow kernel listings itself, and a
reconciler that crashes or hangs never delays a CNI request.  It dies with the agent (the parent
death signal), so with the agent down nothing here runs.

Timing: a deletion notification, or a new result-cache entry (:mod:`.cache_events`: a new
attachment, whose expected state is known from that moment), schedules a repair pass ``settle``
seconds later (so one ``nft flush ruleset`` -- hundreds of messages -- costs one pass), the pass
itself takes milliseconds per attachment, and the periodic sweep (repair, leaks, cache, status) is
the backstop for anything a notification missed.  Repairs of the notified kind only; the sweep checks everything.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time
from typing import Optional

from cnichain.agent.log import AgentLog

from cnichain.agent.reconcile import cache_events
from cnichain.agent.reconcile import netlink_events as ev
from cnichain.agent.reconcile.engine import Reconciler
from cnichain.agent.reconcile.ownership import Ownership
from cnichain.podstate.sandboxes import source
from cnichain.agent.reconcile.settings import ReconcileConfig, parse

PR_SET_PDEATHSIG = 1
WATCH_TICK = 1.0  # while a repair is being watched, look at the cache this often
RETRY_AFTER = 0.5  # a suspected loss is confirmed, a failed repair retried, this soon (bounded by the back-off)


def _die_with_parent(parent: int) -> None:
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if parent and os.getppid() != parent:
        raise SystemExit(0)  # the agent was already gone before the signal was armed


def _enter_mount_ns(path: str) -> None:
    """Into the host's mount namespace (a privileged pod with hostPID), while still single-threaded:
    there the runtime's result cache, the plugin bin dir and /run/netns are the host's own."""
    from cnichain.agent.peer import CLONE_NEWNS, setns

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(fd, CLONE_NEWNS)
    finally:
        os.close(fd)
    os.chdir("/")


def run(cfg: ReconcileConfig, parent: int = 0) -> int:
    _die_with_parent(parent)
    log = AgentLog()
    if cfg.log_file:
        log.open(cfg.log_file)  # before moving: the log file is the agent's
    if cfg.mount_ns:
        try:
            _enter_mount_ns(cfg.mount_ns)
        except OSError as exc:
            log(f"reconcile: cannot enter mount namespace {cfg.mount_ns}: {exc}; not reconciling")
            return 1
    stop: list[int] = []
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _f: stop.append(s))
    engine = Reconciler(cfg, log, source(cfg.runtime_endpoint, log))
    sel = selectors.DefaultSelector()
    sel.register(wake_r, selectors.EVENT_READ, None)
    subs: list[ev.Subscription] = []
    try:
        subs = ev.subscribe()
    except OSError as exc:
        log(f"reconcile: no netlink notifications ({exc}); relying on the sweep every {cfg.sweep_interval:g} s")
    for sub in subs:
        sel.register(sub.sock, selectors.EVENT_READ, sub)
    watch = _watch_caches(cfg, log)
    if watch is not None:
        sel.register(watch.fd, selectors.EVENT_READ, watch)
    hints = _hints(cfg)
    if hints is not None:
        sel.register(hints, selectors.EVENT_READ, hints)
    log(f"reconcile: {cfg.mode}: networks={','.join(cfg.networks) or 'all'} grace={cfg.grace:g}s "
        f"sweep={cfg.sweep_interval:g}s caches={','.join(cfg.cache_dirs)} runtime listing: {engine.runtime_listing}")
    next_sweep = time.monotonic()
    pending: Optional[float] = None
    kinds: set[str] = set()
    try:
        while not stop:
            now = time.monotonic()
            deadline = next_sweep if pending is None else min(next_sweep, pending)
            if engine.repairs.watch:
                deadline = min(deadline, now + WATCH_TICK)
            for key, _mask in sel.select(max(0.0, deadline - now)):
                if key.data is None:
                    try:
                        while wake_r.recv(512):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                if key.data is hints and hints is not None:
                    if _read_hints(hints, engine.repairs.ownership) and watch is None and pending is None:
                        kinds |= ev.ALL  # no cache watch: look soon, the cache entry follows the ADD
                        pending = time.monotonic() + 1.0
                    continue
                if key.data is watch:
                    changes = watch.read()
                    if changes.removed:
                        _pass(engine, log, frozenset())  # a DEL done: undo a repair that raced it, now
                    if changes.written or changes.rescan:
                        kinds |= ev.ALL  # a new attachment: its expected state is known from now on
                        if pending is None:
                            pending = time.monotonic() + cfg.settle
                    continue
                got = key.data.read()
                if got:
                    kinds |= got
                    if pending is None:
                        pending = time.monotonic() + cfg.settle
            if stop:
                break
            now = time.monotonic()
            if now >= next_sweep:
                engine.sweep()
                if watch is not None:
                    watch.refresh()  # a cache directory created since
                kinds.clear()
                pending = None
                next_sweep = time.monotonic() + cfg.sweep_interval
            elif pending is not None and now >= pending:
                todo = frozenset(kinds)
                kinds.clear()
                pending = None
                _pass(engine, log, todo)
            elif engine.repairs.watch:
                _pass(engine, log, frozenset())
            if engine.repairs.retry_kinds and pending is None:
                kinds |= engine.repairs.retry_kinds
                engine.repairs.retry_kinds.clear()
                pending = time.monotonic() + RETRY_AFTER
    finally:
        engine.save()
        for sub in subs:
            sub.close()
        if watch is not None:
            watch.close()
        if hints is not None:
            hints.close()
        log("reconcile: stopped")
    return 0


def _watch_caches(cfg: ReconcileConfig, log: AgentLog) -> Optional[cache_events.CacheWatch]:
    try:
        return cache_events.CacheWatch(cfg.cache_dirs)
    except (OSError, AttributeError) as exc:
        log(f"reconcile: cannot watch the result caches ({exc}); new attachments wait for the sweep")
        return None


def _hints(cfg: ReconcileConfig) -> Optional[socket.socket]:
    if cfg.hints_fd < 0:
        return None
    try:
        sock = socket.socket(fileno=cfg.hints_fd)
    except OSError:
        return None
    sock.setblocking(False)
    return sock


def _read_hints(sock: socket.socket, ownership: Ownership) -> int:
    """The agent's served ADDs: ``{"type", "cid", "ifname"}`` JSON, a newline, the plugin's stdin
    (its network name).  Anything malformed is dropped: a hint only ever adds ownership."""
    import json

    from cnichain.podstate.cache import valid_id, valid_ifname

    n = 0
    for _ in range(1024):  # bounded: the rest waits for the next wakeup
        try:
            data = sock.recv(1 << 17)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not data:
            break
        head, _, stdin = data.partition(b"\n")
        try:
            meta, conf = json.loads(head), json.loads(stdin)
            network, cid, ifname, ptype = str(conf["name"]), str(meta["cid"]), str(meta["ifname"]), str(meta["type"])
        except (ValueError, KeyError, TypeError):
            continue
        if valid_id(network) and valid_id(cid) and valid_ifname(ifname):
            ownership.served(f"{network}/{cid}/{ifname}", ptype)
            n += 1
    return n


def _pass(engine: Reconciler, log: AgentLog, kinds: frozenset[str]) -> None:
    try:
        if kinds:
            engine.repairs.repair_pass(kinds)
            engine.save()
        else:
            engine.repairs.check_watch()
    except Exception as exc:  # noqa: BLE001 - never leave over one bad pass; the sweep retries
        log(f"reconcile: pass failed: {exc!r}")


def main(argv: Optional[list[str]] = None) -> int:
    """``python -c 'from cnichain.agent.reconcile.loop import main; main()' --status-file ...``"""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    parent = 0
    if args[:1] == ["--parent"]:
        parent = int(args[1])
        args = args[2:]
    try:
        cfg = parse(args)
    except ValueError as exc:
        print(f"cnichain-reconcile: {exc}", file=sys.stderr)
        return 2
    return run(cfg, parent)
