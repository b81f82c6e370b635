"""Reading the build manifest of the tree this interpreter runs from (no typer, no third-party imports).

The manifest (``share/cnichain/manifest.json`` in the tree) is written by the builder and names
every Debian package and Python distribution the tree carries, with versions: what an operator
compares against security advisories, and what changes after a rebuild on an updated host.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

from cnichain.node.bundle.layout import MANIFEST_REL


def running_manifest(prefix: Optional[str] = None) -> Optional[dict]:
    """The manifest of the tree at ``prefix`` (default: this interpreter's), None outside a tree."""
    path = os.path.join(prefix or sys.prefix, MANIFEST_REL)
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(manifest: Optional[dict], verbose: bool) -> list[str]:
    """Lines for ``cnichain version``: one line, or with ``verbose`` every carried package."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours = version("cnichain")
    except PackageNotFoundError:
        ours = "unknown"
    if manifest is None:
        lines = [f"cnichain {ours} (not a bundled tree: Python {sys.version.split()[0]} at {sys.prefix})"]
        return lines
    lines = [f"cnichain {manifest.get('cnichain', ours)} tree {manifest.get('tree_id')} "
             f"prefix {manifest.get('prefix')} python {manifest.get('python')}"]
    if verbose:
        for name, ver in sorted((manifest.get("debian_packages") or {}).items()):
            lines.append(f"debian  {name} {ver}")
        for name, ver in sorted((manifest.get("python_distributions") or {}).items()):
            lines.append(f"python  {name} {ver}")
    return lines
