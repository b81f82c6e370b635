"""A test-only plugin the agent tests serve with ``--plugin probe=tests.integration.agent_probe``.

Its ADD records where and how it ran (pid, network namespace, cwd, umask, environment) into the
file named by the config's ``record`` key, and on request sleeps (``sleep``), crashes with a
signal (``crash``) or spins forever (``hang``), so the tests can watch the agent's isolation,
limits and fallback from the outside.  No tests live here.
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
    _record(req, "end")
    return Result(cni_version=req.cni_version)


def cmd_del(req: Request) -> None:
    _record(req, "del")


PLUGIN = Plugin(name="probe", add=cmd_add, delete=cmd_del, check=cmd_del)
