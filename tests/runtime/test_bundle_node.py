"""End to end: the image installs the tree onto a node without Python or /bin/sh, then containerd's
CRI runs a pod there through the installed plugins.

The node is the harness's throwaway node (tests/runtime/node.py); in its private mount namespace a
tmpfs becomes its own ``/opt``, the interpreter, the standard library, pyenv and the shells are
covered (bind-mounted /dev/null or an empty tmpfs), so nothing there can start Python except the
carried tree.  The image is run with podman exactly as the DaemonSet's init container runs it:
the node's root at ``/host``, ``cnichain node install --host-root /host``, into the node's own
``/opt/cni`` and ``/etc/cni/net.d`` (private to it).  Then containerd, with that bin and conf dir,
runs a pod with a hostPort that a client outside the node reaches, and
StopPodSandbox/RemovePodSandbox leave nothing behind.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from cnichain.node.bundle import layout

from cnichain.tools.containerd_node import ocimage

from . import leftovers, traffic
from .bundlenode import NodeImage, checks_run, hide_python_and_shells, install_with_image, node_dirs, start_cri
from .containerd import Release
from .cri_client import PodSpec, Port
from .node import NODE_IP, Node

pytestmark = [pytest.mark.runtime, pytest.mark.integration]


def test_pod_through_the_image_installed_tree_on_a_node_without_python(
        containerd_release: Release, node_image: NodeImage, cri_api: tuple[ModuleType, ModuleType],
        image_archive: tuple[str, str]) -> None:
    report = node_image.report
    archive, busybox = image_archive
    node = Node(agent_socket="")
    cri = None
    try:
        hide_python_and_shells(node)
        bin_dir, conf_dir = node_dirs(node)
        installed = install_with_image(node, node_image, bin_dir, conf_dir, containerd_release.cni_version)
        assert installed.returncode == 0, installed.stdout + installed.stderr
        assert installed.stdout.count("verified ") == 6
        assert node.node_run("readlink", layout.current_link(layout.DEFAULT_PREFIX)).stdout.strip() == \
            f"versions/{report.tree_id}"
        containerd, cri = start_cri(containerd_release, node, cri_api, archive, busybox, bin_dir, conf_dir)
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
            assert leftovers.everything(checks_run(node)) == []
        except BaseException:
            print(f"containerd log tail:\n{containerd.log_tail()}")
            raise
    finally:
        if cri is not None:
            cri.close()
        node.close()
