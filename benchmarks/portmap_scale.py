"""Does portmap's ADD/DEL latency grow with the number of pods already mapped on the node?

Inside a throwaway node namespace, times ADD and DEL of one pod's port mappings (one TCP and one
UDP-free mapping per pod, snat on) as a runtime would exec the plugin, first with no other
mappings present and then with N other pods' mappings present (default 1,000), and prints the
latencies (mean of the middle 60% of runs) and their ratio.  It does the same for the reference plugin at
/usr/lib/cni/portmap (iptables backend, containernetworking-plugins) when it is installed.

The other pods' state is loaded in bulk, in the exact layout each plugin would have written for
them (ours: the same nftables transaction text the plugin applies; the reference: its
CNI-HOSTPORT-DNAT entry rule and CNI-DN-<hash> chain per pod, via iptables-restore), because
execing either plugin 1,000 times only to set up the scene would dominate the run time.

    python benchmarks/portmap_scale.py [--pods 1000] [--reps 15] [--json]

Needs root, iproute2, nft and (for the reference) iptables.  Runs only inside its own namespaces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout: cnichain/ links to the top-level packages

from cnichain.benchmarks.measure import timed_exec, trimmed_mean  # noqa: E402
from cnichain.node import launchers  # noqa: E402
from cnichain.tools.lab import Lab  # noqa: E402
from cnichain.common import netns  # noqa: E402

REFERENCE = os.path.join(os.environ.get("CNICHAIN_REFERENCE_DIR", "/usr/lib/cni"), "portmap")
NETWORK = "pmbench"


def pod_ip(i: int) -> str:
    return f"10.66.{i // 250}.{i % 250 + 2}"


def prev_result(i: int) -> dict:
    return {
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "cni0"}, {"name": f"veth{i}"}, {"name": "eth0", "sandbox": f"/var/run/netns/p{i}"}],
        "ips": [{"interface": 2, "address": f"{pod_ip(i)}/16", "gateway": "10.66.0.1"}],
    }


def conf(i: int, with_mappings: bool = True) -> dict:
    out = {"cniVersion": "1.0.0", "name": NETWORK, "type": "portmap", "snat": True, "prevResult": prev_result(i)}
    if with_mappings:
        out["runtimeConfig"] = {"portMappings": [{"hostPort": 10000 + i, "containerPort": 80, "protocol": "tcp"}]}
    return out


def exec_plugin(binary: str, command: str, cid: str, stdin: dict, bin_dir: str) -> float:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/var/run/netns/{cid}",
           "CNI_IFNAME": "eth0", "CNI_PATH": bin_dir, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    run = timed_exec([binary], env, json.dumps(stdin).encode())
    if run.returncode != 0:
        raise RuntimeError(f"{binary} {command} failed: {run.stdout.decode()} {run.stderr.decode()}")
    return run.seconds


def populate_ours(n: int) -> None:
    """The state ``n`` ADDs leave, applied as the plugin's own transactions (100 pods each)."""
    from cnichain.common import nft
    from cnichain.plugins.portmap import plan as planning
    from cnichain.plugins.portmap.config import load

    batch: list[dict] = planning.skeleton()  # the table, as the first ADD builds it
    for i in range(n):
        plan = planning.plan_owner(NETWORK, f"other{i}", load(conf(i)), {4: pod_ip(i)})
        batch += planning.fast_add(plan)
        if (i + 1) % 100 == 0 or i == n - 1:
            nft.apply(batch, "populate portmap")
            batch = []


def _ref_chain(cid: str) -> str:
    return ("CNI-DN-" + hashlib.sha512((NETWORK + cid).encode()).hexdigest())[:28]


