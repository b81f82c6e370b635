"""What bandwidth's lab tests share: running one bandwidth command in the node namespace, and
reading tc state and links back with iproute2's JSON."""

from __future__ import annotations

import json
import os


def exec_bw(lab, bin_dir, command, conf, cid="ctr1", netns="", ifname="eth0"):
    """Run one bandwidth command as a process in the node namespace; (exit code, JSON or None)."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_PATH": bin_dir, "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    proc = lab.run(lab.node, os.path.join(bin_dir, "bandwidth"), input=json.dumps(conf), env=env,
                   check=False, timeout=60)
    out = proc.stdout.strip()
    return proc.returncode, (json.loads(out) if out else None)


def tc(lab, *args) -> list:
    out = lab.run(lab.node, "tc", "-j", *args).stdout.strip()
    return json.loads(out) if out else []


def qdiscs(lab, dev) -> list:
    return tc(lab, "qdisc", "show", "dev", dev)


def root_tbf(lab, dev):
    return next((q for q in qdiscs(lab, dev) if q["kind"] == "tbf" and q.get("root")), None)


def link(lab, name):
    proc = lab.run(lab.node, "ip", "-j", "-d", "link", "show", name, check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 and proc.stdout.strip() else None


def host_veth(result: dict) -> str:
    names = [i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"].startswith("veth")]
    assert len(names) == 1, result
    return names[0]
