"""What the agent counts, and the Prometheus text and HTTP bytes that expose it.

Kept by the server loop only: workers are forked children and never touch these objects, so no
locking is needed and a crashed worker cannot corrupt a counter.  Everything here is pure; the
server hands :func:`http_response` the bytes a client sent and writes back what it returns.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_HTTP_REQUEST = 8192  # a GET for /metrics is a few dozen bytes; answer once this much arrived


@dataclass
class Histogram:
    """Per-bucket (not cumulative) counts, plus one overflow bucket; cumulated when rendered."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                break
        else:
            self.counts[-1] += 1
        self.total += seconds


def _esc(value: str) -> str:
    """A label value as the text exposition format wants it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


class Metrics:
    """Counters and histograms of requests, refusals and rejections, by plugin and command."""

    def __init__(self) -> None:
        self.started = time.time()
        self.requests: dict[tuple[str, str, str], int] = {}
        self.latency: dict[tuple[str, str], Histogram] = {}
        self.refused: dict[str, int] = {}
        self.rejected = 0
        self.inflight = 0
        self.queue_now = 0  # requests waiting for a worker
        self.queued_total = 0  # requests that had to wait for one
        self.queue_peak = 0  # the most that waited at once
        self.workers: dict[str, int] = {}  # how request workers were started: "pooled" or "forked"
        self.sources: list[Callable[[], list[str]]] = []  # more families (the reconciler's), rendered last

    def done(self, plugin: str, command: str, outcome: str, seconds: float) -> None:
        key = (plugin, command, outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.latency.setdefault((plugin, command), Histogram()).observe(seconds)

    def worker_started(self, how: str) -> None:
        self.workers[how] = self.workers.get(how, 0) + 1

    def queue_entered(self, waiting: int) -> None:
        self.queued_total += 1
        self.queue_now = waiting
        self.queue_peak = max(self.queue_peak, waiting)

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4) of everything counted so far."""
        lines = _family("cnichain_agent_requests_total", "counter", "Requests run by the agent, by outcome.")
        for (plugin, command, outcome), n in sorted(self.requests.items()):
            lines.append(
                f'cnichain_agent_requests_total{{plugin="{_esc(plugin)}",command="{_esc(command)}",outcome="{outcome}"}} {n}'
            )
        name = "cnichain_agent_request_duration_seconds"
        lines += _family(name, "histogram", "Time from the go-ahead to the worker's exit.")
        for (plugin, command), hist in sorted(self.latency.items()):
            labels = f'plugin="{_esc(plugin)}",command="{_esc(command)}"'
            running = 0
            for bound, n in zip(BUCKETS, hist.counts):
                running += n
                lines.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {running}')
            running += hist.counts[-1]
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {running}')
            lines.append(f"{name}_sum{{{labels}}} {hist.total:.6f}")
            lines.append(f"{name}_count{{{labels}}} {running}")
        lines += _family("cnichain_agent_refused_total", "counter", "Connections sent back to the cold path, by reason.")
        for reason, n in sorted(self.refused.items()):
            lines.append(f'cnichain_agent_refused_total{{reason="{_esc(reason)}"}} {n}')
        lines += _family("cnichain_agent_rejected_total", "counter", "Malformed requests answered with a CNI error.")
        lines.append(f"cnichain_agent_rejected_total {self.rejected}")
        lines += _family("cnichain_agent_workers_started_total", "counter",
                         "Request workers by origin: pooled (pre-forked and warm) or forked at the request.")
        for how, n in sorted(self.workers.items()):
            lines.append(f'cnichain_agent_workers_started_total{{how="{_esc(how)}"}} {n}')
        lines += _family("cnichain_agent_inflight", "gauge", "Requests whose worker is running.")
        lines.append(f"cnichain_agent_inflight {self.inflight}")
        lines += _family("cnichain_agent_queue", "gauge", "Requests told GO that wait for a worker now.")
        lines.append(f"cnichain_agent_queue {self.queue_now}")
        lines += _family("cnichain_agent_queue_peak", "gauge", "The most requests that waited for a worker at once.")
        lines.append(f"cnichain_agent_queue_peak {self.queue_peak}")
        lines += _family("cnichain_agent_queued_total", "counter", "Requests that waited for a worker.")
        lines.append(f"cnichain_agent_queued_total {self.queued_total}")
        lines += _family("cnichain_agent_start_time_seconds", "gauge", "Unix time the agent started.")
        lines.append(f"cnichain_agent_start_time_seconds {self.started:.3f}")
        for source in self.sources:
            lines += source()
        return "\n".join(lines) + "\n"


def http_request_complete(buf: bytes) -> bool:
    """Whether enough of an HTTP request arrived to answer it (the head ended, or it is too long)."""
    return b"\r\n\r\n" in buf or b"\n\n" in buf or len(buf) >= MAX_HTTP_REQUEST


def http_response(request: bytes, metrics: Metrics) -> bytes:
    """The whole response to one HTTP request: the metrics for GET / or /metrics, else 404."""
    first = request.split(b"\n", 1)[0].decode("latin-1").split()
    if len(first) >= 2 and first[0] == "GET" and first[1].split("?")[0] in ("/metrics", "/"):
        body = metrics.render().encode()
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
    else:
        body = b"not found\n"
        head = "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


def parse_http_response(raw: bytes) -> str:
    """The body of a 200 response (what :func:`http_response` sent); RuntimeError otherwise."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"metrics: {head[:100]!r}")
    return body.decode()
