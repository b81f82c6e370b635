"""libcni's result cache, read the way any runtime leaves it (containerd, CRI-O, podman, our runner).

Files ``<cacheDir>/results/<network>-<containerID>-<ifname>`` hold JSON with ``kind: cniCacheV1``,
``containerId``, ``ifName``, ``networkName``, ``config`` (the conflist bytes, base64), ``cniArgs``,
``capabilityArgs`` and ``result``.  Our runner writes the same layout with a ``netns`` field and no
``config``.  This is the runtime's own record of which attachments exist, so it is what tells a live
pod from state nobody will ever DEL.  Entries are validated before anything is built from them:
they are files on a node, and their IDs end up in file names and kernel lookups.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.common.skel import valid_name

LIBCNI_CACHE_DIR = "/var/lib/cni"
RUNNER_CACHE_DIR = "/var/lib/cnichain/cache"
_MAX_ENTRY_BYTES = 4 << 20  # a cache entry is a few KB; refuse to slurp anything absurd
_MAX_ENTRIES = 100_000


@dataclass
class CacheEntry:
    """One cached attachment."""

    path: str
    network: str
    container_id: str
    ifname: str
    result: dict = field(default_factory=dict)
    config: Optional[dict] = None  # the decoded conflist, when the runtime cached it
    netns: str = ""  # our runner's field, else the sandbox of the result's interfaces
    cni_args: list = field(default_factory=list)
    capability_args: dict = field(default_factory=dict)

    @property
    def netns_alive(self) -> Optional[bool]:
        """True/False when the entry names a namespace path; None when it does not say."""
        if not self.netns:
            return None
        return os.path.exists(self.netns)

    def ips(self) -> list[str]:
        return [str(ip.get("address")) for ip in self.result.get("ips") or [] if isinstance(ip, dict)]


def valid_id(text: Any) -> bool:
    """A container ID or network name as libcni accepts them (also safe as a file name part)."""
    return isinstance(text, str) and valid_name(text) and len(text) <= 1024


def valid_ifname(text: Any) -> bool:
    return (isinstance(text, str) and 0 < len(text) <= 15 and text not in (".", "..")
            and not any(c in "/:\0" or c.isspace() for c in text))


def _sandbox(result: dict) -> str:
    for iface in result.get("interfaces") or []:
        if isinstance(iface, dict) and isinstance(iface.get("sandbox"), str) and iface["sandbox"]:
            return iface["sandbox"]
    return ""


def _config(raw: Any) -> Optional[dict]:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        data = json.loads(base64.b64decode(raw, validate=True))
    except (ValueError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def parse_entry(path: str, data: bytes) -> Optional[CacheEntry]:
    """A cache entry, or None when the file is not one (or names something unsafe)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("kind", "cniCacheV1") != "cniCacheV1":
        return None
    network, cid, ifname = doc.get("networkName"), doc.get("containerId"), doc.get("ifName")
    if not (valid_id(network) and valid_id(cid) and valid_ifname(ifname)):
        return None
    result = raw if isinstance(raw := doc.get("result"), dict) else {}
    netns = raw if isinstance(raw := doc.get("netns"), str) else ""
    cni_args = raw if isinstance(raw := doc.get("cniArgs"), list) else []
    caps = raw if isinstance(raw := doc.get("capabilityArgs"), dict) else {}
    return CacheEntry(
        path=path, network=str(network), container_id=str(cid), ifname=str(ifname), result=result,
        config=_config(doc.get("config")), netns=netns or _sandbox(result),
        cni_args=[(str(p[0]), str(p[1])) for p in cni_args if isinstance(p, (list, tuple)) and len(p) == 2],
        capability_args=caps,
    )


def entry_paths(cache_dir: str) -> list[str]:
    """Paths of the files under ``<cache_dir>/results`` that may be entries, sorted (missing
    directory: none); half-written (``*.tmp*``) and hidden files are not."""
    folder = os.path.join(cache_dir, "results")
    try:
        names = sorted(os.listdir(folder))[:_MAX_ENTRIES]
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if ".tmp" not in n and not n.startswith(".")]


def read_entry(path: str) -> tuple[Optional[CacheEntry], Optional[os.stat_result]]:
    """``(entry or None, the stat of the very file read or None)``: the stat is taken from the
    open file, so it describes the bytes parsed even when a writer replaces the file meanwhile."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(_MAX_ENTRY_BYTES + 1)
    except OSError:
        return None, None
    if len(data) > _MAX_ENTRY_BYTES:
        return None, st
    return parse_entry(path, data), st


def read_cache(cache_dir: str) -> list[CacheEntry]:
    """Every entry under ``<cache_dir>/results`` (missing directory: none)."""
    out = []
    for path in entry_paths(cache_dir):
        entry, _st = read_entry(path)
        if entry is not None:
            out.append(entry)
    return out


def cache_exists(cache_dir: str) -> bool:
    return os.path.isdir(os.path.join(cache_dir, "results"))
