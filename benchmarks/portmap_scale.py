"""Does portmap's ADD/DEL cost grow with the number of pods already mapped on the node?

In throwaway node namespaces, one with no other mappings present and one per size with N other
pods' mappings present (default 1,000; several sizes with ``--pods 1000,4000,10000``), all alive
at once, times ADD and DEL of one pod's port mappings (one TCP mapping per pod, snat on) as a
runtime would exec the plugin, the sizes taking turns round by round, and prints wall time and
the plugin process's CPU time (user + system; the kernel's work on the transaction runs in the
process's own system call) as the mean of the middle 60% of runs, and each size's ratio to 0.  It
does the same for the reference plugin at /usr/lib/cni/portmap (iptables backend,
containernetworking-plugins) when it is installed, and for the newer reference in
``--reference-nft`` (default ``debian:sid``: 1.9.1 as ``./run`` unpacks it) with ``"backend":
"nftables"``.

The other pods' state is loaded in bulk, in the exact layout each plugin would have written for
them, because execing either plugin 10,000 times only to set up the scene would dominate the run
time: ours, the same nftables transactions the plugin applies, in the map layout; the reference
1.1.1, its CNI-HOSTPORT-DNAT entry rule and CNI-DN-<hash> chain per pod, via iptables-restore; the
reference on nftables, copies of the rules its own ADD wrote for one pod (checked against a
second pod it adds itself), one ``add rule`` per rule.

    python benchmarks/portmap_scale.py [--pods 1000[,4000,...]] [--reps 15] [--reference-nft DIR] [--json]

Needs root, iproute2, nft and (for the reference) iptables.  Runs only inside its own namespaces.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import tempfile
from typing import Any, Callable

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


def conf(i: int, with_mappings: bool = True, backend: str = "") -> dict:
    out = {"cniVersion": "1.0.0", "name": NETWORK, "type": "portmap", "snat": True, "prevResult": prev_result(i)}
    if backend:
        out["backend"] = backend
    if with_mappings:
        out["runtimeConfig"] = {"portMappings": [{"hostPort": 10000 + i, "containerPort": 80, "protocol": "tcp"}]}
    return out


def exec_plugin(binary: str, command: str, cid: str, stdin: dict, bin_dir: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one exec."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/var/run/netns/{cid}",
           "CNI_IFNAME": "eth0", "CNI_PATH": bin_dir, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    run = timed_exec([binary], env, json.dumps(stdin).encode())
    if run.returncode != 0:
        raise RuntimeError(f"{binary} {command} failed: {run.stdout.decode()} {run.stderr.decode()}")
    return run.seconds, run.cpu_seconds


def populate_ours(n: int) -> None:
    """The state ``n`` ADDs leave, applied as the plugin's own transactions (500 pods each)."""
    from cnichain.common import nft
    from cnichain.plugins.portmap import maps, plan as planning
    from cnichain.plugins.portmap.config import load

    nft.apply_text(planning.declarations(), "declare portmap")
    batch: list[dict] = planning.skeleton()  # the table, as the first ADD builds it
    for i in range(n):
        plan = planning.plan_owner(NETWORK, f"other{i}", load(conf(i)), {4: pod_ip(i)})
        batch += maps.claim(plan, probe=False)
        if (i + 1) % 500 == 0 or i == n - 1:
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


REF_NFT_TABLE = "ip cni_hostport"  # the reference nftables backend's IPv4 table (the pods here are IPv4)


def _instantiated(template: list[dict], i: int) -> list[dict]:
    """Pod 0's rules as pod ``i``'s: its container ID, address and host port in place of pod 0's."""
    swap = {"other0": f"other{i}", pod_ip(0): pod_ip(i), 10000: 10000 + i}

    def sub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items() if k != "handle"}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return swap.get(value, value) if isinstance(value, (str, int)) and not isinstance(value, bool) else value

    return [sub(rule) for rule in template]


