"""``python -m cnichain.node.bundle OUT [--prefix P]``: build the tree and print what was built (argparse only)."""

from __future__ import annotations

import argparse
import sys

from cnichain.node.bundle import layout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cnichain-bundle", description="Build a self-contained cnichain tree under OUT/<prefix>/.")
    p.add_argument("out", help="output root; the tree lands in OUT/<prefix>/cnichain, launchers in OUT/<prefix>/bin")
    p.add_argument("--prefix", default=layout.DEFAULT_PREFIX, help="absolute install prefix on the node (default /opt/cni)")
    p.add_argument("--stamp", default="", help="build label hashed into the tree id (a rebuild of the same inputs "
                   "installs as a new version)")
    ns = p.parse_args(argv)
    from cnichain.node.bundle.build import build

    try:
        report = build(ns.out, ns.prefix, stamp=ns.stamp)
    except (layout.LayoutError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"tree      {report.tree}")
    print(f"id        {report.tree_id}  (prefix {report.prefix})")
    print(f"size      {report.size_bytes / 1e6:.1f} MB in {report.files} files, built in {report.seconds:.1f} s")
    for path in report.launchers:
        print(f"launcher  {path}")
    for name, version in sorted(report.manifest["debian_packages"].items()):
        print(f"debian    {name} {version}")
    for name, version in sorted(report.manifest["python_distributions"].items()):
        print(f"pypi      {name} {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
