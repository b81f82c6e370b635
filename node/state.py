"""What ``cnichain node install`` wrote on this node, kept in ``<prefix>/cnichain/node-state.json`` (0600).

Uninstall removes exactly these files, and only while they still hold the bytes we wrote; the
chaining watcher compares the primary's digest recorded here to decide whether to rewrite ours.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Optional

from cnichain.node.atomic import write_file

NAME = "node-state.json"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class NodeState:
    mode: str = ""
    tree_id: str = ""
    launchers: dict[str, str] = field(default_factory=dict)  # host path -> sha256
    conflist: str = ""  # host path of our conflist
    conflist_digest: str = ""
    primary: str = ""  # chaining: host path of the primary we derived from
    primary_digest: str = ""

    @classmethod
    def load(cls, path: str) -> "NodeState":
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def save(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write_file(path, json.dumps(asdict(self), indent=2, sort_keys=True).encode() + b"\n", 0o600)

    def owns(self, path: str, data: Optional[bytes]) -> bool:
        """True when ``path`` holds exactly what we recorded writing there."""
        recorded = self.launchers.get(path) or (self.conflist_digest if path == self.conflist else None)
        return data is not None and recorded == digest(data)
