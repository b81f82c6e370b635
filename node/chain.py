"""Chaining into someone else's network (pure: bytes in, bytes out, no file system).

The primary is the lowest-sorted ``.conf``/``.conflist``/``.json`` in the conf dir that is not
ours: the one containerd and CRI-O would use.  Our conflist keeps its network name, version and
every plugin, with the meta plugins we replace (``portmap``, ``bandwidth``, ``tuning``,
``route-override``) renamed to our executables (``cnichain-portmap``...) in place, capabilities
and settings kept; the meta plugins we add and the primary lacks follow its last plugin.  It is
written under a name that sorts before the primary, so runtimes pick ours.
"""

from __future__ import annotations

import copy
import json
from typing import Optional

from cnichain.node.atomic import CONF_SUFFIXES
from cnichain.plugins import registry

OUR_PREFIX = "cnichain-"
REPLACED = registry.META  # the primary's meta plugins that ours replace
DEFAULT_ADDED: tuple[dict, ...] = (
    {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
    {"type": "bandwidth", "capabilities": {"bandwidth": True, "io.kubernetes.cri.pod-annotations": True}},
)
# A replaced meta plugin that asks for the first capability also asks for the others: ours read
# the pod's QoS annotations beside the kubelet's rate (plugins/bandwidth/pod_qos.py).
COMPANION_CAPABILITIES = {"bandwidth": ("bandwidth", "io.kubernetes.cri.pod-annotations")}


class ChainError(ValueError):
    """The primary cannot be read or chained into (yet)."""


def our_type(plugin_type: str) -> str:
    return plugin_type if plugin_type.startswith(OUR_PREFIX) else OUR_PREFIX + plugin_type


def config_names(names: list[str]) -> list[str]:
    """The file names a runtime would consider, in the order it considers them (libcni: by suffix only)."""
    return sorted(n for n in names if n.endswith(CONF_SUFFIXES))


def find_primary(names: list[str], ours: set[str]) -> Optional[str]:
    for name in config_names(names):
        if name not in ours:
            return name
    return None


def load_primary(name: str, data: bytes) -> dict:
    """The primary as a conflist dict (a single-plugin ``.conf`` is wrapped, as libcni does)."""
    try:
        conf = json.loads(data)
    except ValueError as exc:
        raise ChainError(f"{name}: not valid JSON yet ({exc})") from None
    if not isinstance(conf, dict) or not isinstance(conf.get("name"), str):
        raise ChainError(f"{name}: no network name")
    if "plugins" in conf:
        if not isinstance(conf["plugins"], list) or not conf["plugins"] or not all(isinstance(p, dict) for p in conf["plugins"]):
            raise ChainError(f"{name}: 'plugins' must be a non-empty list of objects")
        return conf
    if not isinstance(conf.get("type"), str):
        raise ChainError(f"{name}: neither 'plugins' nor 'type'")
    plugin = {k: v for k, v in conf.items() if k not in ("name", "cniVersion")}
    out = {"cniVersion": conf.get("cniVersion", "0.1.0"), "name": conf["name"], "plugins": [plugin]}
    return out


def derive(primary: dict, added: tuple[dict, ...] = DEFAULT_ADDED) -> dict:
    """Our conflist from the primary's (see the module docstring)."""
    out = copy.deepcopy(primary)
    plugins = []
    for p in out["plugins"]:
        t = p.get("type")
        if isinstance(t, str) and t in REPLACED:
            p = dict(p, type=our_type(t))
            p = _with_companions(p, COMPANION_CAPABILITIES.get(t, ()))
        plugins.append(p)
    present = {p.get("type") for p in plugins}
    for extra in added:
        t = our_type(extra["type"])
        if t not in present:
            plugins.append(dict(copy.deepcopy(extra), type=t))
            present.add(t)
    out["plugins"] = plugins
    return out


def _with_companions(plugin: dict, capabilities: tuple[str, ...]) -> dict:
    caps = plugin.get("capabilities")
    if not capabilities or not isinstance(caps, dict) or caps.get(capabilities[0]) is not True:
        return plugin
    return dict(plugin, capabilities={**caps, **{c: True for c in capabilities[1:] if c not in caps}})


def render(conf: dict) -> bytes:
    return json.dumps(conf, indent=2).encode() + b"\n"


def check_sorts_first(conf_name: str, primary: Optional[str]) -> None:
    if primary is not None and not conf_name < primary:
        raise ChainError(f"our conflist name {conf_name!r} does not sort before the primary {primary!r}; "
                         "pass a lower --conf-name (runtimes take the lowest-sorted file)")
