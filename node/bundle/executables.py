"""The plugin executables of a tree, as the bundle builder and the node installer write them.

When the tree carries the native shim (``cnichain/shim/cnichain-shim`` in its site-packages, built
by ``./run`` before the wheel), each plugin's executable is a copy of that static binary configured
for its plugin type, the agent socket, and its cold fallback: the tree's Python launcher, written
without the agent step to ``<bin>/.cnichain-cold/<name>`` and named there by its final absolute
path on the node.  The cold launcher reaches the interpreter through ``current``, so neither file
changes on an upgrade unless the shim binary itself does.  Without a carried shim (no compiler
where the tree was built) or without an agent socket, the executable is the Python launcher itself
(with the agent step when a socket is set), as before.

Pure apart from :func:`tree_shim`, which reads the tree.
"""

from __future__ import annotations

import os
from typing import Optional

from cnichain.node import native_shim
from cnichain.node.bundle import layout

SHIM_REL = f"{layout.SITE_REL}/cnichain/shim/cnichain-shim"


def tree_shim(tree: str) -> Optional[bytes]:
    """The generic native shim a tree carries, or None when it carries none."""
    try:
        with open(os.path.join(tree, SHIM_REL), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if not data.startswith(b"\x7fELF"):
        return None
    try:
        native_shim.configure(data, native_shim.ShimConfig("bridge", "/run/x.sock", "/x"))
    except ValueError:
        return None  # not a shim we can configure (no or an ambiguous configuration block)
    return data


def planned(prefix: str, bin_dir: str, names: dict[str, str], agent_socket: str,
            shim: Optional[bytes]) -> list[tuple[str, bytes, bool]]:
    """``(host path, bytes, is_entry)`` to write, cold launchers before the shims that name them.

    ``names``: executable name -> plugin module (chaining renames executables, never the plugin
    type the shim forwards as).  ``is_entry``: the file a runtime execs (what a VERSION check runs).
    """
    from cnichain.node.launchers import launcher_source, plugin_type_of

    python = layout.launcher_python(prefix)
    roots = [layout.SITE_REL]
    if shim is None or not agent_socket:
        return [(f"{bin_dir}/{name}", launcher_source(module, python, roots, agent_socket,
                                                      prefix_relative=True).encode(), True)
                for name, module in sorted(names.items())]
    colds, entries = [], []
    for name, module in sorted(names.items()):
        cold = f"{bin_dir}/{native_shim.COLD_DIR}/{name}"
        colds.append((cold, launcher_source(module, python, roots, "", prefix_relative=True).encode(), False))
        config = native_shim.ShimConfig(plugin_type_of(module), agent_socket, cold)
        entries.append((f"{bin_dir}/{name}", native_shim.configure(shim, config), True))
    return colds + entries
