"""One containerd process inside a node's holder: start, kill, restart, ``ctr``, its log.

The release's own directory goes first on the process's ``PATH`` (containerd looks its
``containerd-shim-runc-v2`` up there) and ``ctr`` is called by its full path, so each release runs
with its own shim and client; ``runc`` is the system's.  containerd runs inside the node's holder
(:mod:`holder`), so its fixed paths are private too; everything it owns (config, root, state,
gRPC socket, log) lives in the node's directory.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from typing import Optional

from cnichain.tools.containerd_node.config import SOCKET_NAME, config_text
from cnichain.tools.containerd_node.holder import Holder

LOG_NAME = "containerd.log"


class Containerd:
    """Start, kill and restart one containerd inside a holder, with the same state each time."""

    def __init__(self, release_bin_dir: str, major: int, holder: Holder, workdir: str, cni_bin_dirs: list[str],
                 conf_dir: str, sandbox_image: str, env: Optional[dict[str, str]] = None):
        self.release_bin_dir = release_bin_dir
        self.holder = holder
        self.workdir = workdir
        self.config = os.path.join(workdir, "containerd.toml")
        self.socket = os.path.join(workdir, SOCKET_NAME)
        self.log = os.path.join(workdir, LOG_NAME)
        self.env = dict(env or {})  # added to containerd's environment, which libcni hands to every plugin
        with open(self.config, "w") as fh:
            fh.write(config_text(major, workdir, cni_bin_dirs, conf_dir, sandbox_image))
        self.proc: Optional[subprocess.Popen] = None

    def binary(self, name: str) -> str:
        return os.path.join(self.release_bin_dir, name)

    def version(self) -> str:
        """``containerd --version``'s version field (``2.1.9+unknown``), "" when it prints none."""
        words = subprocess.run([self.binary("containerd"), "--version"], capture_output=True, text=True,
                               timeout=30).stdout.split()
        return words[2] if len(words) > 2 else ""

    def start(self, timeout: float = 30.0) -> None:
        """Start containerd and wait (bounded) until its gRPC socket exists."""
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        with open(self.log, "ab") as log:
            path = f"{self.release_bin_dir}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
            self.proc = self.holder.popen([self.binary("containerd"), "--config", self.config],
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                          env=dict(os.environ, **self.env, PATH=path))
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not come up; log tail:\n{self.log_tail()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL containerd only (as a crash would); shims and pods keep running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        # nsenter exec'd into containerd, so this pid is containerd itself.
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run ``ctr`` against this containerd (the k8s.io namespace, where the CRI lives)."""
        proc = subprocess.run([self.binary("ctr"), "--address", self.socket, "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)

    def shim_executables(self) -> set[str]:
        """The executables of the runc shims running in this node's mount namespace."""
        mine = self.holder.mount_ns()
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/comm") as fh:
                    if not fh.read().startswith("containerd-shim"):
                        continue
                if os.readlink(f"/proc/{pid}/ns/mnt") == mine:
                    found.add(os.readlink(f"/proc/{pid}/exe"))
            except OSError:
                continue
        return found


# What containerd logs when a plugin exec failed: its CRI service's message for a sandbox whose
# network setup or teardown failed, with libcni's 'plugin type="..." failed (add|delete|check)'
# inside.  Nothing else it logs at error level (a ttrpc "broken pipe" from a shim that went away,
# an image pull, a status poll) means that a plugin failed.
PLUGIN_FAILURE = re.compile(
    r"failed to (set ?up|destroy|tear ?down) network for sandbox"
    r'|plugin type=\\?"[^"\\]+\\?"( name=\\?"[^"\\]*\\?")? failed \((add|delete|check)\)',
    re.IGNORECASE)


def plugin_failures(path: str) -> list[str]:
    """The lines of a containerd log that report a failed plugin exec (network setup or teardown).

    A log that is not there raises (OSError): a containerd that logged nowhere reported nothing,
    which is not "no failures"."""
    with open(path, errors="replace") as fh:
        return [line.strip()[:300] for line in fh if PLUGIN_FAILURE.search(line)]


def log_tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` of a containerd log (CNI errors land there), or a note that there is none."""
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"
