"""A kubelet-like CRI Status poller: NetworkReady must hold on every poll while a test runs.

containerd 2.1+ runs CNI STATUS on every plugin of the chain for each Status call, so polling back
to back (instead of the kubelet's ~5 s) makes a wrong STATUS show up within one test step.
"""

from __future__ import annotations

import threading
import time

import grpc

from .cri_client import CriClient

POLL_INTERVAL = 0.05
MAX_POLLS = 5000


class Poller:
    """Calls CRI Status in a thread until stopped; remembers every poll that was not ready."""

    def __init__(self, cri: CriClient):
        self.cri = cri
        self.polls = 0
        self.not_ready: list[tuple[float, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cri-status-poller", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> "Poller":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set() and self.polls < MAX_POLLS:
            try:
                ready, reason, message = self.cri.status(timeout=60)
                if not ready:
                    self.not_ready.append((time.monotonic() - self.started, (reason, message)))
            except grpc.RpcError as exc:
                self.not_ready.append((time.monotonic() - self.started, f"Status RPC failed: {exc}"))
            self.polls += 1
            self._stop.wait(POLL_INTERVAL)

    def wait_polls(self, count: int, timeout: float = 60.0) -> None:
        """Wait (bounded) until ``count`` more polls have completed."""
        target, deadline = self.polls + count, time.monotonic() + timeout
        while self.polls < target and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        assert self.polls >= target, f"only {self.polls} Status polls, wanted {target}"

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)
