"""The per-attachment backup file: what the interface looked like before tuning changed it.

``<dataDir>/<containerID>_<ifname>.json`` uses the reference's keys (``mac``, ``promisc``, ``mtu``,
``allmulti``, ``txQLen``) so a node can switch between the reference plugin and this one with
attachments in flight.  One key is ours: ``sysctl`` maps each relative sysctl path tuning wrote to
``{"old": ..., "new": ...}``; the reference ignores unknown keys, so the file stays compatible.

The directory is created 0700 and files are written 0600 through a temporary file and a rename,
so a crash never leaves a half-written backup that DEL would misread.
"""

from __future__ import annotations

import json
import os

from cnichain.common.errors import plugin_error

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Any, Optional

LINK_KEYS = ("mac", "promisc", "mtu", "allmulti", "txQLen")


def backup_path(data_dir: str, container_id: str, ifname: str) -> str:
    # container_id and ifname were validated by the skeleton: no "/" and not "."/"..".
    return os.path.join(data_dir, f"{container_id}_{ifname}.json")


def load(path: str) -> Optional[dict]:
    """The backup at ``path``; None when there is none; {} when it is unreadable garbage."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
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


def save(path: str, data: dict) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise plugin_error(f"failed to create backup directory: {exc.strerror}: {directory}") from None
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, json.dumps(data, indent=1, sort_keys=True).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink(tmp)
        raise plugin_error(f"failed to save file {os.path.basename(path)}: {exc.strerror}") from None


def remove(path: str) -> None:
    _unlink(path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def link_part(data: dict) -> dict[str, Any]:
    """Only the interface attributes of a backup (the part that needs netlink to restore)."""
    return {k: data[k] for k in LINK_KEYS if k in data and data[k] is not None}
