"""Which pod sandboxes the runtime still lists: the third witness before anything is collected.

A source answers :meth:`listed` with the set of sandbox IDs the runtime knows, or None when it
cannot tell (no endpoint configured, the runtime down, an error status, a malformed answer).
None never makes anything a leak: the reconciler then decides on the other two witnesses only
(the attachment's network namespace is gone, and the grace period has passed since it was first
seen gone), which is what ``cnichain gc --apply`` decides on.  An empty set is an answer ("the
runtime lists nothing"), so a failed call must never turn into one.

:class:`CriSandboxes` asks the CRI ``RuntimeService/ListPodSandbox`` on the runtime's socket
through :mod:`cnichain.podstate.cri` (no gRPC library: the node image has none), which reports a
gRPC error status, a reset or a truncated answer as :class:`~cnichain.podstate.cri.CriError`.
Every listed sandbox counts, ready or not: a NOTREADY sandbox is still the runtime's to tear down.
"""

from __future__ import annotations

from typing import Callable, Optional

from cnichain.podstate import cri


class NoSandboxes:
    """No runtime listing configured: never an answer."""

    description = "none (network namespace and result cache only)"

    def listed(self) -> Optional[set[str]]:
        return None

    def states(self) -> Optional[dict[str, int]]:
        return None


class CriSandboxes:
    """ListPodSandbox on a CRI unix socket (``unix://`` prefix optional)."""

    def __init__(self, endpoint: str, log: Callable[[str], None], timeout: float = 5.0) -> None:
        self.path = endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint
        self.description = f"CRI ListPodSandbox on unix://{self.path}"
        self.log = log
        self.timeout = timeout
        self._warned = ""

    def _warn(self, text: str) -> None:
        if text != self._warned:
            self._warned = text
            self.log(f"reconcile: runtime listing unavailable ({text}); deciding on netns and grace only")

    def listed(self) -> Optional[set[str]]:
        states = self.states()
        return None if states is None else set(states)

    def states(self) -> Optional[dict[str, int]]:
        """Sandbox ID -> its CRI state (``cri.SANDBOX_READY`` or ``SANDBOX_NOTREADY``); None when
        the runtime cannot tell."""
        try:
            sandboxes = cri.list_pod_sandboxes(self.path, timeout=self.timeout)
        except cri.CriError as exc:
            self._warn(str(exc))
            return None
        self._warned = ""
        return {s.id: s.state for s in sandboxes}


def source(endpoint: str, log: Callable[[str], None]) -> "NoSandboxes | CriSandboxes":
    return CriSandboxes(endpoint, log) if endpoint else NoSandboxes()


def required_listing(endpoint: str) -> Optional[set[str]]:
    """For a command run by hand: the IDs ``endpoint`` lists (None without an endpoint).

    RuntimeError when the runtime was named but did not answer: the operator asked for that witness,
    so the command stops rather than deciding without it.
    """
    if not endpoint:
        return None
    problems: list[str] = []
    ids = CriSandboxes(endpoint, problems.append).listed()
    if ids is None:
        raise RuntimeError(problems[0] if problems else f"no answer from {endpoint}")
    return ids
