"""Size of the bundled tree and its start-up time next to today's venv launchers, in one run.

    sudo .venv/bin/python benchmarks/bundle_startup.py [--runs 40] [--out DIR]

Builds a tree (node/bundle/) for the default prefix into a temp OUT, writes venv launchers with
``cnichain install`` into a temp bin dir, then, in a private mount namespace where a tmpfs hides
the host's /opt and OUT/opt/cni is bind-mounted at /opt/cni, runs both kinds of launcher
interleaved: VERSION of every plugin and a host-local ADD+DEL on a scratch directory (no kernel
objects anywhere).  Reports tree size (on disk and gzipped), build time and median/p95 per
exec with the ratio bundle/venv.  Nothing outside the private mount namespace changes.
"""

from __future__ import annotations

import argparse
import ctypes
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from typing import Callable

from cnichain.benchmarks.measure import median, p95, timed_exec

CLONE_NEWNS, MS_BIND, MS_REC, MS_PRIVATE = 0x00020000, 4096, 16384, 1 << 18


def private_opt(tree_opt_cni: str) -> None:
    """Hide /opt behind a tmpfs in our own mount namespace and put the tree at /opt/cni."""
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(src, dst, fstype, flags):
        if libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), ctypes.c_ulong(flags), None) != 0:
            raise OSError(ctypes.get_errno(), f"mount {dst}")

    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", "/opt", "tmpfs", 0)
    os.makedirs("/opt/cni", exist_ok=True)
    mount(tree_opt_cni, "/opt/cni", None, MS_BIND | MS_REC)


def gz_size(path: str) -> int:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        tar.add(path, arcname=".")
    return buf.tell()


def timed(argv: list[str], env: dict, stdin: bytes) -> tuple[float, float]:
    """(wall ms, child CPU ms) of one exec; CPU time is the steadier one on a busy machine."""
    run = timed_exec(argv, env, stdin)
    if run.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed: {run.stdout!r} {run.stderr!r}")
    return run.seconds * 1000, run.cpu_seconds * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--out", default="benchmarks/results")
    ns = p.parse_args()
    from cnichain.node import launchers
    from cnichain.node.bundle.build import build

    work = tempfile.mkdtemp(prefix="cnichain-bundle-bench-")
    try:
        report = build(os.path.join(work, "out"), "/opt/cni", agent_socket="")
        venv_bin = os.path.join(work, "venv-bin")
        launchers.install(venv_bin, agent_socket="")
        private_opt(os.path.join(work, "out", "opt", "cni"))
        def hl(kind: str) -> bytes:  # one IPAM directory per kind: both ADD the same container
            return json.dumps({"cniVersion": "1.0.0", "name": "bench", "type": "bridge",
                               "ipam": {"type": "host-local", "subnet": "10.99.0.0/16",
                                        "dataDir": os.path.join(work, "ipam-" + kind)}}).encode()
        base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "CNI_CONTAINERID": "bench", "CNI_NETNS": "/run/netns/none",
                "CNI_IFNAME": "eth0", "CNI_PATH": "/nonexistent"}
        cases: list[tuple[str, str, dict[str, str], Callable[[str], bytes] | None]] = [
            (t, "VERSION", {"CNI_COMMAND": "VERSION"}, None) for t in sorted(launchers.PLUGINS)]
        cases += [("host-local", "ADD", dict(base, CNI_COMMAND="ADD"), hl), ("host-local", "DEL", dict(base, CNI_COMMAND="DEL"), hl)]
        samples: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        for _ in range(ns.runs):  # interleaved: both kinds see the same machine state
            for plugin, label, env, stdin in cases:
                for kind, folder in (("venv", venv_bin), ("bundle", "/opt/cni/bin")):
                    samples.setdefault((plugin, label, kind), []).append(
                        timed([os.path.join(folder, plugin)], env, stdin(kind) if stdin else b""))
        rows = []
        for plugin, label, _, _ in cases:
            v = [w for w, _ in samples[(plugin, label, "venv")]]
            b = [w for w, _ in samples[(plugin, label, "bundle")]]
            cv = median(c for _, c in samples[(plugin, label, "venv")])
            cb = median(c for _, c in samples[(plugin, label, "bundle")])
            mv, mb = median(v), median(b)
            rows.append({"plugin": plugin, "command": label, "venv_median_ms": round(mv, 2), "bundle_median_ms": round(mb, 2),
                         "venv_p95_ms": round(p95(v), 2),
                         "bundle_p95_ms": round(p95(b), 2), "ratio": round(mb / mv, 3),
                         "venv_cpu_ms": round(cv, 2), "bundle_cpu_ms": round(cb, 2), "cpu_ratio": round(cb / cv, 3) if cv else None})
        result = {"tree_bytes": report.size_bytes, "tree_files": report.files, "tree_gz_bytes": gz_size(report.tree),
                  "build_seconds": round(report.seconds, 1), "runs": ns.runs, "rows": rows,
                  "debian_packages": report.manifest["debian_packages"]}
        print(f"tree: {report.size_bytes / 1e6:.1f} MB on disk, {result['tree_gz_bytes'] / 1e6:.1f} MB gzipped, "
              f"{report.files} files, built in {report.seconds:.1f} s")
        print(f"{'plugin':<15} {'command':<8} {'venv ms':>8} {'bundle ms':>10} {'ratio':>6} {'venv cpu':>9} "
              f"{'bundle cpu':>10} {'ratio':>6}   (medians of {ns.runs}; wall, then child CPU time)")
        for r in rows:
            print(f"{r['plugin']:<15} {r['command']:<8} {r['venv_median_ms']:>8.2f} {r['bundle_median_ms']:>10.2f} "
                  f"{r['ratio']:>6.3f} {r['venv_cpu_ms']:>9.2f} {r['bundle_cpu_ms']:>10.2f} {r['cpu_ratio'] or 0:>6.3f}")
        os.makedirs(ns.out, exist_ok=True)
        path = os.path.join(ns.out, f"bundle-startup-{time.strftime('%Y%m%d-%H%M%S')}.json")
        with open(path, "w") as fh:
            json.dump(result, fh, indent=2)
        print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
