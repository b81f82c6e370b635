"""A pytest plugin: the native-shim tests run against the sanitized build of the real shim.

``tests/unit/test_shim_fuzz.py`` builds ``cnichain-shim-asan`` (``shim/fuzz/build.sh``: the shim's
own ``main``, under AddressSanitizer and UndefinedBehaviorSanitizer, every finding fatal) and runs
the protocol tests (``tests/unit/test_shim_protocol.py -k native``) in a child pytest with
``-p tests.sanitized_shim`` and ``$CNICHAIN_SANITIZED_SHIM`` naming that binary.  This plugin makes
``native_shim.built_binary()`` -- where those tests take the shim they configure and exec -- answer
with it, so the same scenarios (agent answers, refusals, garbage, silence, cut-off streams) run
through the sanitizers as real processes.  A sanitizer report reaches the shim's stderr and exit
status, which those tests compare exactly.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

ENV = "CNICHAIN_SANITIZED_SHIM"


def _binary() -> str:
    path = os.environ.get(ENV, "")
    if not path:
        raise pytest.UsageError(f"-p tests.sanitized_shim needs ${ENV}: the sanitized shim (shim/fuzz/build.sh)")
    with open(path, "rb") as fh:
        data = fh.read()
    if b"__asan_init" not in data or b"__ubsan_handle" not in data:
        raise pytest.UsageError(f"{path} is not built with AddressSanitizer and UndefinedBehaviorSanitizer")
    return path


_served: list[str] = []  # one entry per time a test took the sanitized shim


def pytest_configure(config: Any) -> None:
    from cnichain.node import native_shim

    path = _binary()

    def built_binary() -> str:
        _served.append(path)
        return path

    native_shim.built_binary = built_binary  # type: ignore[assignment]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The proof the parent test reads: which binary the native-shim tests got, how many times."""
    terminalreporter.write_line(f"sanitized shim: {os.environ.get(ENV, '')} served {len(_served)} times")
