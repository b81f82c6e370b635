"""One bounded wait for tests that watch something converge (a repair, a collection, a counter)."""

from __future__ import annotations

import time
from typing import Callable


def wait_for(what: str, probe: Callable[[], object], timeout: float = 20.0, step: float = 0.05) -> object:
    """Poll ``probe`` until it returns something truthy and return that; bounded in time and in
    count, failing with ``what`` in the message."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / step) + 1):
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")
