"""The attachments the reconciler looks after, read from the runtimes' result caches.

A libcni cache entry (``<cacheDir>/results/<network>-<containerID>-<ifname>``) holds what the
runtime sent at ADD: the conflist, CNI_ARGS and capability arguments, and the chain's final result.
From it each plugin's stdin is rebuilt exactly as libcni builds it (:meth:`Runtime.plugin_config`),
so a repair is the plugin's own code run on the plugin's own input.  Entries are parsed and
validated by :mod:`cnichain.tools.podstate.cache` (IDs, ifnames) before anything is built from them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from cnichain.tools.podstate.cache import CacheEntry, read_cache
from cnichain.tools.runtime import Attachment, ConfigError, ConfList, Runtime


@dataclass
class Target:
    """One cached attachment whose conflist is known."""

    entry: CacheEntry
    conflist: ConfList
    mtime: float  # of the cache file: a re-ADD rewrites it

    @property
    def key(self) -> str:
        e = self.entry
        return f"{e.network}/{e.container_id}/{e.ifname}"

    @property
    def cache_root(self) -> str:
        return os.path.dirname(os.path.dirname(self.entry.path))

    def attachment(self) -> Attachment:
        e = self.entry
        return Attachment(e.container_id, e.netns if e.netns_alive else "", e.ifname, list(e.cni_args),
                          dict(e.capability_args))

    def plugin_env(self, command: str, bin_dirs: list[str]) -> dict[str, str]:
        """The CNI_* environment libcni would exec the plugin with."""
        e = self.entry
        env = {"CNI_COMMAND": command, "CNI_CONTAINERID": e.container_id, "CNI_NETNS": e.netns,
               "CNI_IFNAME": e.ifname, "CNI_PATH": ":".join(bin_dirs)}
        if e.cni_args:
            env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in e.cni_args)
        return env

    def plugin_conf(self, plugin: dict) -> dict:
        """One plugin's stdin: name, version, runtimeConfig from capabilities, the cached result."""
        return Runtime([], self.cache_root).plugin_config(self.conflist, plugin, self.attachment(),
                                                          self.entry.result or None)

    def still_cached(self) -> bool:
        """Whether the runtime still holds this attachment, unchanged (no DEL or re-ADD since)."""
        try:
            return os.stat(self.entry.path).st_mtime == self.mtime
        except OSError:
            return False


def targets(cache_dirs: list[str], in_scope: Optional[Callable[[str], bool]] = None,
            ) -> tuple[list[Target], list[CacheEntry]]:
    """(attachments with a usable cached conflist, entries without one), networks in scope only."""
    usable: list[Target] = []
    blind: list[CacheEntry] = []
    for d in cache_dirs:
        for e in read_cache(d):
            if in_scope is not None and not in_scope(e.network):
                continue
            try:
                mtime = os.stat(e.path).st_mtime
            except OSError:
                continue  # deleted since it was listed
            conf = e.config
            if conf is None or conf.get("name") != e.network:
                blind.append(e)
                continue
            try:
                usable.append(Target(e, ConfList.from_dict(conf, e.path), mtime))
            except ConfigError:
                blind.append(e)
    return usable, blind
