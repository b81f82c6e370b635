"""The plugin types cnichain ships: the one list that the installer, the node installer, the bench,
the linter and the docs test derive from.

Pure data and no imports, so anything may read it without loading a plugin.  ``role`` says where a
type sits in a chain (``main`` creates the interface, ``ipam`` is delegated to, ``meta`` is chained
after a main plugin and needs its result); ``capabilities`` are the runtime capability args the
plugin consumes from ``runtimeConfig``; ``state`` says the package has a ``state.py``, its
reconciler face (:mod:`cnichain.common.plugin_state`: what it leaves on the node, read back,
repaired, collected without a cache), which the reconciler and the pod-state tools load through
:func:`states`.  Adding a plugin means adding its package under ``plugins/`` and one line here.
"""

from __future__ import annotations


class PluginType:
    """One CNI ``type`` we provide."""

    __slots__ = ("name", "module", "role", "capabilities", "state")

    def __init__(self, name: str, module: str, role: str, capabilities: tuple[str, ...] = (),
                 state: bool = False) -> None:
        self.name = name  # the CNI "type" and the executable's name
        self.module = module  # the package under cnichain.plugins
        self.role = role
        self.capabilities = capabilities
        self.state = state  # keeps node state: plugins/<module>/state.py holds its STATE

    def __repr__(self) -> str:
        return (f"PluginType({self.name!r}, {self.module!r}, {self.role!r}, {self.capabilities!r}, "
                f"state={self.state!r})")


# In the order of the default chain (conflists/cnichain-default.conflist), IPAM after its user.
TYPES: tuple[PluginType, ...] = (
    PluginType("bridge", "bridge", "main", ("mac",), state=True),
    PluginType("host-local", "host_local", "ipam", ("ipRanges", "ips"), state=True),
    PluginType("portmap", "portmap", "meta", ("portMappings",), state=True),
    PluginType("bandwidth", "bandwidth", "meta", ("bandwidth", "io.kubernetes.cri.pod-annotations"), state=True),
    PluginType("tuning", "tuning", "meta", ("mac",)),
    PluginType("route-override", "route_override", "meta"),
)
MODULES: dict[str, str] = {t.name: t.module for t in TYPES}
# The interface-creating and chained types, in chain order (what a pod's chain runs through).
CHAIN_ORDER: tuple[str, ...] = tuple(t.name for t in TYPES if t.role != "ipam")
META: tuple[str, ...] = tuple(t.name for t in TYPES if t.role == "meta")


TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.common.plugin_state import PluginState


def states() -> dict[str, PluginState]:
    """Plugin type -> its reconciler face, for every type with ``state``, in the order above.

    Each ``state.py`` is imported here, on first use (nothing is imported with the registry)."""
    import importlib

    return {t.name: importlib.import_module(f"cnichain.plugins.{t.module}.state").STATE
            for t in TYPES if t.state}