def _ref_rules(cid: str) -> list[dict]:
    """The rules of the reference's table whose comment is ``cid`` (how it tags a pod's rules)."""
    from cnichain.common import nft

    listing = nft.list_ruleset(f"list table {REF_NFT_TABLE}") or []
    return [item["rule"] for item in listing if "rule" in item and item["rule"].get("comment") == cid]


def populate_reference_nft(binary: str, bin_dir: str) -> Callable[[Lab, int], None]:
    """The reference's nftables layout for ``n`` pods: it adds pods 0 and 1 itself (its tables and
    base chains come with the first), the rest are copies of pod 0's rules, 500 pods a transaction.
    Pod 1 proves the copy: the rules it wrote must be pod 0's with pod 1's values."""
    def populate(lab: Lab, n: int) -> None:
        from cnichain.common import nft

        for i in range(min(n, 2)):
            exec_plugin(binary, "ADD", f"other{i}", conf(i, backend="nftables"), bin_dir)
        template = _ref_rules("other0")
        if not template:
            raise RuntimeError(f"the reference wrote no rule tagged other0 in {REF_NFT_TABLE}")
        if n > 1 and _instantiated(template, 1) != _instantiated(_ref_rules("other1"), 1):
            raise RuntimeError("the reference's rules for pod 1 are not pod 0's with pod 1's values")
        batch: list[dict] = []
        for i in range(2, n):
            batch += [{"add": {"rule": rule}} for rule in _instantiated(template, i)]
            if (i - 1) % 500 == 0 or i == n - 1:
                nft.apply(batch, "populate the reference's nftables layout")
                batch = []
    return populate


def one_pod(binary: str, bin_dir: str, r: int, tag: str, backend: str = "") -> dict[str, float]:
    """ADD then DEL of probe pod ``r``: wall and CPU seconds of each."""
    i = 900_000 + r  # IP 10.66.254.x, outside the others' range
    c = conf(i, backend=backend)
    c["prevResult"]["ips"][0]["address"] = f"10.66.254.{r % 250 + 2}/16"
    c["runtimeConfig"]["portMappings"][0]["hostPort"] = 40000 + r
    out: dict[str, float] = {}
    for command in ("add", "del"):
        out[command], out[f"{command}_cpu"] = exec_plugin(binary, command.upper(), f"bench-{tag}-{r}", c, bin_dir)
    return out


