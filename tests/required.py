"""One rule for a part the README installs: under ``./run`` its absence is a failure, not a skip.

``./run`` installs the Debian packages (the reference plugins in ``/usr/lib/cni``, podman, ...),
unpacks the newer ones into ``$CNICHAIN_DEB_CACHE`` (which it exports) and builds the native
shim, so a test that finds one of them missing there has found a defect of ``./run`` or of the
machine's setup; turning that into a skip would make CI green on a suite that did not run.  Run
outside ``./run`` (a developer's plain ``pytest``) the same test skips, naming what is missing.
A skip that names a fact of this machine (a kernel feature, a version) does not go through here.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_run() -> bool:
    """True when the tests run under ``./run`` (it exports ``CNICHAIN_DEB_CACHE``)."""
    return bool(os.environ.get("CNICHAIN_DEB_CACHE"))


def missing(part: str) -> NoReturn:
    """``part`` (something ``./run`` installs) is absent: fail under ``./run``, skip otherwise."""
    message = f"{part} is missing"
    if under_run():
        pytest.fail(f"{message}, though ./run installs it", pytrace=False)
    pytest.skip(f"{message} (./run installs it)", allow_module_level=True)


def native_shim() -> str:
    """The built native shim's path (``shim/build.sh``, which ``./run`` runs and must not fail)."""
    from cnichain.node import native_shim as shim

    path = shim.built_binary()
    if path is None:
        missing("the native shim (shim/build.sh)")
    return path


def executable(path: str, part: str) -> str:
    """``path`` when it is an executable file, else :func:`missing` of ``part``."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        missing(f"{part} ({path})")
    return path


def command(name: str, part: str = "") -> str:
    """The path of command ``name`` on ``PATH``, else :func:`missing` (``part``: its package)."""
    import shutil

    found = shutil.which(name)
    if found is None:
        missing(f"{name}" + (f" ({part})" if part else ""))
    return found
