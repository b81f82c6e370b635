#!/usr/bin/env python3
"""A stand-in for Calico's CNI plugin in the lab (tests/integration/test_chained_primaries.py):
the shape of what it builds, not its code.  A routed veth and no bridge: host side ``cali`` + 11
hex with MAC ee:ee:ee:ee:ee:ee, no master, proxy ARP, a /32 scope-link route to the pod; in the pod
a link route to 169.254.1.1 and the default route through it.  Its result lists the host veth
with its name only, as Calico's does.  The pod address comes from the config's ``podIP``.

ADD and DEL only; DEL deletes the host veth (its peer goes with it) and the route.
"""

import hashlib
import json
import os
import subprocess
import sys


def ip(*argv: str, netns: str = "") -> None:
    prefix = ["nsenter", f"--net={netns}"] if netns else []
    subprocess.run(prefix + ["ip", *argv], check=True, capture_output=True, timeout=30)


def main() -> int:
    conf = json.loads(sys.stdin.read())
    command, netns, ifname = os.environ["CNI_COMMAND"], os.environ.get("CNI_NETNS", ""), os.environ["CNI_IFNAME"]
    host = "cali" + hashlib.sha1(os.environ["CNI_CONTAINERID"].encode()).hexdigest()[:11]
    address = conf["podIP"]
    if command == "VERSION":
        print(json.dumps({"cniVersion": "1.0.0", "supportedVersions": ["0.4.0", "1.0.0"]}))
        return 0
    if command == "DEL":
        subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=30)
        return 0
    if command != "ADD":
        return 0
    ip("link", "add", host, "type", "veth", "peer", "name", ifname, "netns", netns)
    ip("link", "set", host, "address", "ee:ee:ee:ee:ee:ee", "up")
    with open(f"/proc/sys/net/ipv4/conf/{host}/proxy_arp", "w") as fh:
        fh.write("1")
    with open("/proc/sys/net/ipv4/ip_forward", "w") as fh:
        fh.write("1")
    ip("route", "add", f"{address}/32", "dev", host, "scope", "link")
    ip("addr", "add", f"{address}/32", "dev", ifname, netns=netns)
    ip("link", "set", ifname, "up", netns=netns)
    ip("route", "add", "169.254.1.1", "dev", ifname, "scope", "link", netns=netns)
    ip("route", "add", "default", "via", "169.254.1.1", "dev", ifname, netns=netns)
    out = subprocess.run(["nsenter", f"--net={netns}", "ip", "-j", "link", "show", ifname], check=True,
                         capture_output=True, text=True, timeout=30)
    mac = json.loads(out.stdout)[0]["address"]
    print(json.dumps({
        "cniVersion": conf["cniVersion"],
        "interfaces": [{"name": host}, {"name": ifname, "mac": mac, "sandbox": netns}],
        "ips": [{"address": f"{address}/32", "interface": 1}],
        "routes": [{"dst": "0.0.0.0/0"}],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
