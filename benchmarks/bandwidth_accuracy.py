"""How close does the bandwidth plugin's shaping come to the configured rate?

Builds a throwaway lab (node namespace, a pod attached with bridge + host-local + bandwidth, and a
client namespace wired to the node), then for each rate runs iperf3 TCP in both directions:

* ingress (into the pod): client -> iperf3 server in the pod, shaped by the TBF on the host veth;
* egress (out of the pod): the same with ``-R``, shaped by the TBF on the pod's eth0 (the default
  layout; ``--layout host`` for the reference's, a TBF on an IFB the host veth redirects to).

iperf3 reports TCP payload (goodput); the TBF counts whole Ethernet frames, so a perfectly
accurate shaper shows goodput = rate x 1448/1514 (-4.4%) with a 1500-byte MTU and TCP timestamps.
The ``wire`` column adds that framing back (an estimate that assumes full-sized segments).

The first seconds are omitted from the statistics (``-O``) so the measurement is the steady-state
rate, not TCP slow start or the initial token bucket.  Everything is deleted afterwards.

    python benchmarks/bandwidth_accuracy.py                       # 1/10/100 Mbit/s, explicit burst
    python benchmarks/bandwidth_accuracy.py --burst containerd    # containerd's burst (2^32-1 bits)
    python benchmarks/bandwidth_accuracy.py --rates 10 --seconds 8 --json

Burst modes: ``explicit`` = max(100 ms of the rate, 100 kbit), a typical hand-written value;
``containerd`` = 2^32-1 bits, what containerd's CRI sends for the kubernetes.io/*-bandwidth
annotations; ``crio`` = 2^35-9 bits (CRI-O).  With the runtime bursts the bucket holds up to
hundreds of MB, so the omitted warm-up must be long enough for it to drain.
Needs root, iproute2 and iperf3.  Runs only inside its own namespaces.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout: cnichain/ links to the top-level packages

from cnichain.node import launchers  # noqa: E402
from cnichain.plugins.bandwidth.config import LAYOUTS  # noqa: E402
from cnichain.tools.lab import Lab, isolate_conflist  # noqa: E402
from cnichain.podstate.runtime import Attachment, ConfList, Runtime  # noqa: E402

POD_SUBNET = "10.77.0.0/24"
POD_GW = "10.77.0.1"
CLIENT_ADDR, NODE_WIRE_ADDR = "10.78.0.2", "10.78.0.1"
# Ethernet + IP + TCP(timestamps) headers around a 1448-byte segment at MTU 1500.
WIRE_FACTOR = 1514 / 1448
REFERENCE_DIR = os.environ.get("CNICHAIN_REFERENCE_DIR", "/usr/lib/cni")


def burst_for(mode: str, rate: int) -> int:
    if mode == "containerd":
        return 2**32 - 1
    if mode == "crio":
        return 2**32 * 8 - 9
    return max(rate // 10, 100_000)


def conflist(layout: str = "auto") -> dict:
    return {
        "cniVersion": "1.0.0",
        "name": "bwbench",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
             "ipam": {"type": "host-local", "subnet": POD_SUBNET}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}, "layout": layout},
        ],
    }


def run(rates_mbit: list[float], mode: str, seconds: int, omit: int, bin_dir: str, layout: str = "auto") -> list[dict]:
    rows = []
    with Lab(prefix="bwbench") as lab:
        client = lab.netns("client")
        lab.wire(client, [f"{CLIENT_ADDR}/24"], [f"{NODE_WIRE_ADDR}/24"], "cli")
        lab.run(client, "ip", "route", "add", POD_SUBNET, "via", NODE_WIRE_ADDR)
        runtime = Runtime([bin_dir, REFERENCE_DIR], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node)
        conf = ConfList.from_dict(isolate_conflist(conflist(layout), lab.workdir))
        for idx, mbit in enumerate(rates_mbit):
            rate = int(mbit * 1_000_000)
            burst = burst_for(mode, rate)
            pod = lab.netns(f"pod{idx}")
            att = Attachment(f"bench{idx}", pod, "eth0", capability_args={"bandwidth": {
                "ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst}})
            result = runtime.add(conf, att)
            pod_ip = result["ips"][0]["address"].split("/")[0]
            try:
                ingress = lab.iperf(pod, client, pod_ip, seconds, omit, reverse=False)
                egress = lab.iperf(pod, client, pod_ip, seconds, omit, reverse=True)
            finally:
                runtime.delete(conf, att)
                lab.delete_netns(pod)
            for direction, measured in (("ingress", ingress), ("egress", egress)):
                rows.append({
                    "direction": direction, "rate_bps": rate, "burst_bits": burst, "measured_bps": measured,
                    "error_pct": (measured - rate) / rate * 100.0,
                    "wire_bps": measured * WIRE_FACTOR,
                    "wire_error_pct": (measured * WIRE_FACTOR - rate) / rate * 100.0,
                })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[1, 10, 100], help="Mbit/s")
    ap.add_argument("--burst", choices=("explicit", "containerd", "crio"), default="explicit")
    ap.add_argument("--seconds", type=int, default=8, help="measured seconds per run")
    ap.add_argument("--omit", type=int, default=2, help="warm-up seconds excluded from the result")
    ap.add_argument("--layout", choices=LAYOUTS, default="auto", help="bandwidth's layout key")
    ap.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not shutil.which("iperf3"):
        print("needs root and iperf3", file=sys.stderr)
        return 2
    bin_dir = tempfile.mkdtemp(prefix="bwbench-bin-")
    try:
        launchers.install(bin_dir)
        rows = run(args.rates, args.burst, args.seconds, args.omit, bin_dir, args.layout)
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"layout: {args.layout}; burst mode: {args.burst}; iperf3 TCP, {args.seconds} s measured after {args.omit} s warm-up")
    print(f"{'direction':<9} {'configured':>12} {'burst':>14} {'goodput':>14} {'error':>8} {'wire':>14} {'error':>8}")
    for r in rows:
        print(f"{r['direction']:<9} {r['rate_bps'] / 1e6:>8.1f} Mb/s {r['burst_bits']:>10} bit "
              f"{r['measured_bps'] / 1e6:>9.3f} Mb/s {r['error_pct']:>+7.1f}% "
              f"{r['wire_bps'] / 1e6:>9.3f} Mb/s {r['wire_error_pct']:>+7.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
