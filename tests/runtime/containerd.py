"""Our own containerd process (a Debian binary, never the system service) for one test node.

Three releases are exercised (:data:`RELEASES`): Debian 12's system containerd 1.6, and trixie's
1.7 and sid's 2.1, which ``./run`` unpacks into its package cache (:mod:`cnichain.tools.debcache`).  Each
release runs with its own ``containerd-shim-runc-v2`` and ``ctr``: its directory goes first on
the containerd process's ``PATH`` (containerd looks the shim up there), and ``ctr`` is called by
its full path; ``runc`` is Debian 12's for all three.

Everything containerd owns lives under the run's directory: config, root, state, gRPC socket and
log; the CNI plugin directory and conflist directory are the ones ``cnichain install`` wrote for
this run.  It runs inside the node's holder (see :mod:`holder`), so its fixed paths are private
too.  The CRI plugin uses the locally built busybox image as its sandbox image because no registry
is reachable, and plugins that would touch machine-wide places (``/opt/containerd``, btrfs/zfs/
devmapper/aufs/erofs/blockfile snapshotters, tracing, NRI's ``/var/run/nri`` and ``/etc/nri``,
are disabled, as is CDI (``/etc/cdi``, ``/var/run/cdi``); 2.x's image verifier, which the CRI
needs, looks into a directory under the run's instead of ``/opt/containerd/image-verifier``.
The config is version 2 for 1.x and version 3 (``io.containerd.cri.v1.runtime``/``images``) for 2.x.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from types import ModuleType
from dataclasses import dataclass
from typing import Optional

from cnichain.tools import debcache

from .cri_client import CriClient
from .holder import Holder

LOG_NAME = "containerd.log"

DISABLED = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri",
            "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
            "io.containerd.differ.v1.erofs"]
SYSTEM_BIN_DIR = "/usr/bin"  # Debian 12's containerd 1.6 package


@dataclass(frozen=True)
class Release:
    """One containerd release of the matrix: where its binaries are and what it can run.

    ``cni_version`` is the highest spec version the release's vendored libcni parses results of:
    1.6 and Debian trixie's 1.7 carry libcni 1.1 (no 1.1.0 result type, no STATUS or GC; the
    binary has none of libcni 1.2's GC/STATUS symbols), 2.1 carries libcni 1.3 (1.1.0, STATUS).
    """

    label: str  # the test id, e.g. containerd-2.1
    suite: str  # Debian suite whose unpacked package provides it; "" = the system's binary
    major: int
    cni_version: str

    @property
    def version_prefix(self) -> str:
        return self.label.split("-", 1)[1] + "."

    def bin_dir(self) -> Optional[str]:
        """Directory of this release's containerd, shim and ctr; None when ./run has not unpacked it."""
        return debcache.containerd_bin_dir(self.suite) if self.suite else SYSTEM_BIN_DIR

    def binary(self, name: str) -> str:
        bin_dir = self.bin_dir()
        assert bin_dir is not None, f"{self.label} is not unpacked"
        return os.path.join(bin_dir, name)

    @property
    def runs_status(self) -> bool:
        """containerd 2.1+ execs CNI STATUS on every CRI Status call (for conflists at 1.1.0)."""
        return self.major >= 2


RELEASES = (
    Release("containerd-1.6", "", 1, "1.0.0"),
    Release("containerd-1.7", "trixie", 1, "1.0.0"),
    Release("containerd-2.1", "sid", 2, "1.1.0"),
)


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _common(workdir: str, version: int) -> list[str]:
    q = _toml_str
    return [
        f"version = {version}",
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
    ]


def config_text(release: Release, workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str) -> str:
    """The config for ``release`` on a node whose every path is under ``workdir``."""
    if release.major >= 2:
        return config_v3(workdir, bin_dir, conf_dir, sandbox_image)
    return config_v2(workdir, bin_dir, conf_dir, sandbox_image)


def config_v3(workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str) -> str:
    """containerd 2.x config (version 3): CRI runtime and image sections, CDI off, our CNI dirs."""
    q = _toml_str
    runtime, images, cri = "plugins.'io.containerd.cri.v1.runtime'", "plugins.'io.containerd.cri.v1.images'", \
        "plugins.'io.containerd.grpc.v1.cri'"
    return "\n".join([
        *_common(workdir, 3),
        f"[{cri}]",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "[plugins.'io.containerd.image-verifier.v1.bindir']",
        f"  bin_dir = {q(os.path.join(workdir, 'image-verifier'))}",
        f"[{images}]",
        '  snapshotter = "overlayfs"',
        f"[{images}.pinned_images]",
        f"  sandbox = {q(sandbox_image)}",
        f"[{images}.registry]",
        '  config_path = ""',
        f"[{runtime}]",
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  restrict_oom_score_adj = true",
        "  enable_cdi = false",
        "  cdi_spec_dirs = []",
        f"[{runtime}.cni]",
        f"  bin_dirs = [{q(bin_dir)}]",
        f"  conf_dir = {q(conf_dir)}",
        "  max_conf_num = 1",
        f"[{runtime}.containerd]",
        '  default_runtime_name = "runc"',
        f"[{runtime}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{runtime}.containerd.runtimes.runc.options]",
        '  BinaryName = "runc"',
        "  SystemdCgroup = false",
        "",
    ])


def config_v2(workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str) -> str:
    """containerd 1.6/1.7 config (version 2)."""
    q = _toml_str
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        *_common(workdir, 2),
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

    def __init__(self, release: Release, holder: Holder, workdir: str, bin_dir: str, conf_dir: str,
                 sandbox_image: str):
        self.release = release
        self.holder = holder
        self.workdir = workdir
        self.config = os.path.join(workdir, "containerd.toml")
        self.socket = os.path.join(workdir, "containerd.sock")
        self.log = os.path.join(workdir, LOG_NAME)
        with open(self.config, "w") as fh:
            fh.write(config_text(release, workdir, bin_dir, conf_dir, sandbox_image))
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 30.0) -> None:
        """Start containerd and wait (bounded) until its gRPC socket exists."""
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        with open(self.log, "ab") as log:
            # The release's own directory first: containerd finds containerd-shim-runc-v2 on PATH.
            path = f"{self.release.bin_dir()}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
            self.proc = self.holder.popen([self.release.binary("containerd"), "--config", self.config],
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                          env=dict(os.environ, PATH=path))
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
        proc = subprocess.run([self.release.binary("ctr"), "--address", self.socket, "--namespace", "k8s.io", *args],
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


def log_tail(path: str, lines: int = 40) -> str:
    """The last ``lines`` of a containerd log (CNI errors land there), or a note that there is none."""
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return "(no log)"


def start_with_cri(release: Release, node, cri_api: tuple[ModuleType, ModuleType], archive: str, image: str,
                   bin_dir: str, conf_dir: str) -> tuple["Containerd", CriClient]:
    """``release`` on ``node`` (a tests.runtime.node.Node) with this bin and conf dir, the image
    imported and the CRI reporting ready; the client is closed again if any of that fails.

    The node's conflist is first set to the release's CNI version (see :meth:`Node.set_cni_version`).
    """
    version = subprocess.run([release.binary("containerd"), "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()
    assert len(version) > 2 and version[2].startswith(release.version_prefix), (release, version)
    node.set_cni_version(conf_dir, release.cni_version)
    containerd = Containerd(release, node.holder, node.workdir, bin_dir, conf_dir, sandbox_image=image)
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
