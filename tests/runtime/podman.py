"""Podman (Debian's 4.3, CNI network backend) on a test node, configured only by our own files.

Podman reads its network setup from ``containers.conf``; ours points ``cni_plugin_dirs`` and
``network_config_dir`` at this run's ``cnichain install`` output, so ``--network cnichain`` runs our
default chain (podman passes ``portMappings`` in camelCase, unlike containerd).  Storage root,
run root and temporary directory live on the node's private tmpfs, and every podman command runs
inside the node's holder, so conmon, the pod netns and libcni's cache are private to the run.
Trials on these machines showed podman needs ``--runtime runc`` and explicit ulimits there, so
both are always given (``./run`` installs runc, not crun).
"""

from __future__ import annotations

import json
import subprocess

from .node import Node

ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


class Podman:
    """``podman`` with this run's containers.conf, storage and state, run inside the node."""

    def __init__(self, node: Node):
        self.node = node
        self.root = "/var/lib/containers/e2e-root"  # on the holder's private tmpfs
        self.runroot = "/run/containers/e2e-runroot"
        self.tmpdir = "/run/libpod"
        self.conf = node.lab.path("podman", "containers.conf")
        self.storage_conf = node.lab.path("podman", "storage.conf")
        with open(self.conf, "w") as fh:
            fh.write("\n".join([
                "[containers]",
                'apparmor_profile = "unconfined"',  # CI kernels may have AppArmor without the parser
                f"default_ulimits = {_toml_list(['nofile=1024:1024', 'nproc=1024:1024'])}",
                "[network]",
                'network_backend = "cni"',
                f"cni_plugin_dirs = {_toml_list([node.bin_dir])}",
                f"network_config_dir = {json.dumps(node.conf_dir)}",
                'default_network = "cnichain"',
                "[engine]",
                'runtime = "runc"',
                'cgroup_manager = "cgroupfs"',
                'events_logger = "file"',
                f"events_logfile_path = {json.dumps(node.lab.path('podman', 'events.log'))}",
                f"tmp_dir = {json.dumps(self.tmpdir)}",
                "",
            ]))
        with open(self.storage_conf, "w") as fh:
            fh.write("\n".join([
                "[storage]",
                'driver = "overlay"',
                f"graphroot = {json.dumps(self.root)}",
                f"runroot = {json.dumps(self.runroot)}",
                "",
            ]))

    def argv(self, *args: str) -> list[str]:
        return ["env", f"CONTAINERS_CONF={self.conf}", f"CONTAINERS_STORAGE_CONF={self.storage_conf}",
                "podman", "--root", self.root, "--runroot", self.runroot, "--runtime", "runc",
                "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--network-backend", "cni",
                "--tmpdir", self.tmpdir, *args]

    def __call__(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        assert self.node.holder is not None
        return self.node.holder.run(self.argv(*args), check=check, timeout=timeout)

    def load(self, archive: str, name: str) -> None:
        """Load the OCI archive and make sure it carries ``name``."""
        self("load", "-q", "-i", archive)
        if self("image", "exists", name, check=False).returncode != 0:
            images = json.loads(self("images", "--format", "json").stdout or "[]")
            self("tag", images[0]["Id"], name)

    def run(self, name: str, image: str, ports: list[str], command: list[str]) -> int:
        """``podman run -d`` on the cnichain network; the container's pid (for its netns)."""
        publish = [a for p in ports for a in ("-p", p)]
        self("run", "-d", "--name", name, "--network", "cnichain", "--cgroup-parent",
             f"{self.node.cgroup_parent}/podman", *ULIMITS, *publish, image, *command)
        state = json.loads(self("inspect", "--format", "json", name).stdout)[0]["State"]
        return int(state["Pid"])
