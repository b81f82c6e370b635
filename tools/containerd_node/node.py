"""One throwaway containerd node in a given network namespace: up, pods through its CRI, torn down.

The caller gives the node's network namespace, its directory, containerd's binaries, the CNI
plugin directories (in lookup order; the runtime calls ``loopback`` for every pod's ``lo``, so one
of them must have it), the conflist and the environment containerd hands to the plugins.  The
node gets a private mount namespace (:mod:`holder`), containerd with every path under the
node's directory, the busybox image as its sandbox image, and a cgroup parent of its own;
:meth:`CriNode.close` kills whatever the node started, pass or fail.
"""

from __future__ import annotations

import json
import os
from typing import Optional

from cnichain.tools.containerd_node import ocimage, reaper
from cnichain.tools.containerd_node.cri_pods import CriPods
from cnichain.tools.containerd_node.holder import Holder
from cnichain.tools.containerd_node.process import Containerd


def major_of(version: str) -> int:
    """2 for ``2.1.9+unknown``; 0 when the text has no leading number."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


class CriNode:
    """A containerd node ready for pods: :attr:`cri` answers, NetworkReady is true."""

    def __init__(self, netns: str, workdir: str, containerd_bin_dir: str, cni_bin_dirs: list[str], conflist: dict,
                 env: dict[str, str], cgroup_parent: str, image_archive: str = "") -> None:
        self.netns = netns
        self.workdir = workdir
        self.cgroup_parent = cgroup_parent
        self.holder: Optional[Holder] = None
        self.containerd: Optional[Containerd] = None
        self.netns_id = reaper.netns_id(netns)
        self.conf_dir = os.path.join(workdir, "net.d")
        os.makedirs(self.conf_dir, mode=0o700, exist_ok=True)
        with open(os.path.join(self.conf_dir, f"10-{conflist.get('name', 'pods')}.conflist"), "w") as fh:
            json.dump(conflist, fh, indent=2)
        self.image_archive = image_archive or os.path.join(workdir, "busybox-oci.tar")
        self.containerd_bin_dir = containerd_bin_dir
        self.cni_bin_dirs = cni_bin_dirs
        self.env = env
        self.cri: Optional[CriPods] = None

    def start(self, ready_timeout: float = 60.0) -> str:
        """Start everything; containerd's version.  On failure the caller still calls :meth:`close`."""
        if not os.path.isfile(self.image_archive):
            ocimage.write_archive(self.image_archive)
        self.holder = Holder(self.netns)
        self.holder.start()
        containerd = Containerd(self.containerd_bin_dir, 2, self.holder, self.workdir, self.cni_bin_dirs,
                                self.conf_dir, ocimage.IMAGE_NAME, self.env)
        version = containerd.version()
        if major_of(version) < 2:
            raise RuntimeError(f"containerd {version or '(unknown version)'} in {self.containerd_bin_dir}: "
                               "a node with several CNI bin dirs needs containerd 2.x")
        self.containerd = containerd
        containerd.start()
        self.containerd.ctr("images", "import", self.image_archive)
        self.cri = CriPods(self.containerd.socket, self.cgroup_parent, os.path.join(self.workdir, "pod-logs"))
        self.cri.wait_ready(ocimage.IMAGE_NAME, timeout=ready_timeout)
        return version

    def log_tail(self, lines: int = 20) -> str:
        return self.containerd.log_tail(lines) if self.containerd else "(containerd not started)"

    def close(self) -> None:
        """Kill the node's processes, drop its mounts and cgroups (the namespace is the caller's)."""
        reaper.teardown(self.holder, self.netns_id, self.cgroup_parent)
        self.holder = None
