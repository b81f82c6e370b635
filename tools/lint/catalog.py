"""What the linter knows about plugin types: their keys, the capabilities they consume, their role.

Keys come from each plugin's own Go-style schema (``SCHEMA`` in its ``config.py``), so the linter
and the plugin cannot drift apart.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Iterable, Optional

from cnichain.plugins import registry

# The conflist's own keys (libcni's NetworkConfigList, including 1.1.0's additions).
LIST_KEYS = ("cniVersion", "cniVersions", "name", "plugins", "disableCheck", "disableGC",
             "loadOnlyInlinedPlugins")

# libcni's types.NetConf plus the conventions every plugin may receive; "log" is cnichain's own.
COMMON_KEYS = ("cniVersion", "name", "type", "capabilities", "ipam", "dns", "args", "runtimeConfig",
               "prevResult", "cni.dev/valid-attachments")
OUR_EXTRA_KEYS = ("log",)

# CONVENTIONS.md's well-known capabilities, plus containerd's pod-annotations one.
WELL_KNOWN_CAPABILITIES = ("portMappings", "bandwidth", "ipRanges", "ips", "mac", "dns", "aliases",
                           "deviceID", "infinibandGUID", "cgroupPath", "io.kubernetes.cri.pod-annotations")

# Plugins that need a previous result and never create the interface.
META_TYPES = frozenset({*registry.META, "firewall", "sbr", "vrf"})

# Our plugin types -> the module holding PLUGIN (versions) and the capabilities each consumes.
OUR_TYPES = {t.name: f"cnichain.plugins.{t.module}.plugin" for t in registry.TYPES}
CONSUMES = {t.name: t.capabilities for t in registry.TYPES}
# Reference main plugins that hand their whole config to the IPAM plugin unchanged, so a host-local
# "ipam" under them is checked like ours.  Other types may rewrite it (antrea, flannel, ...).
PASSES_IPAM_VERBATIM = frozenset({"bridge", "ptp", "macvlan", "ipvlan", "host-device", "vlan", "dummy", "tap"})

# Why running a meta plugin twice in one chain breaks it (both runs share per-container state).
TWICE_BREAKS = {
    "portmap": "both entries own the same nftables chains (named from network and container ID): "
               "the second ADD replaces the first one's mappings and the first DEL removes both",
    "bandwidth": "both entries name the same IFB (bwp + hash of network and container ID): the "
                 "second ADD fails with 'file exists'",
    "tuning": "both entries write the same backup file (<dataDir>/<containerID>_<ifname>.json): DEL "
              "restores the wrong originals",
}



def _host_local_ipam_keys() -> tuple[str, ...]:
    """The keys host-local reads under ``ipam`` (its IPAMConfig, the legacy single range included)."""
    from cnichain.plugins.host_local.config import IPAM_CONFIG

    return tuple(f.name for f in IPAM_CONFIG.fields)


HOST_LOCAL_IPAM_KEYS = _host_local_ipam_keys()

# host-local's SCHEMA is the whole network config (its keys live under "ipam", checked apart).
_SCHEMA_MODULES = {t.name: f"cnichain.plugins.{t.module}.config" for t in registry.TYPES if t.role != "ipam"}


def is_ours(plugin_type: str) -> bool:
    return plugin_type in OUR_TYPES


def known_keys(plugin_type: str) -> tuple[str, ...]:
    """Every top-level key the plugin reads (json names), common keys included."""
    own: Iterable[str] = ()
    module = _SCHEMA_MODULES.get(plugin_type)
    if module is not None:
        schema = getattr(importlib.import_module(module), "SCHEMA", None)
        if schema is not None:
            own = tuple(f.name for f in schema.fields)
    return tuple(dict.fromkeys((*COMMON_KEYS, *OUR_EXTRA_KEYS, *own)))


def runtime_only_keys(plugin_type: str) -> tuple[str, ...]:
    """Keys the plugin reads only under ``runtimeConfig`` (written at the top level they are ignored)."""
    module = _SCHEMA_MODULES.get(plugin_type)
    if module is None:
        return ()
    schema = getattr(importlib.import_module(module), "SCHEMA", None)
    rc = schema.field("runtimeConfig") if schema is not None else None
    fields = getattr(rc.type, "fields", ()) if rc is not None else ()
    return tuple(f.name for f in fields)


def supported_versions(plugin_type: str) -> tuple[str, ...]:
    """``PLUGIN.versions`` of our plugin of that type."""
    module = importlib.import_module(OUR_TYPES[plugin_type])
    return tuple(module.PLUGIN.versions)


def matches_folded(key: str, known: Iterable[str]) -> Optional[str]:
    """The known key ``key`` fills under Go's case-insensitive matching, if any."""
    if key in known:
        return key
    low = key.casefold()
    for k in known:
        if k.casefold() == low:
            return k
    return None


def did_you_mean(key: str, known: Iterable[str]) -> Optional[str]:
    """The closest known key when ``key`` looks like a typo of it (case ignored)."""
    known = list(known)
    by_fold = {k.casefold(): k for k in known}
    close = difflib.get_close_matches(key.casefold(), list(by_fold), n=1, cutoff=0.8)
    return by_fold[close[0]] if close else None
