"""Our own containerd process (Debian's binary, never the system service) for one test node.

Everything containerd owns lives under the run's directory: config, root, state, gRPC socket and
log; the CNI plugin directory and conflist directory are the ones ``cnichain install`` wrote for
this run.  It runs inside the node's holder (see :mod:`holder`), so its fixed paths are private
too.  The CRI plugin uses the locally built busybox image as its sandbox image because no registry
is reachable, and plugins that would touch machine-wide places (``/opt/containerd``, btrfs/zfs/
devmapper/aufs snapshotters, tracing) are disabled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from types import ModuleType
from typing import Optional

from .cri_client import CriClient
from .holder import Holder

LOG_NAME = "containerd.log"

DISABLED = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing"]


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_text(workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str) -> str:
    """containerd 1.6 config (version 2) for a node whose every path is under ``workdir``."""
    q = _toml_str
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        "version = 2",
        f"root = {q(os.path.join(workdir, 'root'))}",
        f"state = {q(os.path.join(workdir, 'state'))}",
        f"disabled_plugins = [{', '.join(q(p) for p in DISABLED)}]",
        "[grpc]",
        f"  address = {q(os.path.join(workdir, 'containerd.sock'))}",
        "[ttrpc]",
        f"  address = {q(os.path.join(workdir, 'containerd.ttrpc.sock'))}",
        "[debug]",
        '  level = "info"',
        "[metrics]",
        '  address = ""',
        f"[{cri}]",
        f"  sandbox_image = {q(sandbox_image)}",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  restrict_oom_score_adj = true",
        f"[{cri}.cni]",
        f"  bin_dir = {q(bin_dir)}",
        f"  conf_dir = {q(conf_dir)}",
        "  max_conf_num = 1",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        '  BinaryName = "runc"',
        "  SystemdCgroup = false",
        "",
    ])


class Containerd:
    """Start, kill and restart one containerd inside a holder, with the same state each time."""

    def __init__(self, holder: Holder, workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str):
        self.holder = holder
        self.workdir = workdir
        self.config = os.path.join(workdir, "containerd.toml")
        self.socket = os.path.join(workdir, "containerd.sock")
        self.log = os.path.join(workdir, LOG_NAME)
        with open(self.config, "w") as fh:
            fh.write(config_text(workdir, bin_dir, conf_dir, sandbox_image))
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 30.0) -> None:
        """Start containerd and wait (bounded) until its gRPC socket exists."""
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        with open(self.log, "ab") as log:
            self.proc = self.holder.popen(["containerd", "--config", self.config], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=log, start_new_session=True)
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
        proc = subprocess.run(["ctr", "--address", self.socket, "--namespace", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log, lines)


def log_tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` of a containerd log (CNI errors land there), or a note that there is none."""
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


def start_with_cri(node, cri_api: tuple[ModuleType, ModuleType], archive: str, image: str, bin_dir: str,
                   conf_dir: str) -> tuple["Containerd", CriClient]:
    """containerd on ``node`` (a tests.runtime.node.Node) with this bin and conf dir, the image
    imported and the CRI reporting ready; the client is closed again if any of that fails."""
    containerd = Containerd(node.holder, node.workdir, bin_dir, conf_dir, sandbox_image=image)
    containerd.start()
    pb2, pb2_grpc = cri_api
    cri = CriClient(pb2, pb2_grpc, containerd.socket, node.cgroup_parent, node.lab.path("pods", "x").rsplit("/", 1)[0])
    try:
        containerd.ctr("images", "import", archive)
        cri.wait_image(image)
        cri.wait_ready()
    except BaseException:
        cri.close()
        raise
    return containerd, cri
