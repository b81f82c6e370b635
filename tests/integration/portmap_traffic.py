"""What portmap's lab tests share: the node and client addresses, the bridge + portmap conflist,
a dual-stack echo server and its client, and a read-back of our nftables table."""

from __future__ import annotations

import json
import subprocess
import time

from cnichain.plugins.portmap import names, rebuild as slow
from cnichain.podstate.runtime import ConfList

NODE4, NODE6, CLIENT4, CLIENT6 = "192.168.77.1", "fd77::1", "192.168.77.2", "fd77::2"


def bridge_conflist(lab, name="pmnet", portmap=None, version="1.0.0", dual=True, hairpin=True) -> ConfList:
    ranges = [[{"subnet": "10.77.0.0/24"}]] + ([[{"subnet": "fd00:77::/64"}]] if dual else [])
    routes = [{"dst": "0.0.0.0/0"}] + ([{"dst": "::/0"}] if dual else [])
    return ConfList.from_dict({
        "cniVersion": version, "name": name,
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "hairpinMode": hairpin,
             "ipam": {"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": lab.path("ipam")}},
            dict({"type": "portmap", "capabilities": {"portMappings": True}}, **(portmap or {})),
        ],
    })


def serve(lab, ns, port, text, proto="TCP"):
    """A dual-stack echo server inside ``ns``; returns the Popen (caller kills it)."""
    if proto == "UDP":
        argv = ["socat", f"UDP6-RECVFROM:{port},fork,reuseaddr,ipv6only=0", f"SYSTEM:echo {text}"]
    else:
        argv = ["socat", f"{proto}6-LISTEN:{port},fork,reuseaddr,ipv6only=0", f"SYSTEM:echo {text}"]
    proc = lab.popen(ns, *argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Wait (bounded) until the socket is bound: on a loaded node socat can take longer to start
    # than a fixed pause, and a fetch sent before that finds nothing listening.
    flag = {"UDP": "-uln", "SCTP": "-Sln"}.get(proto, "-tln")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and proc.poll() is None:
        if lab.run(ns, "ss", "-H", flag, f"sport = :{port}", check=False).stdout.strip():
            break
        time.sleep(0.05)
    return proc


def fetch(lab, ns, addr, port, proto="TCP") -> str:
    host = f"[{addr}]" if ":" in addr else addr
    if proto == "UDP":
        # UDP has no retransmission: the first datagram can be lost while a fresh IPv6 gateway
        # address is still tentative, so ask a few times (bounded) before calling it unanswered.
        target = f"UDP:{host}:{port}"
        for _ in range(4):
            out = lab.run(ns, "socat", "-T1", "-", target, check=False, input="ping\n", timeout=10)
            if out.stdout.strip():
                break
    else:
        out = lab.run(ns, "socat", "-T2", "-", f"{proto}:{host}:{port},connect-timeout=2", check=False, input="", timeout=10)
    return out.stdout.strip()


def wait_no_tentative(lab, ns, timeout: float = 5.0) -> None:
    """Wait (bounded) until no IPv6 address in ``ns`` is still tentative (duplicate detection)."""
    deadline = time.monotonic() + timeout
    while lab.run(ns, "ip", "-6", "addr", "show", "tentative").stdout.strip() and time.monotonic() < deadline:
        time.sleep(0.1)


def pod_ips(result: dict) -> dict[int, str]:
    out = {}
    for ip in result.get("ips", []):
        addr = ip["address"].split("/")[0]
        out.setdefault(6 if ":" in addr else 4, addr)
    return out


def table(lab):
    out = lab.run(lab.node, "nft", "-j", "list", "table", "inet", names.TABLE, check=False)
    if out.returncode != 0:
        return slow.Snapshot()
    return slow.Snapshot.from_json(json.loads(out.stdout)["nftables"])
