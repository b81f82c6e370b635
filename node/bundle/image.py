"""An OCI image of the tree, built locally with podman and no registry: ``FROM scratch`` plus the tree.

    python -m cnichain.node.bundle.image ARCHIVE [--prefix P] [--tag T]    (./run image)

The entrypoint is the tree's own interpreter running the tree's ``cnichain`` CLI, so the image
holds nothing else: no shell, no libc outside the tree.  The DaemonSet runs it twice: as the init
container (``cnichain node install``) and as the main container (``cnichain agent``).  podman gets
a private ``--root``/``--runroot`` under a temp dir (vfs storage), so the machine's own container
storage is never read or written; the result is an ``oci-archive`` file that ``ctr images import``
or ``podman load`` take as is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Optional

from cnichain.node.bundle import layout

PODMAN_TIMEOUT = 600


@dataclass
class ImageReport:
    archive: str
    tag: str
    tree_id: str
    image_bytes: int
    archive_bytes: int


def podman_argv(storage: str) -> list[str]:
    """podman with storage of its own under ``storage`` (nothing shared with the machine).

    podman refuses a runroot longer than 50 characters: keep ``storage`` short (e.g. under /tmp).
    """
    return ["podman", "--root", os.path.join(storage, "root"), "--runroot", os.path.join(storage, "runroot"),
            "--tmpdir", os.path.join(storage, "tmp"), "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs",
            "--events-backend", "file"]


def containerfile(prefix: str) -> str:
    current = layout.current_link(prefix)
    entry = [f"{current}/{layout.PYTHON_REL}", "-I", "-S", f"{current}/{layout.CLI_REL}"]
    top = prefix.strip("/").split("/")[0]
    return (f"FROM scratch\nCOPY {top} /{top}\nENTRYPOINT {json.dumps(entry)}\nCMD [\"version\"]\n")


def _run(argv: list[str]) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=PODMAN_TIMEOUT)
    if out.returncode != 0:
        raise RuntimeError(f"podman {argv[len(podman_argv('')):][0]} failed: {out.stderr.strip()[-2000:]}")
    return out.stdout


def build_image(archive: str, prefix: str = layout.DEFAULT_PREFIX, tag: str = "localhost/cnichain:latest",
                storage: Optional[str] = None, built: Optional[str] = None) -> ImageReport:
    """Build tree + image and write ``archive`` (temp name in its directory, then rename).

    ``built``: an OUT directory that already holds a tree for ``prefix`` (./run bundle OUT); it is
    used as the build context as is instead of building another tree.
    """
    from cnichain.node.bundle.build import build
    from cnichain.node.bundle.manifest import running_manifest

    archive = os.path.abspath(archive)
    work = tempfile.mkdtemp(prefix="cnichain-image-")
    own_storage = storage is None
    storage = storage or os.path.join(work, "storage")
    try:
        if built:
            ctx = os.path.abspath(built)
            manifest = running_manifest(layout.under(ctx, layout.current_link(prefix)))
            if manifest is None or manifest.get("prefix") != prefix:
                raise RuntimeError(f"{ctx} holds no tree built for prefix {prefix}")
        else:
            ctx = os.path.join(work, "context")
            manifest = build(ctx, prefix).manifest
        tree_id = str(manifest["tree_id"])
        spec = os.path.join(work, "Containerfile")
        with open(spec, "w") as fh:
            fh.write(containerfile(prefix))
        podman = podman_argv(storage)
        labels = ["--label", f"org.opencontainers.image.version={manifest['cnichain']}",
                  "--label", f"io.cnichain.tree-id={tree_id}", "--label", f"io.cnichain.prefix={prefix}"]
        _run([*podman, "build", "-q", "--network", "none", *labels, "-t", tag, "-f", spec, ctx])
        size = int(_run([*podman, "image", "inspect", "--format", "{{.Size}}", tag]).strip() or 0)
        os.makedirs(os.path.dirname(archive), exist_ok=True)
        tmp = os.path.join(os.path.dirname(archive), f".{os.path.basename(archive)}.tmp-{os.getpid()}")
        try:
            _run([*podman, "save", "--format", "oci-archive", "-o", tmp, tag])
            os.replace(tmp, archive)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return ImageReport(archive, tag, tree_id, size, os.path.getsize(archive))
    finally:
        if own_storage:
            subprocess.run([*podman_argv(storage), "system", "reset", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="cnichain-image", description="Build the cnichain OCI image (FROM scratch + tree) into an oci-archive.")
    p.add_argument("archive", nargs="?", default="dist/cnichain-image.tar")
    p.add_argument("--prefix", default=layout.DEFAULT_PREFIX)
    p.add_argument("--tag", default="localhost/cnichain:latest")
    ns = p.parse_args(argv)
    if not shutil.which("podman"):
        print("error: podman is not installed (apt-get install podman)", file=sys.stderr)
        return 1
    try:
        r = build_image(ns.archive, ns.prefix, ns.tag)
    except (RuntimeError, layout.LayoutError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"image    {r.tag}  tree {r.tree_id}  {r.image_bytes / 1e6:.1f} MB")
    print(f"archive  {r.archive}  {r.archive_bytes / 1e6:.1f} MB (oci-archive)")
    print(f"load     ctr -n k8s.io images import {r.archive}   or   podman load -i {r.archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
