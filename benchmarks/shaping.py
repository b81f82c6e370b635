"""Does a shaped pod get its rate from the first byte, and what does a bulk flow do to its latency?

bandwidth_accuracy.py measures the steady state; this bench measures what a pod sees.  For each
implementation (ours and the reference 1.9.1, in the same run), each runtime burst (containerd's
2^32-1 bits, CRI-O's (2^32-1)*8-1) and each rate, it attaches a fresh pod (bridge + host-local +
bandwidth, ingress and egress at the rate with that burst) and, per direction:

* runs one bulk iperf3 TCP flow with no ``-O`` omit and reads the *receiver's* 1 s intervals: the
  rate over the first second (the token bucket's initial burst shows here) and over the whole flow;
* pings the pod every 50 ms from the same peer while the flow runs: the RTT under load, p50/p95,
  next to an idle RTT taken before any flow (a queue bounded by bytes, not time, shows here);
* records the qdiscs as installed (``tc qdisc show`` of the node and the pod, one line each).

Into the pod the peer sends (TBF on the host side); out of the pod the pod sends (``-R``).  The
rates are goodput (TCP payload), so a perfect shaper reads about 0.95 of the rate at MTU 1500.
Each pod is fresh, so every flow starts against a full bucket as a new pod's first flow does.
Everything lives in its own namespaces (tools/lab.py) and is deleted afterwards, also on failure.

    python benchmarks/shaping.py                       # both sides, 1/10/100 Mbit/s, both bursts
    python benchmarks/shaping.py --quick               # smoke: 10 Mbit/s, containerd, 2 s flows
    python benchmarks/shaping.py --seconds 20 --json   # the JSON report on stdout
    python benchmarks/shaping.py --save                # also write benchmarks/results/shaping.json

Needs root, iproute2, iputils ping and iperf3; the reference from ``--reference-dir`` (default
``debian:sid``, the 1.9.1 that ``./run`` unpacks; see tools/debcache.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout: cnichain/ links to the top-level packages

from cnichain.benchmarks.loadflow import (PING_INTERVAL, ReadingError, bulk_beside_ping,  # noqa: E402
                                          ping_cell)
from cnichain.node import launchers  # noqa: E402
from cnichain.podstate.runtime import Attachment, ConfList, Runtime  # noqa: E402
from cnichain.tools import debcache  # noqa: E402
from cnichain.tools.lab import Lab, isolate_conflist  # noqa: E402

SCHEMA = "cnichain-shaping/1"
RESULTS = os.path.join(HERE, "results", "shaping.json")
# The bursts the runtimes pass with every kubernetes.io/*-bandwidth annotation (the kubelet has none).
BURSTS = {"containerd": 2**32 - 1, "crio": (2**32 - 1) * 8 - 1}
IMPLS = ("ours", "reference")
DIRECTIONS = ("ingress", "egress")  # into the pod, out of the pod
CLIENT_ADDR, NODE_WIRE_ADDR = "10.78.0.2", "10.78.0.1"
# One network per implementation, so the two bridges and their IPAM never meet.
NETWORKS = {"ours": ("shape-ours", "cni0", "10.77.0.0/24"), "reference": ("shape-ref", "cni1", "10.79.0.0/24")}
IDLE_PINGS = 20
IPERF_PORT = 5201


# -- one pod -----------------------------------------------------------------------------------------

def conflist(impl: str) -> dict:
    name, bridge, subnet = NETWORKS[impl]
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "plugins": [
            {"type": "bridge", "bridge": bridge, "isGateway": True, "isDefaultGateway": True,
             "ipam": {"type": "host-local", "subnet": subnet}},
            {"type": "bandwidth", "capabilities": {"bandwidth": True}},
        ],
    }


def qdisc_lines(lab: Lab, ns: str, where: str) -> list[str]:
    """Every qdisc in ``ns`` other than a device's default ``noqueue``, one line each."""
    out = lab.run(ns, "tc", "qdisc", "show", check=False).stdout
    return [f"{where}: {line.strip()}" for line in out.splitlines() if line.strip() and " noqueue " not in line]


def flow(lab: Lab, pod: str, client: str, pod_ip: str, seconds: int, reverse: bool) -> dict:
    """One bulk TCP flow between the peer and the pod with a ping beside it; the row's readings."""
    got = bulk_beside_ping(lab.argv(pod), lab.argv(client), pod_ip, seconds, reverse, port=IPERF_PORT)
    return {"first_s_bps": got.first_s_bps, "whole_bps": got.whole_bps, "intervals_bps": got.intervals_bps,
            "rtt_load": got.rtt_load.as_dict()}