def populate_reference(lab: Lab, n: int) -> None:
    """The iptables layout of reference portmap v1.1.1 for ``n`` pods, via iptables-restore."""
    lines = ["*nat", ":CNI-HOSTPORT-DNAT - [0:0]", ":CNI-HOSTPORT-SETMARK - [0:0]", ":CNI-HOSTPORT-MASQ - [0:0]"]
    for i in range(n):
        lines.append(f":{_ref_chain(f'other{i}')} - [0:0]")
    lines += [
        "-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        "-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
        '-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ',
        '-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000',
        "-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE",
    ]
    for i in range(n):
        cid, chain, port, ip = f"other{i}", _ref_chain(f"other{i}"), 10000 + i, pod_ip(i)
        lines.append(f'-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \\"{NETWORK}\\" id: \\"{cid}\\"" '
                     f"-m multiport --dports {port} -j {chain}")
        lines.append(f"-A {chain} -s 10.66.0.0/16 -p tcp -m tcp --dport {port} -j CNI-HOSTPORT-SETMARK")
        lines.append(f"-A {chain} -s 127.0.0.1/32 -p tcp -m tcp --dport {port} -j CNI-HOSTPORT-SETMARK")
        lines.append(f"-A {chain} -p tcp -m tcp --dport {port} -j DNAT --to-destination {ip}:80")
    lines.append("COMMIT")
    lab.run(lab.node, "iptables-restore", "--noflush", input="\n".join(lines) + "\n")


def measure(binary: str, bin_dir: str, reps: int, tag: str) -> tuple[list[float], list[float]]:
    adds, dels = [], []
    for r in range(reps):
        i = 900_000 + r  # IP 10.66.x.y outside the others' range
        cid = f"bench-{tag}-{r}"
        c = conf(i)
        c["prevResult"]["ips"][0]["address"] = f"10.66.254.{r + 2}/16"
        c["runtimeConfig"]["portMappings"][0]["hostPort"] = 40000 + r
        adds.append(exec_plugin(binary, "ADD", cid, c, bin_dir))
        dels.append(exec_plugin(binary, "DEL", cid, c, bin_dir))
    return adds, dels


def scenario(binary: str, bin_dir: str, pods: int, reps: int, populate) -> dict:
    out: dict[str, Any] = {}
    for label, count in (("empty", 0), ("loaded", pods)):
        with Lab(prefix="pmbench") as lab:
            lab.run(lab.node, "ip", "link", "add", "pmb0", "type", "veth", "peer", "name", "pmb1")
            lab.run(lab.node, "ip", "addr", "add", "10.66.255.254/16", "dev", "pmb0")
            lab.run(lab.node, "ip", "link", "set", "pmb0", "up")
            lab.run(lab.node, "ip", "link", "set", "pmb1", "up")
            with netns.entered(lab.node):
                if count:
                    populate(lab, count)
                measure(binary, bin_dir, 2, "warm")  # page cache, first-run effects
                adds, dels = measure(binary, bin_dir, reps, label)
        out[label] = {"add_ms": trimmed_mean(adds) * 1000, "del_ms": trimmed_mean(dels) * 1000}
    out["add_ratio"] = out["loaded"]["add_ms"] / out["empty"]["add_ms"]
    out["del_ratio"] = out["loaded"]["del_ms"] / out["empty"]["del_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    results = {"pods": args.pods, "reps": args.reps}
    with tempfile.TemporaryDirectory(prefix="pmbench-bin-") as bin_dir:
        launchers.install(bin_dir)
        results["cnichain"] = scenario(os.path.join(bin_dir, "portmap"), bin_dir, args.pods, args.reps,
                                       lambda lab, n: populate_ours(n))
    if os.path.isfile(REFERENCE):
        results["reference"] = scenario(REFERENCE, os.path.dirname(REFERENCE), args.pods, args.reps, populate_reference)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"portmap ADD/DEL latency (trimmed mean), {args.reps} runs each, with 0 and {args.pods} other pods mapped")
    print(f"{'plugin':<22}{'ADD 0':>9}{'ADD N':>9}{'ratio':>7}{'DEL 0':>9}{'DEL N':>9}{'ratio':>7}")
    for name in ("cnichain", "reference"):
        r = results.get(name)
        if not r:
            continue
        label = "cnichain (nftables)" if name == "cnichain" else "reference (iptables)"
        print(f"{label:<22}{r['empty']['add_ms']:>8.1f}ms{r['loaded']['add_ms']:>7.1f}ms{r['add_ratio']:>6.2f}x"
              f"{r['empty']['del_ms']:>7.1f}ms{r['loaded']['del_ms']:>7.1f}ms{r['del_ratio']:>6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
