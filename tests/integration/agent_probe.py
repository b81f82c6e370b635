"""A test-only plugin the agent tests serve with ``--plugin probe=tests.integration.agent_probe``.

Its ADD records where and how it ran (pid, network namespace, cwd, umask, environment, open
descriptors, threads) into the file named by the config's ``record`` key, and on request sleeps
(``sleep``), crashes with a signal (``crash``) or spins forever (``hang``) -- or misbehaves and
returns normally, leaving something behind in its process (``leave``: an open descriptor, another
cwd, umask or environment, a thread, a signal handler, another network or mount namespace, a big
allocation), so the tests can watch the agent's isolation, limits and fallback from the outside.
No tests live here.
"""

from __future__ import annotations

import json
import os
import signal
import time

from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Result


def _record(req: Request, phase: str) -> None:
    path = req.conf.get("record")
    if not path:
        return
    umask = os.umask(0)
    os.umask(umask)
    entry = {
        "phase": phase,
        "pid": os.getpid(),
        "netns": os.stat("/proc/thread-self/ns/net").st_ino,
        "mntns": os.stat("/proc/self/ns/mnt").st_ino,
        "cwd": os.getcwd(),
        "umask": umask,
        "env": sorted(os.environ),
        "fds": len(os.listdir("/proc/self/fd")),
        "threads": len(os.listdir("/proc/self/task")),
        "sigusr1": str(signal.getsignal(signal.SIGUSR1)),
        "time": time.time(),
        "container": req.container_id,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def cmd_add(req: Request) -> Result:
    _record(req, "start")
    if req.conf.get("sleep"):
        time.sleep(float(req.conf["sleep"]))
    if req.conf.get("crash"):
        os.kill(os.getpid(), signal.SIGSEGV)
    if req.conf.get("hang"):
        while True:
            time.sleep(0.05)
    if req.conf.get("leave"):
        _leave(str(req.conf["leave"]), req.conf)
    _record(req, "end")
    return Result(cni_version=req.cni_version)


_KEPT: list = []  # what "grow" allocates stays referenced, as a leaking cache would


def _leave(what: str, conf: dict) -> None:
    """Leave ``what`` behind in this process and return as if nothing happened."""
    import ctypes
    import threading

    if what == "fd":
        os.open("/dev/null", os.O_RDONLY)
    elif what == "cwd":
        os.chdir("/tmp")
    elif what == "umask":
        os.umask(0o000)
    elif what == "env":
        os.environ["PROBE_LEFT"] = "1"
    elif what == "thread":
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
    elif what == "signal":
        signal.signal(signal.SIGUSR1, lambda *_: None)
    elif what == "netns":
        fd = os.open(str(conf["netns"]), os.O_RDONLY)
        if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        os.close(fd)
    elif what == "mntns":
        if ctypes.CDLL(None, use_errno=True).unshare(0x00020000) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
    elif what == "grow":
        _KEPT.append(b"\1" * (int(conf.get("mib", 100)) << 20))  # written, so resident


def cmd_del(req: Request) -> None:
    _record(req, "del")


PLUGIN = Plugin(name="probe", add=cmd_add, delete=cmd_del, check=cmd_del)