def measure_pod(lab: Lab, runtime: Runtime, conf: ConfList, client: str, impl: str, idx: int, rate: int,
                burst_mode: str, seconds: int) -> list[dict]:
    """Attach one pod shaped at ``rate`` with the runtime's burst, measure both directions, detach."""
    burst = BURSTS[burst_mode]
    base: dict[str, Any] = {"impl": impl, "burst_mode": burst_mode, "burst_bits": burst, "rate_bps": rate}
    pod = lab.netns(f"{impl[:3]}{idx}")
    att = Attachment(f"shape{impl[:3]}{idx}", pod, "eth0", capability_args={"bandwidth": {
        "ingressRate": rate, "ingressBurst": burst, "egressRate": rate, "egressBurst": burst}})
    try:
        try:
            result = runtime.add(conf, att)
        except Exception as exc:  # a refusal is a finding of the row, not the end of the run
            return [dict(base, direction=d, error=f"ADD failed: {exc}") for d in DIRECTIONS]
        try:
            pod_ip = result["ips"][0]["address"].split("/")[0]
            qdiscs = qdisc_lines(lab, lab.node, "node") + qdisc_lines(lab, pod, "pod")
            idle_out = lab.run(client, "ping", "-n", "-i", str(PING_INTERVAL), "-c", str(IDLE_PINGS), "-w", "10",
                               pod_ip, check=False, timeout=20).stdout
            try:
                cell = ping_cell(idle_out)
                if not cell.n:
                    raise ReadingError(f"the idle pod answered none of {cell.sent} pings")
                idle = cell.as_dict()
            except ReadingError as exc:  # no idle RTT: no flow would be readable either
                return [dict(base, direction=d, qdisc=qdiscs, error=f"idle ping: {exc}") for d in DIRECTIONS]
            rows = []
            for direction in DIRECTIONS:
                row = dict(base, direction=direction, qdisc=qdiscs, rtt_idle=idle)
                try:
                    row.update(flow(lab, pod, client, pod_ip, seconds, reverse=direction == "egress"))
                except (ReadingError, subprocess.TimeoutExpired, RuntimeError) as exc:
                    row["error"] = str(exc)
                else:
                    row["first_s_ratio"] = row["first_s_bps"] / rate
                    row["whole_ratio"] = row["whole_bps"] / rate
                rows.append(row)
            return rows
        finally:
            runtime.delete(conf, att)
    finally:
        lab.delete_netns(pod)


def _ratio(ours: Optional[float], ref: Optional[float]) -> Optional[float]:
    """None when either RTT is beyond its ping's deadline (every probe lost)."""
    return None if ours is None or ref is None else ours / ref


def ratios(rows: list[dict]) -> list[dict]:
    """ours/reference of each reading, for every cell both sides measured."""
    cells = {(r["impl"], r["burst_mode"], r["rate_bps"], r["direction"]): r for r in rows if "error" not in r}
    out = []
    for (impl, mode, rate, direction), ours in cells.items():
        ref = cells.get(("reference", mode, rate, direction))
        if impl != "ours" or ref is None:
            continue
        out.append({"burst_mode": mode, "rate_bps": rate, "direction": direction,
                    "first_s": ours["first_s_bps"] / ref["first_s_bps"],
                    "whole": ours["whole_bps"] / ref["whole_bps"],
                    "rtt_load_p50": _ratio(ours["rtt_load"]["p50_ms"], ref["rtt_load"]["p50_ms"]),
                    "rtt_load_p95": _ratio(ours["rtt_load"]["p95_ms"], ref["rtt_load"]["p95_ms"])})
    return out


def run(rates_mbit: list[float], burst_modes: list[str], seconds: int, impls: list[str],
        reference_dir: Optional[str], prefix: str = "shapeb", reference: str = "") -> dict:
    """The whole bench; the report (schema ``cnichain-shaping/1``).

    ``reference`` names the reference in the report (``debian:sid 1.9.1+ds1-1``): never its
    directory, a path of the machine that ran it.
    """
    bin_dir = tempfile.mkdtemp(prefix=f"{prefix}-bin-")
    rows: list[dict] = []
    try:
        launchers.install(bin_dir)
        with Lab(prefix=prefix) as lab:
            run_id = lab.run_id
            client = lab.netns("client")
            lab.wire(client, [f"{CLIENT_ADDR}/24"], [f"{NODE_WIRE_ADDR}/24"], "cli")
            for impl in impls:
                lab.run(client, "ip", "route", "add", NETWORKS[impl][2], "via", NODE_WIRE_ADDR)
            cache = os.path.join(lab.workdir, "cache")
            idx = 0
            for impl in impls:
                path = [bin_dir] if impl == "ours" else [reference_dir or ""]
                runtime = Runtime(path, cache, node_netns=lab.node)
                conf = ConfList.from_dict(isolate_conflist(conflist(impl), os.path.join(lab.workdir, impl)))
                for mode in burst_modes:
                    for mbit in rates_mbit:
                        rows += measure_pod(lab, runtime, conf, client, impl, idx, int(mbit * 1_000_000), mode, seconds)
                        idx += 1
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
    return {"schema": SCHEMA, "run_id": run_id, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kernel": platform.release(), "seconds": seconds, "impls": list(impls),
            "reference": reference, "rows": rows, "ratios": ratios(rows)}


