"""Where ``./run`` unpacked the newer Debian packages the tests and the bench compare against.

``./run`` (``ensure_suite_debs``) fetches each ``SUITE PACKAGE`` pair it lists by name from that
suite and unpacks it into ``$CNICHAIN_DEB_CACHE/<suite>/<package>/`` (``usr/...`` plus a
``VERSION`` file); nothing is installed.  This module only reads that layout: tests skip a case
whose package is absent only when they are not run through ``./run`` (CI always is), and the bench
finds sid's reference plugins and containerd here.
"""

from __future__ import annotations

import os
from typing import Optional

DEFAULT_CACHE = "/var/cache/cnichain/debs"
SUITE_PREFIX = "debian:"  # "debian:sid" names the reference plugins unpacked from that suite


def cache_dir() -> str:
    return os.environ.get("CNICHAIN_DEB_CACHE", DEFAULT_CACHE)


def root(suite: str, package: str) -> Optional[str]:
    """The unpacked package's root (holding ``usr/``), or None when ./run has not fetched it."""
    path = os.path.join(cache_dir(), suite, package)
    return path if os.path.isfile(os.path.join(path, "VERSION")) else None


def version(suite: str, package: str) -> Optional[str]:
    """The Debian version of the unpacked package (``1.9.1+ds1-1``), None when absent."""
    path = root(suite, package)
    if path is None:
        return None
    with open(os.path.join(path, "VERSION")) as fh:
        return fh.read().strip() or None


def reference_plugins_dir(suite: str) -> Optional[str]:
    """The reference plugins' directory inside an unpacked ``containernetworking-plugins``."""
    path = root(suite, "containernetworking-plugins")
    return None if path is None else os.path.join(path, "usr", "lib", "cni")


def containerd_bin_dir(suite: str) -> Optional[str]:
    """``usr/bin`` of an unpacked ``containerd`` (containerd, its runc shim, ctr)."""
    path = root(suite, "containerd")
    return None if path is None else os.path.join(path, "usr", "bin")


def resolve_plugins_dir(spec: str) -> Optional[str]:
    """``debian:SUITE`` -> that suite's unpacked reference plugins (None when absent); a path as is."""
    if spec.startswith(SUITE_PREFIX):
        return reference_plugins_dir(spec[len(SUITE_PREFIX):])
    return spec
