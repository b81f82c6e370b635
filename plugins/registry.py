"""The plugin types cnichain ships: the one list that the installer, the node installer, the bench,
the linter and the docs test derive from.

Pure data and no imports, so anything may read it without loading a plugin.  ``role`` says where a
type sits in a chain (``main`` creates the interface, ``ipam`` is delegated to, ``meta`` is chained
after a main plugin and needs its result); ``capabilities`` are the runtime capability args the
plugin consumes from ``runtimeConfig``.  Adding a plugin means adding its package under
``plugins/`` and one line here.
"""

from __future__ import annotations


class PluginType:
    """One CNI ``type`` we provide."""

    __slots__ = ("name", "module", "role", "capabilities")

    def __init__(self, name: str, module: str, role: str, capabilities: tuple[str, ...] = ()) -> None:
        self.name = name  # the CNI "type" and the executable's name
        self.module = module  # the package under cnichain.plugins
        self.role = role
        self.capabilities = capabilities

    def __repr__(self) -> str:
        return f"PluginType({self.name!r}, {self.module!r}, {self.role!r}, {self.capabilities!r})"


# In the order of the default chain (conflists/cnichain-default.conflist), IPAM after its user.
TYPES: tuple[PluginType, ...] = (
    PluginType("bridge", "bridge", "main", ("mac",)),
    PluginType("host-local", "host_local", "ipam", ("ipRanges", "ips")),
    PluginType("portmap", "portmap", "meta", ("portMappings",)),
    PluginType("bandwidth", "bandwidth", "meta", ("bandwidth",)),
    PluginType("tuning", "tuning", "meta", ("mac",)),
    PluginType("route-override", "route_override", "meta"),
)
MODULES: dict[str, str] = {t.name: t.module for t in TYPES}
# The interface-creating and chained types, in chain order (what a pod's chain runs through).
CHAIN_ORDER: tuple[str, ...] = tuple(t.name for t in TYPES if t.role != "ipam")
META: tuple[str, ...] = tuple(t.name for t in TYPES if t.role == "meta")
