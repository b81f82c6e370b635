"""Where ``./run`` unpacked the newer Debian packages the tests compare against (never installed).

``./run`` (``ensure_suite_debs``) fetches each ``SUITE PACKAGE`` pair it lists by name from that
suite and unpacks it into ``$CNICHAIN_DEB_CACHE/<suite>/<package>/`` (``usr/...`` plus a
``VERSION`` file). This module only reads that layout; tests skip a case whose package is absent
only when they are not run through ``./run`` (CI always is).
"""

from __future__ import annotations

import os
from typing import Optional

DEFAULT_CACHE = "/var/cache/cnichain/debs"


def cache_dir() -> str:
    return os.environ.get("CNICHAIN_DEB_CACHE", DEFAULT_CACHE)


def root(suite: str, package: str) -> Optional[str]:
    """The unpacked package's root (holding ``usr/``), or None when ./run has not fetched it."""
    path = os.path.join(cache_dir(), suite, package)
    return path if os.path.isfile(os.path.join(path, "VERSION")) else None


def reference_plugins_dir(suite: str) -> Optional[str]:
    """The reference plugins' directory inside an unpacked ``containernetworking-plugins``."""
    path = root(suite, "containernetworking-plugins")
    return None if path is None else os.path.join(path, "usr", "lib", "cni")


def containerd_bin_dir(suite: str) -> Optional[str]:
    """``usr/bin`` of an unpacked ``containerd`` (containerd, its runc shim, ctr)."""
    path = root(suite, "containerd")
    return None if path is None else os.path.join(path, "usr", "bin")
