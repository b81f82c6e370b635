"""Run installed plugins once, as the node's runtime would find them, before any conflist names them.

When the host is mounted at ``host_root`` (the init container), each executable runs chrooted into
it, so the check exercises the copy on the host, its shebang and its carried loader, not the
container's own tree.  Only ``CNI_COMMAND=VERSION`` is sent: no kernel object is touched.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Callable

Runner = Callable[[str], tuple[bool, str]]
TIMEOUT = 30.0


def version_in_root(host_root: str) -> Runner:
    """A runner that execs ``path`` (a host path) with VERSION, chrooted into ``host_root``."""
    root = os.path.abspath(host_root)

    def enter() -> None:  # runs in the child between fork and exec
        if root != "/":
            os.chroot(root)
        os.chdir("/")

    def run(path: str) -> tuple[bool, str]:
        env = {"CNI_COMMAND": "VERSION", "CNICHAIN_AGENT_SOCKET": "off", "PATH": "/nonexistent"}
        try:
            out = subprocess.run([path], env=env, input=b"", capture_output=True, timeout=TIMEOUT, preexec_fn=enter)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"{path}: {exc}"
        if out.returncode != 0:
            return False, f"{path}: exit {out.returncode}: {(out.stdout + out.stderr).decode(errors='replace')[-500:]}"
        try:
            versions = json.loads(out.stdout).get("supportedVersions")
        except ValueError:
            versions = None
        if not versions:
            return False, f"{path}: VERSION answered {out.stdout[:200]!r}"
        return True, f"{path}: {','.join(versions)}"

    return run