def scenario(binary: str, bin_dir: str, sizes: list[int], reps: int, populate: Callable[[Lab, int], None],
             backend: str = "") -> dict:
    """Per size (0 first): ADD and DEL wall and CPU in ms, and each size's ratios to 0.

    Every size has its own node namespace, all of them alive at once, and each round runs one
    probe pod in each, in a rotating order: the sizes share whatever else the machine is doing,
    so a ratio to 0 is the table's doing, not the minute's.
    """
    counts = [0] + sizes
    runs: dict[int, dict[str, list[float]]] = {n: {"add": [], "del": [], "add_cpu": [], "del_cpu": []} for n in counts}
    with contextlib.ExitStack() as stack:
        labs = {n: stack.enter_context(Lab(prefix="pmbench")) for n in counts}
        for n, lab in labs.items():
            lab.run(lab.node, "ip", "link", "add", "pmb0", "type", "veth", "peer", "name", "pmb1")
            lab.run(lab.node, "ip", "addr", "add", "10.66.255.254/16", "dev", "pmb0")
            lab.run(lab.node, "ip", "link", "set", "pmb0", "up")
            lab.run(lab.node, "ip", "link", "set", "pmb1", "up")
            with netns.entered(lab.node):
                if n:
                    populate(lab, n)
                for r in range(2):  # page cache, first-run effects
                    one_pod(binary, bin_dir, 1000 + r, f"warm{n}", backend)
        for r in range(reps):
            for n in counts[r % len(counts):] + counts[:r % len(counts)]:
                with netns.entered(labs[n].node):
                    for k, v in one_pod(binary, bin_dir, r, str(n), backend).items():
                        runs[n][k].append(v)
    out: dict[str, Any] = {str(n): {f"{k}_ms": trimmed_mean(v) * 1000 for k, v in runs[n].items()} for n in counts}
    for count in sizes:
        row = out[str(count)]
        for k in ("add", "del", "add_cpu", "del_cpu"):
            row[f"{k}_ratio"] = row[f"{k}_ms"] / out["0"][f"{k}_ms"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="1000", help="other pods present: one size or a comma list")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--reference-nft", default="debian:sid", metavar="DIR",
                        help="the reference plugins run with backend nftables: a directory, or debian:SUITE for "
                             "the deb cache's unpacked package ('' for none)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (it creates network namespaces)", file=sys.stderr)
        return 2
    from cnichain.tools.debcache import SUITE_PREFIX, resolve_plugins_dir, version

    sizes = [int(p) for p in str(args.pods).split(",") if p.strip()]
    results: dict[str, Any] = {"pods": sizes, "reps": args.reps}
    labels = {"cnichain": "cnichain (nftables)", "reference": "reference 1.1.1 (iptables)"}
    with tempfile.TemporaryDirectory(prefix="pmbench-bin-") as bin_dir:
        launchers.install(bin_dir)
        results["cnichain"] = scenario(os.path.join(bin_dir, "portmap"), bin_dir, sizes, args.reps,
                                       lambda lab, n: populate_ours(n))
    if os.path.isfile(REFERENCE):
        results["reference"] = scenario(REFERENCE, os.path.dirname(REFERENCE), sizes, args.reps, populate_reference)
    nft_dir = resolve_plugins_dir(args.reference_nft) if args.reference_nft else None
    if nft_dir and os.path.isfile(os.path.join(nft_dir, "portmap")):
        binary = os.path.join(nft_dir, "portmap")
        suite = args.reference_nft[len(SUITE_PREFIX):] if args.reference_nft.startswith(SUITE_PREFIX) else ""
        ver = (version(suite, "containernetworking-plugins") or "").split("+")[0] if suite else ""
        labels["reference-nft"] = f"reference {ver or nft_dir} (nftables)"
        results["reference-nft"] = scenario(binary, nft_dir, sizes, args.reps,
                                            populate_reference_nft(binary, nft_dir), backend="nftables")
    results["labels"] = labels
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"portmap ADD/DEL per exec (trimmed mean of {args.reps}), wall / CPU ms, with N other pods mapped")
    print(f"{'plugin':<30}{'N':>7}{'ADD wall':>10}{'CPU':>7}{'DEL wall':>10}{'CPU':>7}   ratio to N=0 (ADD, DEL wall)")
    for name, label in labels.items():
        r = results.get(name)
        if not r:
            continue
        for count in [0] + sizes:
            row = r[str(count)]
            ratios = f"   {row['add_ratio']:.2f}x, {row['del_ratio']:.2f}x" if count else ""
            print(f"{label:<30}{count:>7}{row['add_ms']:>10.1f}{row['add_cpu_ms']:>7.1f}"
                  f"{row['del_ms']:>10.1f}{row['del_cpu_ms']:>7.1f}{ratios}")
    for name, label in labels.items():
        if name == "cnichain" or name not in results:
            continue
        for count in [0] + sizes:
            ours, ref = results["cnichain"][str(count)], results[name][str(count)]
            print(f"ours / {label} at {count}: ADD {ours['add_ms'] / ref['add_ms']:.2f}x, "
                  f"DEL {ours['del_ms'] / ref['del_ms']:.2f}x (wall); ADD {ours['add_cpu_ms'] / ref['add_cpu_ms']:.2f}x, "
                  f"DEL {ours['del_cpu_ms'] / ref['del_cpu_ms']:.2f}x (CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
