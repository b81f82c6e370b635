"""End to end: the image installs the tree onto a node without Python or /bin/sh, then containerd's
CRI runs a pod there through the installed plugins.

The node is the harness's throwaway node (tests/runtime/node.py); in its private mount namespace a
tmpfs becomes its own ``/opt``, the interpreter, the standard library, pyenv and the shells are
covered (bind-mounted /dev/null or an empty tmpfs), so nothing there can start Python except the
carried tree.  The image is run with podman exactly as the DaemonSet's init container runs it:
the node's root at ``/host``, ``cnichain node install --host-root /host``.  Then containerd, with
this bin and conf dir, runs a pod with a hostPort that a client outside the node reaches, and
StopPodSandbox/RemovePodSandbox leave nothing behind.
"""

from __future__ import annotations

import os
import shutil
from types import ModuleType

import pytest

from cnichain.cli.bundle import layout

from . import leftovers, ocimage, traffic
from .bundlenode import NodeImage, RUN_OPTS, hide_python_and_shells
from .containerd import Containerd
from .cri_client import CriClient, PodSpec, Port
from .node import NODE_IP, REFERENCE_DIR, Node

pytestmark = [pytest.mark.runtime, pytest.mark.integration]


def test_pod_through_the_image_installed_tree_on_a_node_without_python(
        node_image: NodeImage, cri_api: tuple[ModuleType, ModuleType],
        image_archive: tuple[str, str]) -> None:
    report, podman = node_image.report, node_image.podman
    archive, busybox = image_archive
    node = Node(agent_socket="")
    cri = None
    try:
        bin_dir = node.lab.path("bundle-bin", "x").rsplit("/", 1)[0]
        conf_dir = node.lab.path("bundle-net.d", "x").rsplit("/", 1)[0]
        hide_python_and_shells(node)
        installed = node.node_run(*podman, "run", "--rm", *RUN_OPTS, "-v", "/:/host", report.tag, "node", "install",
                                  "--host-root", "/host", "--bin-dir", bin_dir, "--conf-dir", conf_dir,
                                  "--conflist", "cnichain-default", check=False, timeout=300)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert installed.stdout.count("verified ") == 6
        assert node.node_run("readlink", layout.current_link(layout.DEFAULT_PREFIX)).stdout.strip() == \
            f"versions/{report.tree_id}"
        shutil.copy2(os.path.join(REFERENCE_DIR, "loopback"), os.path.join(bin_dir, "loopback"))
        containerd = Containerd(node.holder, node.workdir, bin_dir, conf_dir, sandbox_image=busybox)
        containerd.start()
        pb2, pb2_grpc = cri_api
        cri = CriClient(pb2, pb2_grpc, containerd.socket, node.cgroup_parent, node.lab.path("pods", "x").rsplit("/", 1)[0])
        containerd.ctr("images", "import", archive)
        cri.wait_image(busybox)
        cri.wait_ready()
        try:
            pod = cri.run_pod(PodSpec(name="web", ports=[Port(container_port=80, host_port=18091)]))
            assert pod.ip.startswith("10.22.")
            container = cri.start_container(pod, "httpd", busybox, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
            assert cri.container_state(container) == cri.pb.CONTAINER_RUNNING
            traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
            reply = traffic.http_get(node.client_argv(), NODE_IP, 18091)
            assert b"200 OK" in reply and ocimage.PAGE in reply, reply
            cri.stop_pod(pod.id)
            cri.remove_pod(pod.id)
            assert leftovers.everything(node.node_run) == []
        except BaseException:
            print(f"containerd log tail:\n{containerd.log_tail()}")
            raise
    finally:
        if cri is not None:
            cri.close()
        node.close()
