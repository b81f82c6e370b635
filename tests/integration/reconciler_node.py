"""What the reconciler's lab tests share: a node with the bridge + portmap + bandwidth chain, a
client wired to it, pods serving on a host port, and the agent running as the node's reconciler."""

from __future__ import annotations

import copy
import os
import subprocess

from cnichain.agent import running_agent
from cnichain.agent.reconcile import status as rstatus
from cnichain.agent.reconcile.settings import status_path
from cnichain.plugins.bridge.rules import MASQ_TABLE
from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfList

NODE4, CLIENT4 = "192.168.77.1", "192.168.77.2"
LIMITS = {"ingressRate": 80_000_000, "ingressBurst": 800_000, "egressRate": 80_000_000, "egressBurst": 800_000}


def conflist(lab, name: str = "rcnet", macspoofchk: bool = False) -> ConfList:
    data = {
        "cniVersion": "1.0.0", "name": name,
        "plugins": [
            {"type": "bridge", "bridge": "rc0", "isGateway": True, "ipMasq": True, "macspoofchk": macspoofchk,
             "ipam": {"type": "host-local", "subnet": "10.78.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            # The reference's layout (host veth + IFB): the repairs these tests watch are of that state.
            {"type": "bandwidth", "capabilities": {"bandwidth": True}, "layout": "host"},
        ],
    }
    return ConfList.from_dict(isolate_conflist(copy.deepcopy(data), lab.workdir))


class Node:
    """The lab node of the reconciler tests; a context manager, so each test module's fixture is
    ``with Node(lab, make_runtime) as n: yield n``."""

    def __init__(self, lab, make_runtime) -> None:
        self.lab = lab
        self.runtime = make_runtime()
        self.conf = conflist(lab)
        self.client = lab.netns("client")
        lab.wire(self.client, [f"{CLIENT4}/24"], [f"{NODE4}/24"], "cli")
        lab.run(self.client, "ip", "route", "add", "default", "via", NODE4)
        self.servers: list[subprocess.Popen] = []
        self.sock = lab.path("run", "agent.sock")

    @property
    def cache_root(self) -> str:
        return self.runtime.cache_dir

    def pod(self, role: str, port: int) -> tuple[str, Attachment, dict]:
        ns = self.lab.netns(role)
        att = Attachment(f"ctr-{role}", ns, "eth0", capability_args={
            "portMappings": [{"hostPort": port, "containerPort": 80, "protocol": "tcp"},
                             {"hostPort": port, "containerPort": 80, "protocol": "udp"}],
            "bandwidth": dict(LIMITS)})
        result = self.runtime.add(self.conf, att)
        self.servers.append(self.lab.popen(ns, "socat", "TCP-LISTEN:80,fork,reuseaddr", f"SYSTEM:echo {role}",
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.lab.wait_listening(ns, 80)
        return ns, att, result

    def fetch(self, port: int) -> str:
        out = self.lab.run(self.client, "socat", "-T1", "-", f"TCP:{NODE4}:{port},connect-timeout=1",
                           check=False, input="", timeout=10)
        return out.stdout.strip()

    def agent(self, *args: str):
        return running_agent(self.sock, netns=self.lab.node, args=(
            "--pool", "0", "--cache-dir", self.cache_root, "--bin-dir", self.runtime.bin_dirs[0], *args))

    def status(self) -> dict:
        return rstatus.read(status_path(self.sock)) or {}

    def plugin_states(self, att: Attachment) -> dict[str, str]:
        row = (self.status().get("attachments") or {}).get(f"{self.conf.name}/{att.container_id}/{att.ifname}") or {}
        return {p: v.get("state") for p, v in (row.get("plugins") or {}).items()}

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if os.path.exists(self.sock + ".log"):  # shown by pytest when the test failed
            with open(self.sock + ".log", errors="replace") as fh:
                print(fh.read()[-6000:])
        for proc in self.servers:
            proc.kill()
            proc.wait(5)


def masquerade_rules(lab) -> str:
    return lab.run(lab.node, "nft", "list", "table", "inet", MASQ_TABLE, check=False).stdout