# -- the table ----------------------------------------------------------------------------------------

def _ms(value: Optional[float]) -> str:
    return f"{'lost':>8}" if value is None else f"{value:>8.2f}"


def _x(value: Optional[float]) -> str:
    return f"{'-':>8}" if value is None else f"{value:>7.2f}x"


def table(report: dict) -> str:
    lines = [f"shaping bench: {report['seconds']} s flows, kernel {report['kernel']}, goodput (x = of the rate)",
             f"{'impl':<9} {'burst':<10} {'rate':>5} {'dir':<7} {'first 1 s':>17} {'whole flow':>17} "
             f"{'idle p50':>8} {'load p50':>8} {'load p95':>8}  (ms; lost: no reply within the flow)"]
    for r in report["rows"]:
        head = f"{r['impl']:<9} {r['burst_mode']:<10} {r['rate_bps'] / 1e6:>5g} {r['direction']:<7}"
        if "error" in r:
            lines.append(f"{head} error: {r['error']}")
            continue
        lines.append(f"{head} {r['first_s_bps'] / 1e6:>8.1f} ({r['first_s_ratio']:>5.1f}x) "
                     f"{r['whole_bps'] / 1e6:>8.2f} ({r['whole_ratio']:>5.2f}x) "
                     f"{r['rtt_idle']['p50_ms']:>8.3f} {_ms(r['rtt_load']['p50_ms'])} {_ms(r['rtt_load']['p95_ms'])}")
    if report["ratios"]:
        lines += ["", "ours/reference, same run", f"{'burst':<10} {'rate':>5} {'dir':<7} {'first 1 s':>9} {'whole':>6} "
                  f"{'load p50':>8} {'load p95':>8}"]
        for c in report["ratios"]:
            lines.append(f"{c['burst_mode']:<10} {c['rate_bps'] / 1e6:>5g} {c['direction']:<7} {c['first_s']:>8.2f}x "
                         f"{c['whole']:>5.2f}x {_x(c['rtt_load_p50'])} {_x(c['rtt_load_p95'])}")
    seen = set()
    lines += ["", "qdiscs as installed (first rate of each side and burst)"]
    for r in report["rows"]:
        key = (r["impl"], r["burst_mode"], r["rate_bps"])
        if key in seen or "qdisc" not in r:
            continue
        seen.add(key)
        lines.append(f"{r['impl']} {r['burst_mode']} {r['rate_bps'] / 1e6:g} Mbit/s:")
        lines += [f"    {q}" for q in r["qdisc"]]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rates", type=float, nargs="+", default=[1, 10, 100], help="Mbit/s")
    ap.add_argument("--bursts", nargs="+", choices=sorted(BURSTS), default=["containerd", "crio"])
    ap.add_argument("--seconds", type=int, default=8, help="length of each bulk flow")
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    ap.add_argument("--reference-dir", default="debian:sid", help="the reference plugins: debian:SUITE or a path")
    ap.add_argument("--quick", action="store_true", help="smoke: 10 Mbit/s, containerd's burst, 2 s flows")
    ap.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    ap.add_argument("--save", action="store_true", help=f"also write the report to {os.path.relpath(RESULTS, ROOT)}")
    args = ap.parse_args(argv)
    if args.quick:
        args.rates, args.bursts, args.seconds = [10], ["containerd"], 2
    if os.geteuid() != 0 or not shutil.which("iperf3") or not shutil.which("ping"):
        print("needs root, iperf3 and ping", file=sys.stderr)
        return 2
    reference_dir = debcache.resolve_plugins_dir(args.reference_dir) if "reference" in args.impls else None
    if "reference" in args.impls and not (reference_dir and os.path.isfile(os.path.join(reference_dir, "bandwidth"))):
        print(f"no reference plugins at {args.reference_dir} (./run unpacks debian:sid)", file=sys.stderr)
        return 2
    label = ""
    if reference_dir:
        suite = args.reference_dir[len(debcache.SUITE_PREFIX):] if args.reference_dir.startswith(debcache.SUITE_PREFIX) else ""
        label = f"{args.reference_dir} {debcache.version(suite, 'containernetworking-plugins') or ''}".strip() if suite \
            else os.path.basename(os.path.normpath(reference_dir))
    report = run(args.rates, args.bursts, args.seconds, args.impls, reference_dir, reference=label)
    if args.save:
        with open(RESULTS, "w") as fh:
            json.dump(report, fh, indent=1)
            fh.write("\n")
    print(json.dumps(report, indent=1) if args.json else table(report))
    return 1 if any("error" in r for r in report["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
