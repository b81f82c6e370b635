"""Real traffic for the runtime suite: TCP requests, UDP datagrams and iperf3 rates.

Every helper takes argv prefixes (``ip netns exec CLIENT``, ``nsenter -t PID -n``) instead of
namespace names, because the two ends live in different kinds of namespaces: the client in a
named lab namespace, servers in a pod's netns that only the runtime's private mounts can name.
All waits are bounded; nothing asserts on wall-clock time.
"""

from __future__ import annotations

import subprocess
import time

from cnichain.tools.lab import iperf_rate, rate_within, wait_listening

__all__ = ["iperf_rate", "wait_listening", "pod_argv", "tcp_request", "http_get", "udp_exchange", "start_echo",
           "stop", "rate_within"]


def pod_argv(pid: int, *argv: str) -> list[str]:
    """``argv`` run in the network namespace of process ``pid`` (a pod's pause or container)."""
    return ["nsenter", "-t", str(pid), "-n", "--", *argv]


def tcp_request(client: list[str], ip: str, port: int, payload: bytes, attempts: int = 3) -> bytes:
    """Connect, send ``payload``, half-close, return everything the server sent back.

    Retried a bounded number of times only on an empty answer (a refused or timed-out connect).
    """
    return _first_answer([*client, "socat", "-T", "5", "-", f"TCP:{ip}:{port},connect-timeout=3"],
                         payload, attempts, pause=0.3)


def http_get(client: list[str], ip: str, port: int) -> bytes:
    return tcp_request(client, ip, port, b"GET / HTTP/1.0\r\nHost: e2e\r\n\r\n")


def udp_exchange(client: list[str], ip: str, port: int, payload: bytes, attempts: int = 3) -> bytes:
    """Send one datagram and return the first datagram that comes back (bounded retries)."""
    return _first_answer([*client, "socat", "-T", "2", "-", f"UDP:{ip}:{port}"], payload, attempts, pause=0.0)


def _first_answer(argv: list[str], payload: bytes, attempts: int, pause: float) -> bytes:
    """Run ``argv`` with ``payload`` on stdin until it prints something (at most ``attempts``
    times, ``pause`` seconds apart); the last output, empty if none came."""
    out = b""
    for attempt in range(attempts):
        if attempt and pause:
            time.sleep(pause)
        out = subprocess.run(argv, input=payload, capture_output=True, timeout=30).stdout
        if out:
            return out
    return out


def start_echo(server: list[str], port: int, proto: str) -> subprocess.Popen:
    """A socat echo server (TCP or UDP) on ``port`` in the namespace ``server`` enters."""
    spec = f"TCP-LISTEN:{port},fork,reuseaddr" if proto == "tcp" else f"UDP-RECVFROM:{port},fork,reuseaddr"
    proc = subprocess.Popen([*server, "socat", spec, "PIPE"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_listening(server, port, proto)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
