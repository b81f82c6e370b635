"""The per-attachment backup file: what the interface looked like before tuning changed it.

``<dataDir>/<containerID>_<ifname>.json`` uses the reference's keys (``mac``, ``promisc``, ``mtu``,
``allmulti``, ``txQLen``) so a node can switch between the reference plugin and this one with
attachments in flight.  One key is ours: ``sysctl`` maps each relative sysctl path tuning wrote to
``{"old": ..., "new": ...}``; the reference ignores unknown keys, so the file stays compatible.

Pure apart from reading the file: writing it is :mod:`.kernel`'s job.
"""

from __future__ import annotations

import os

from cnichain.common import leanjson

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

LINK_KEYS = ("mac", "promisc", "mtu", "allmulti", "txQLen")


def backup_path(data_dir: str, container_id: str, ifname: str) -> str:
    # container_id and ifname were validated by the skeleton: no "/" and not "."/"..".
    return os.path.join(data_dir, f"{container_id}_{ifname}.json")


def owner_of(file_name: str) -> Optional[tuple[str, str]]:
    """(container ID, ifname) a :func:`backup_path` file name stands for (the ifname is after the
    last ``_``: a container ID may hold one, an interface name may not); None for any other name."""
    if not file_name.endswith(".json"):
        return None
    container_id, sep, ifname = file_name[: -len(".json")].rpartition("_")
    return (container_id, ifname) if sep and container_id and ifname else None


def load(path: str) -> Optional[dict]:
    """The backup at ``path``; None when there is none; {} when it is unreadable garbage."""
    try:
        with open(path, "rb") as fh:
            data = leanjson.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def merge(existing: Optional[dict], new: dict) -> dict:
    """Keep values already saved: after a repeated ADD the originals are in the old file."""
    out = dict(new)
    if not existing:
        return out
    for key in LINK_KEYS:
        if key in existing:
            out[key] = existing[key]
    old_sysctl = existing.get("sysctl")
    if isinstance(old_sysctl, dict):
        merged = dict(out.get("sysctl") or {})
        for rel, entry in old_sysctl.items():
            if not (isinstance(entry, dict) and "old" in entry):
                continue
            if rel in merged:
                merged[rel] = {"old": entry["old"], "new": merged[rel]["new"]}
            else:
                merged[rel] = entry
        if merged:
            out["sysctl"] = merged
    return out


def link_part(data: dict) -> dict[str, Any]:
    """Only the interface attributes of a backup (the part that needs netlink to restore)."""
    return {k: data[k] for k in LINK_KEYS if k in data and data[k] is not None}
