"""Where a cold plugin exec spends its time before it does any work: imports, per plugin and command.

Runs each installed launcher the way a runtime does, once with ``-X importtime``, for commands
that need no kernel (VERSION, host-local ADD/DEL on a scratch directory, portmap with nothing to
map, route-override DEL, tuning DEL of a sysctl-only config), and wall-clock times the same execs
against a bare interpreter start (``python -I -S -c pass``), interleaved.

    sudo .venv/bin/python benchmarks/cold_path.py [--runs 30] [--top 12]

Nothing is created in any network namespace: CNI_NETNS names a path that does not exist.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from cnichain.benchmarks.measure import Exec, median, timed_exec
from cnichain.plugins import registry


def scenarios(scratch: str) -> list[tuple[str, str, dict, bytes]]:
    """(plugin type, label, env, stdin) for every exec that needs no kernel object."""
    env = {"CNI_CONTAINERID": "coldpath", "CNI_NETNS": "/var/run/netns/cnichain-coldpath-none",
           "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent", "CNICHAIN_AGENT_SOCKET": "off"}
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "10.9.0.2/24", "interface": 0}]}
    hl = {"cniVersion": "1.0.0", "name": "coldpath", "type": "bridge",
          "ipam": {"type": "host-local", "subnet": "10.9.0.0/16", "dataDir": os.path.join(scratch, "ipam")}}
    out = []
    for t in (pt.name for pt in registry.TYPES):
        out.append((t, "VERSION", {"CNI_COMMAND": "VERSION", "CNICHAIN_AGENT_SOCKET": "off"}, b""))
        out.append((t, "error (bad JSON)", dict(env, CNI_COMMAND="ADD"), b"{"))
    out += [
        ("host-local", "ADD", dict(env, CNI_COMMAND="ADD"), json.dumps(hl).encode()),
        ("host-local", "DEL", dict(env, CNI_COMMAND="DEL"), json.dumps(hl).encode()),
        ("portmap", "ADD (no mappings)", dict(env, CNI_COMMAND="ADD"),
         json.dumps({"cniVersion": "1.0.0", "name": "coldpath", "type": "portmap", "prevResult": prev}).encode()),
        ("route-override", "DEL", dict(env, CNI_COMMAND="DEL"),
         json.dumps({"cniVersion": "1.0.0", "name": "coldpath", "type": "route-override"}).encode()),
        ("tuning", "DEL (sysctls only)", dict(env, CNI_COMMAND="DEL"),
         json.dumps({"cniVersion": "1.0.0", "name": "coldpath", "type": "tuning", "dataDir": os.path.join(scratch, "t"),
                     "sysctl": {"net.core.somaxconn": "500"}}).encode()),
    ]
    return out


def argv_of(launcher: str) -> list[str]:
    with open(launcher) as fh:
        first = fh.readline()
    return first[2:].split() + [launcher] if first.startswith("#!") else [launcher]


def run(argv: list[str], env: dict, stdin: bytes) -> Exec:
    return timed_exec(argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}, stdin)


def importtime(argv: list[str], env: dict, stdin: bytes) -> list[tuple[str, int, int]]:
    proc = run(argv[:-1] + ["-X", "importtime", argv[-1]], env, stdin)
    rows = []
    for line in proc.stderr.decode("utf-8", "replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            self_us, cum_us, name = line[len("import time:"):].split("|")
            if self_us.strip().isdigit():
                rows.append((name.rstrip(), int(self_us), int(cum_us)))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--json", default="", help="also write the numbers here")
    a = ap.parse_args()
    from cnichain.node import launchers

    with tempfile.TemporaryDirectory(prefix="cnichain-coldpath-") as scratch:
        bindir = os.path.join(scratch, "bin")
        launchers.install(bindir, native=False)  # the Python launchers themselves: the cold path
        cases = [(t, lbl, env, stdin) for t, lbl, env, stdin in scenarios(scratch) if os.path.exists(os.path.join(bindir, t))]
        floor_argv = [sys.executable, "-I", "-S", "-c", "pass"]
        times: dict[str, list[float]] = {"floor": []}
        for _ in range(a.runs):
            times["floor"].append(run(floor_argv, {}, b"").seconds)
            for t, lbl, env, stdin in cases:
                times.setdefault(f"{t} {lbl}", []).append(run(argv_of(os.path.join(bindir, t)), env, stdin).seconds)
        floor = median(times["floor"]) * 1000
        report: dict = {"floor_ms": floor, "cases": {}}
        print(f"bare interpreter (python -I -S -c pass): {floor:.1f} ms median of {a.runs}\n")
        print(f"{'plugin command':<36}{'median ms':>10}{'x floor':>9}  heaviest imports (cumulative ms under -X importtime)")
        for t, lbl, env, stdin in cases:
            key = f"{t} {lbl}"
            med = median(times[key]) * 1000
            rows = importtime(argv_of(os.path.join(bindir, t)), env, stdin)
            top_level = [(n.strip(), c) for n, s, c in rows if not n.startswith("  ")]
            top_level.sort(key=lambda r: -r[1])
            heavy = ", ".join(f"{n} {c / 1000:.1f}" for n, c in top_level[: a.top])
            print(f"{key:<36}{med:>10.1f}{med / floor:>8.2f}x  {heavy}")
            report["cases"][key] = {"median_ms": med, "x_floor": med / floor, "modules": len(rows),
                                    "top_level_imports_us": dict(top_level)}
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
