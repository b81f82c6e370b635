"""The containerd releases of the runtime matrix, each as our own process for one test node.

Three releases are exercised (:data:`RELEASES`): Debian 12's system containerd 1.6, and trixie's
1.7 and sid's 2.1, which ``./run`` unpacks into its package cache (:mod:`cnichain.tools.debcache`).
The process itself, its config and its private paths are
:mod:`cnichain.tools.containerd_node` (shared with the bench's pods phase); the CNI plugin
directory and conflist directory are the ones ``cnichain install`` wrote for this run.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from types import ModuleType
from typing import Optional

from cnichain.tools import debcache
from cnichain.tools.containerd_node import process
from cnichain.tools.containerd_node.holder import Holder
from cnichain.tools.containerd_node.process import LOG_NAME, log_tail

from .cri_client import CriClient

__all__ = ["LOG_NAME", "RELEASES", "Containerd", "Release", "log_tail", "start_with_cri"]

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


class Containerd(process.Containerd):
    """:class:`cnichain.tools.containerd_node.process.Containerd` for one release of the matrix."""

    def __init__(self, release: Release, holder: Holder, workdir: str, bin_dir: str, conf_dir: str,
                 sandbox_image: str):
        release_bin_dir = release.bin_dir()
        assert release_bin_dir is not None, f"{release.label} is not unpacked"
        super().__init__(release_bin_dir, release.major, holder, workdir, [bin_dir], conf_dir, sandbox_image)
        self.release = release


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
