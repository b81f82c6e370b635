"""One throwaway Kubernetes-like node: node and client namespaces, private mounts, our plugins.

The node namespace plays the host a runtime runs on; the client namespace plays a machine outside
the node, reaching it over a veth link, so hostPort traffic is real routed traffic that enters
through the node's PREROUTING, exactly as from another machine.  Plugins are installed by
``cnichain install`` (the real installer, default conflist) into this run's directories, with the
reference ``loopback`` next to them because runtimes always call it for the pod's ``lo``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Optional

from cnichain.common import atomic
from cnichain.tools.lab import Lab

from cnichain.tools.containerd_node import reaper
from cnichain.tools.containerd_node.holder import Holder

NODE_IP = "203.0.113.1"
CLIENT_IP = "203.0.113.2"
NODE_IP2 = "198.51.100.1"  # a second node address on the same link, for hostIP checks
CLIENT_IP2 = "198.51.100.2"
POD_SUBNET = "10.22.0.0/16"  # the default conflist's range
CONFLIST = "cnichain-default"
NETWORK = "cnichain"  # the default conflist's network name
REFERENCE_DIR = os.environ.get("CNICHAIN_REFERENCE_DIR", "/usr/lib/cni")


def cnichain_cli() -> list[str]:
    """The installed ``cnichain`` command of this environment (the venv's entry point)."""
    exe = os.path.join(os.path.dirname(sys.executable), "cnichain")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "cnichain.cli.app"]


class Node:
    """Namespaces, holder, installed plugins and teardown of everything one test created."""

    def __init__(self, agent_socket: str = ""):
        self.lab = Lab(prefix="cnirt")
        self.run_id = self.lab.run_id
        self.workdir = self.lab.workdir
        self.cgroup_parent = f"/cnirt-{self.run_id}"
        self.holder: Optional[Holder] = None
        self.node_netns_id = ""
        try:
            self._build(agent_socket)
        except BaseException:
            self.close()
            raise

    def _build(self, agent_socket: str) -> None:
        self.client = self.lab.netns("client")
        self.lab.wire(self.client, [f"{CLIENT_IP}/24", f"{CLIENT_IP2}/24"], [f"{NODE_IP}/24", f"{NODE_IP2}/24"],
                      "client")
        self.lab.run(self.client, "ip", "route", "add", POD_SUBNET, "via", NODE_IP)
        self.node_netns_id = reaper.netns_id(self.lab.node)
        self.holder = Holder(self.lab.node)
        self.holder.start()
        self.bin_dir = self.lab.path("bin", "x").rsplit("/", 1)[0]
        self.conf_dir = self.lab.path("net.d", "x").rsplit("/", 1)[0]
        env = dict(os.environ, CNICHAIN_AGENT_SOCKET=agent_socket)
        subprocess.run([*cnichain_cli(), "install", "--bin-dir", self.bin_dir, "--conf-dir", self.conf_dir,
                        "--conflist", CONFLIST], check=True, capture_output=True, text=True, env=env)
        shutil.copy2(os.path.join(REFERENCE_DIR, "loopback"), os.path.join(self.bin_dir, "loopback"))

    @property
    def conflist_path(self) -> str:
        return os.path.join(self.conf_dir, CONFLIST + ".conflist")

    def declare_capabilities(self, names: list[str]) -> None:
        """Rewrite this run's conflist copy so every plugin declares ``names`` as capabilities.

        Only the installed copy changes, never the shipped file; call before the runtime starts.
        """
        with open(self.conflist_path) as fh:
            conflist = json.load(fh)
        for plugin in conflist["plugins"]:
            plugin.setdefault("capabilities", {}).update({name: True for name in names})
        with open(self.conflist_path, "w") as fh:
            json.dump(conflist, fh, indent=2)

    def set_cni_version(self, conf_dir: str, version: str) -> None:
        """Set the ``cniVersion`` of every conflist in ``conf_dir`` (the path as the node sees it).

        The runtime matrix runs the shipped conflist at the highest version each runtime parses.
        Each file is written to a temporary name in the same directory and renamed, so a running
        containerd's watcher sees it (it ignores Create events).
        """
        assert self.holder is not None
        directory = f"/proc/{self.holder.pid}/root{conf_dir}"
        for name in sorted(os.listdir(directory)):
            if not name.endswith(".conflist"):
                continue
            path = os.path.join(directory, name)
            with open(path) as fh:
                conflist = json.load(fh)
            if conflist.get("cniVersion") == version:
                continue
            conflist["cniVersion"] = version
            atomic.write_file(path, json.dumps(conflist, indent=2).encode(), 0o644)

    # -- running things ---------------------------------------------------------------------------
    def node_run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run in the node: its network namespace and its private mounts."""
        assert self.holder is not None
        return self.holder.run(list(argv), check=check, timeout=timeout)

    def client_run(self, *argv: str, check: bool = True, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        return self.lab.run(self.client, *argv, check=check, timeout=timeout, **kw)

    def client_argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", os.path.basename(self.client), *argv]

    # -- teardown ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill every process of the run, drop its mounts, cgroups and namespaces; pass or fail."""
        reaper.teardown(self.holder, self.node_netns_id, self.cgroup_parent)
        self.lab.close()
