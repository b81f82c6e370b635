"""Helpers shared by unit and integration tests (import as ``from tests.helpers import ...``)."""

from __future__ import annotations

import io
import json
from typing import Any, Optional

from cnichain.common import skel


def dispatch(plugin: skel.Plugin, command: str, conf: Optional[dict] = None, **env: str) -> tuple[int, Any]:
    """Run ``plugin`` in-process; return (exit code, decoded stdout or None)."""
    base = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "ctr1",
        "CNI_NETNS": "/var/run/netns/none",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/nonexistent",
    }
    base.update(env)
    out, err = io.StringIO(), io.StringIO()
    code = skel.dispatch(plugin, base, json.dumps(conf or {}).encode(), out, err)
    text = out.getvalue()
    return code, (json.loads(text) if text.strip() else None)
