"""A harness node with Python hidden, our image in a private podman storage, and the helpers the
bundle end-to-end tests share: install through the image, start containerd, run the agent pod.

In the node's private mount namespace a tmpfs becomes its own ``/opt``, and the interpreter, the
standard library, pyenv and the shells are covered (an empty tmpfs or /dev/null), so nothing there
can start Python except the carried tree.  The image runs with podman inside the node exactly as
the DaemonSet's containers run it: the installer with the node's root at ``/host``; the agent with
the node's network and the machine's pid namespace (``--network host --pid host``, hostPID in the
manifests), privileged, and the socket directory bind-mounted from the node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Iterator

import pytest

from cnichain.agent.control import fetch_metrics
from cnichain.node.bundle import image, layout
from cnichain.node.launchers import conflists_dir
from tests import required

from .containerd import Containerd, Release, start_with_cri
from .cri_client import CriClient
from .node import REFERENCE_DIR, Node

# podman on these machines needs runc and explicit ulimits (see podman.py)
BASE_OPTS = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
RUN_OPTS = [*BASE_OPTS, "--network", "none"]
NODE_BIN_DIR = layout.bin_dir(layout.DEFAULT_PREFIX)  # /opt/cni/bin, on the node's private /opt
NODE_CONF_DIR = "/etc/cni/net.d"
AGENT_SOCKET = "/run/cnichain/agent.sock"  # the default the installer bakes in; a private tmpfs in the node
# Covered with an empty tmpfs (directories) or /dev/null (files) inside the node only.
HIDDEN_DIRS = ("/usr/lib/python3.11", "/usr/lib/python3", "/usr/local/lib/python3.11", "/root/.pyenv")
HIDDEN_FILES = ("/usr/bin/python3.11", "/usr/bin/dash", "/usr/bin/bash")
HIDDEN_LIBS = ("libpython3", "libnftables.so")


@dataclass
class NodeImage:
    report: image.ImageReport
    podman: list[str]  # podman argv with the private storage
    out: str  # the OUT directory the image's tree was built in


def build_node_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeImage]:
    """The cnichain image in a private podman storage (tree built once); removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    required.command("podman")
    required.command("patchelf")
    from cnichain.node.bundle.build import build

    out = str(tmp_path_factory.mktemp("e2e-tree"))
    storage = tempfile.mkdtemp(prefix="cnie2e-")  # podman: runroot path at most 50 characters
    podman = image.podman_argv(storage)
    try:
        if subprocess.run([*podman, "info"], capture_output=True, timeout=120).returncode != 0:
            required.missing("a working podman ('podman info' failed)")
        build(out, layout.DEFAULT_PREFIX)
        report = image.build_image(os.path.join(out, "cnichain.tar"), tag="localhost/cnichain:e2e",
                                   storage=storage, built=out)
        yield NodeImage(report, podman, out)
    finally:
        subprocess.run([*podman, "system", "reset", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(storage, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


def hidden_libraries() -> list[str]:
    """The machine's libpython and libnftables (real files, not their symlinks)."""
    found = set()
    for lib_dir in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if os.path.isdir(lib_dir):
            for name in os.listdir(lib_dir):
                if name.startswith(HIDDEN_LIBS) and ".so" in name:
                    found.add(os.path.realpath(os.path.join(lib_dir, name)))
    return sorted(p for p in found if os.path.isfile(p))


def hide_python_and_shells(node: Node) -> None:
    """Python, libpython, libnftables, this test run's venv, the stdlib and the shells: gone in the node."""
    node.node_run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", "/opt")
    for path in (*HIDDEN_DIRS, sys.prefix):  # sys.prefix: the venv running these tests
        if os.path.isdir(path):
            node.node_run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", path)
    for path in (*HIDDEN_FILES, *hidden_libraries()):
        if os.path.isfile(path):
            node.node_run("mount", "--bind", "/dev/null", path)
    for probe in (["/usr/bin/python3", "-c", "pass"], ["/bin/sh", "-c", "true"]):
        assert node.node_run(*probe, check=False).returncode != 0, f"{probe[0]} still runs on the node"


def node_dirs(node: Node) -> tuple[str, str]:
    """The node's own, empty ``/opt/cni/bin`` and ``/etc/cni/net.d`` (the defaults a node has).

    Both are private to the node: ``/opt`` is its tmpfs (call after :func:`hide_python_and_shells`)
    and ``/etc/cni/net.d`` is covered with a tmpfs inside its mount namespace here (the directory
    ships with Debian's podman; the machine's own is never written).  Anything that writes there
    must run inside the node (``node.node_run``), never from the test process.
    """
    assert node.node_run("findmnt", "-n", "-o", "FSTYPE", "/opt").stdout.strip() == "tmpfs"
    if not os.path.isdir(NODE_CONF_DIR):
        required.missing(f"{NODE_CONF_DIR} (it comes with Debian's podman)")
    node.node_run("mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", NODE_CONF_DIR)
    return NODE_BIN_DIR, NODE_CONF_DIR


CONFLIST_DIR = "/opt/cnichain-conflist"  # on the node's private /opt: a conflist at the runtime's version


def install_with_image(node: Node, img: NodeImage, bin_dir: str, conf_dir: str, cni_version: str,
                       tree_out: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """``cnichain node install`` as the init container runs it (the node's root at /host).

    The conflist is the shipped default at ``cni_version`` (the highest the runtime under test
    parses), given to the installer as a file on the node, as an operator's own conflist is: the
    installer itself writes it, so a later install (an upgrade) owns and may replace it.
    ``tree_out``: an OUT directory of another tree, bind-mounted over the image's own prefix, so
    the container runs that tree's installer (its entrypoint reaches the CLI through ``current``).
    """
    assert node.holder is not None
    with open(os.path.join(conflists_dir(), "cnichain-default.conflist")) as fh:
        conflist = json.load(fh)
    conflist["cniVersion"] = cni_version
    on_node = f"/proc/{node.holder.pid}/root{CONFLIST_DIR}"
    os.makedirs(on_node, exist_ok=True)
    with open(os.path.join(on_node, "cnichain-default.conflist"), "w") as fh:
        json.dump(conflist, fh, indent=2)
    binds = ["-v", f"{layout.under(tree_out, layout.DEFAULT_PREFIX)}:{layout.DEFAULT_PREFIX}:ro"] if tree_out else []
    return node.node_run(*img.podman, "run", "--rm", *RUN_OPTS, "-v", "/:/host", *binds, img.report.tag,
                         "node", "install", "--host-root", "/host", "--bin-dir", bin_dir, "--conf-dir", conf_dir,
                         "--conflist", f"/host{CONFLIST_DIR}/cnichain-default.conflist", check=False, timeout=timeout)


def start_cri(release: Release, node: Node, cri_api: tuple[ModuleType, ModuleType], archive: str, busybox: str, bin_dir: str,
              conf_dir: str) -> tuple[Containerd, CriClient]:
    """``release`` on the node with this bin and conf dir (plus the reference loopback), image imported."""
    node.node_run("cp", os.path.join(REFERENCE_DIR, "loopback"), os.path.join(bin_dir, "loopback"))
    return start_with_cri(release, node, cri_api, archive, busybox, bin_dir, conf_dir)


class AgentPod:
    """The image's ``cnichain agent`` as the DaemonSet's agent container, run by podman in the node."""

    def __init__(self, node: Node, img: NodeImage):
        self.node, self.img = node, img
        self.name = f"cnichain-agent-{node.run_id}"
        assert node.holder is not None
        # The node's private /run/cnichain, as the test process reaches it (connect() through the
        # holder's root: no mount of the node is needed outside it).
        self.metrics_socket = f"/proc/{node.holder.pid}/root{AGENT_SOCKET}.metrics"

    def start(self, timeout: float = 60.0) -> None:
        self.node.node_run(*self.img.podman, "run", "-d", "--name", self.name, *BASE_OPTS, "--privileged",
                           "--network", "host", "--pid", "host", "--cgroup-parent", f"{self.node.cgroup_parent}/agent",
                           "-v", "/run/cnichain:/run/cnichain", self.img.report.tag,
                           "agent", "--socket", AGENT_SOCKET, "--pool", "2", timeout=120)
        deadline = time.monotonic() + timeout
        while True:  # bounded: until its metrics endpoint answers, as the readiness probe asks
            try:
                fetch_metrics(self.metrics_socket, timeout=2.0)
                return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the agent pod did not become ready: {exc}\n{self.logs()}") from exc
            time.sleep(0.2)

    def metrics(self) -> str:
        return fetch_metrics(self.metrics_socket)

    def logs(self) -> str:
        out = self.node.node_run(*self.img.podman, "logs", self.name, check=False)
        return (out.stdout + out.stderr)[-3000:]

    def stop(self) -> None:
        """SIGTERM (the agent drains), then remove the container; its socket must be gone after."""
        self.node.node_run(*self.img.podman, "stop", "-t", "20", self.name, check=False, timeout=60)
        self.node.node_run(*self.img.podman, "rm", "-f", self.name, check=False, timeout=60)


def checks_run(node: Node):
    """A runner for :mod:`leftovers` on this node: ``nft`` runs in the node's network namespace but
    outside its mount namespace (where libnftables is hidden), everything else inside the node."""

    def run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        if argv and argv[0] == "nft":
            proc = subprocess.run(["nsenter", f"--net={node.lab.node}", "--", *argv], capture_output=True, text=True,
                                  timeout=timeout)
            if check and proc.returncode != 0:
                raise RuntimeError(f"{list(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
            return proc
        return node.node_run(*argv, check=check, timeout=timeout)

    return run
