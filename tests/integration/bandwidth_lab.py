"""What bandwidth's lab tests share: running one bandwidth command in the node namespace,
reading tc state and links back with iproute2's JSON, and the bounds a shaped flow must keep."""

from __future__ import annotations

import json
import os

from cnichain.benchmarks.loadflow import FlowReading, bulk_beside_ping
from cnichain.tools.lab import UNDER_RATE_SLACK

# A flow with a ping beside it, as pods use their link.  The bounds are the kernel's to keep on a
# loaded machine; the tight figures are the bench's (benchmarks/shaping.py, docs/plugins.md).
FLOW_SECONDS = 4
FIRST_SECOND_MAX = 1.5  # x the rate: a runtime's "no burst" must not let the first second run free
# The whole flow's goodput: at most 10% over the rate (what a shaper that lets a burst through gets
# wrong) and at most the lab's slack under it -- a loaded machine can only starve a flow, never
# speed it up (CI read 0.885x of a 20 Mbit/s egress twice while its test lanes ran alongside; 0.95x
# quiet).
WHOLE_OVER = 0.10
WHOLE_UNDER = UNDER_RATE_SLACK
PING_P95_MS = 25.0  # generous: a time-bounded queue (10 ms at the rate) plus a frame or two
FLOW_TRIES = 2  # the machine is shared: one flow can meet a descheduled receiver; a wrong shaper is wrong twice


def shaped_as_asked(got: FlowReading, target_bps: int) -> bool:
    """The first second at most 1.5x the rate, the whole flow from 15% under to 10% over it, and at
    least half the pings answered with a p95 under the generous bound."""
    ping = got.rtt_load
    return (got.first_s_bps <= FIRST_SECOND_MAX * target_bps
            and (1 - WHOLE_UNDER) * target_bps <= got.whole_bps <= (1 + WHOLE_OVER) * target_bps
            and 2 * ping.n >= ping.sent and ping.p95_ms is not None and ping.p95_ms <= PING_P95_MS)


def flow_as_asked(server: list[str], client: list[str], server_ip: str, target_bps: int,
                  reverse: bool) -> tuple[bool, list[dict]]:
    """Up to :data:`FLOW_TRIES` flows until one is :func:`shaped_as_asked`; (ok, what each read)."""
    tries = []
    for _ in range(FLOW_TRIES):
        got = bulk_beside_ping(server, client, server_ip, FLOW_SECONDS, reverse)
        ping = got.rtt_load
        tries.append({"first second": round(got.first_s_bps), "whole": round(got.whole_bps),
                      "pings": f"{ping.n}/{ping.sent}", "ping p95 ms": ping.p95_ms})
        if shaped_as_asked(got, target_bps):
            return True, tries
    return False, tries


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
