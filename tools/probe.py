"""``cnichain node probe``: is this node ready to network pods with our chain (the readiness probe).

The agent is asked on its metrics endpoint (``<socket>.metrics``) first, because a bare connect to
the CNI socket is an incomplete request to the agent; the endpoint is served by the same event
loop, so it answers only when requests would.  Without a metrics socket, the CNI socket must accept.
The runtime, when named, must report NetworkReady over CRI and have loaded a pod network (with a
conflist given: exactly that file's bytes), i.e. the runtime runs our chain.
"""

from __future__ import annotations

import os


class NotReady(RuntimeError):
    """What is missing, for the probe's one error line."""


def agent(socket_path: str) -> str:
    """One line about the agent on ``socket_path``, or NotReady."""
    from cnichain.agent.control import fetch_metrics
    from cnichain.agent.sockets import answers

    metrics = socket_path + ".metrics"
    if os.path.exists(metrics):
        try:
            fetch_metrics(metrics, timeout=2.0)
        except (OSError, RuntimeError) as exc:
            raise NotReady(f"agent metrics on {metrics}: {exc}") from None
    elif not answers(socket_path):
        raise NotReady(f"no agent on {socket_path}")
    return f"agent {socket_path}"


def runtime(endpoint: str, conflist: str, timeout: float) -> str:
    """One line about the runtime's network state on its CRI ``endpoint``, or NotReady."""
    from cnichain.podstate import cri

    path = endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint
    try:
        status = cri.runtime_status(path, verbose=True, timeout=timeout)
    except cri.CriError as exc:
        raise NotReady(str(exc)) from None
    ready = status.network_ready()
    if not ready.status:
        raise NotReady(f"runtime {path}: NetworkReady=false ({ready.reason}): {ready.message}")
    net = status.pod_network()
    if net is None:
        raise NotReady(f"runtime {path}: NetworkReady, but no pod network config is reported as loaded")
    source = str(net.get("Source", ""))
    try:
        plugins = [str(p.get("Network", {}).get("type", "?")) for p in net.get("Plugins") or []]
    except AttributeError:
        plugins = []
    line = f"runtime {path}: NetworkReady, network {net.get('Name', '?')} ({net.get('CNIVersion', '?')}: {', '.join(plugins)})"
    if conflist:
        try:
            with open(conflist, "rb") as fh:
                wanted = fh.read()
        except OSError as exc:
            raise NotReady(f"{conflist}: {exc.strerror}") from None
        if source.encode() != wanted:
            raise NotReady(f"runtime {path} runs network {net.get('Name', '?')}, not the current bytes of {conflist}")
        line += f" = {conflist}"
    return line
