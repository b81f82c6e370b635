"""A bulk TCP flow with a ping beside it: how a shaped pod's link is read, by the bench and the tests.

A pod's link is used by one bulk transfer and, at the same time, everything small (DNS, health
checks, RPCs), so one reading is both: iperf3's receiver-side 1 s intervals with no ``-O`` omit
(the first second is where a runtime's huge burst shows) and the whole flow's goodput, and the RTT
of a ping sharing the link while the flow runs (where a queue bounded only by the burst shows).

Every reader refuses to turn "nothing was read" into a number: a report without receiver
intervals or received bytes, or a ping run without its statistics line, raises
:class:`ReadingError`.  Lost probes are a reading (the RTTs are then ``None``, longer than the run),
never zero.

Both ends are argv prefixes (``ip netns exec NS``, ``nsenter -t PID -n --``), so the same flow runs
between lab namespaces and into a pod that only a runtime's private mounts can name.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

from cnichain.benchmarks.measure import median, p95
from cnichain.tools.lab import realtime, reap, wait_listening

PING_INTERVAL = 0.05  # s; 20 probes a second, each a 64-byte packet: nothing beside a bulk flow
SETTLE = 0.3  # s from the flow's start to the first probe: the connection is up and sending
_RTT = re.compile(r"\btime=([0-9.]+) ms")
_SENT = re.compile(r"(\d+) packets transmitted, (\d+) received")


class ReadingError(RuntimeError):
    """A tool said nothing we could read: a row or a test must fail, never record a zero."""


@dataclass(frozen=True)
class PingCell:
    """One ping run: probes sent, replies, and their p50/p95 in ms (None when none came back)."""

    sent: int
    n: int
    p50_ms: Optional[float]
    p95_ms: Optional[float]

    def as_dict(self) -> dict:
        return {"n": self.n, "sent": self.sent, "p50_ms": self.p50_ms, "p95_ms": self.p95_ms}


@dataclass(frozen=True)
class FlowReading:
    """What one bulk flow with a ping beside it gave: receiver intervals, goodput, RTT under load."""

    intervals_bps: list[float]
    whole_bps: float
    rtt_load: PingCell

    @property
    def first_s_bps(self) -> float:
        return self.intervals_bps[0]


def receiver_intervals(report: dict, reverse: bool) -> list[float]:
    """Bits/s of each interval as the receiver counted them.

    The client's intervals are the receiver's only with ``-R``; without it the receiver is the
    server, whose report ``--get-server-output`` puts in ``server_output_json`` (the server runs
    with ``-J``).  A sender's first second counts what went into its socket buffer, not what
    arrived.
    """
    if "error" in report:
        raise ReadingError(f"iperf3: {report['error']}")
    side = report if reverse else report.get("server_output_json") or {}
    rates = [float(i["sum"]["bits_per_second"]) for i in side.get("intervals", []) if "sum" in i]
    if not rates or rates[0] <= 0:
        raise ReadingError(f"iperf3 reported no receiver intervals (reverse={reverse})")
    return rates


def received_bps(report: dict) -> float:
    """The whole flow's goodput as the receiver counted it."""
    value = float(((report.get("end") or {}).get("sum_received") or {}).get("bits_per_second") or 0.0)
    if value <= 0:
        raise ReadingError("iperf3 reported no received bytes")
    return value


def ping_cell(output: str) -> PingCell:
    """Probes sent and answered, p50 and p95 (ms), from what ping printed.

    No statistics line at all is unreadable; a statistics line with replies but no ``time=`` lines
    is too (the output was cut).
    """
    stats = _SENT.search(output)
    if stats is None:
        raise ReadingError(f"ping printed no statistics: {output.strip()[-200:]!r}")
    sent, received = int(stats.group(1)), int(stats.group(2))
    if received == 0:
        return PingCell(sent, 0, None, None)
    rtts = [float(m) for m in _RTT.findall(output)]
    if not rtts:
        raise ReadingError(f"ping counted {received} replies but printed none: {output.strip()[-200:]!r}")
    return PingCell(sent, len(rtts), median(rtts), p95(rtts))




def bulk_beside_ping(server: list[str], client: list[str], server_ip: str, seconds: int, reverse: bool,
                     port: int = 5201) -> FlowReading:
    """One iperf3 TCP flow of ``seconds`` between ``client`` and a one-off server on ``server_ip``
    (``reverse``: the server sends), and a ping from ``client`` to ``server_ip`` beside it, each
    at :func:`~cnichain.tools.lab.realtime` priority."""
    rt = realtime()
    srv = subprocess.Popen([*server, *rt, "iperf3", "-s", "-1", "-J", "-B", server_ip, "-p", str(port)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(server, port)
        argv = ["iperf3", "-c", server_ip, "-p", str(port), "-t", str(seconds), "-i", "1", "-J",
                "--get-server-output", "--connect-timeout", "3000"] + (["-R"] if reverse else [])
        bulk = subprocess.Popen([*client, *rt, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            time.sleep(SETTLE)
            count = max(int((seconds - 2 * SETTLE) / PING_INTERVAL), 5)
            ping = subprocess.run([*client, *rt, "ping", "-n", "-i", str(PING_INTERVAL), "-c", str(count),
                                   "-w", str(seconds + 5), server_ip],
                                  capture_output=True, text=True, timeout=seconds + 15)
            out, _ = bulk.communicate(timeout=seconds + 30)
        finally:
            if bulk.poll() is None:
                bulk.kill()
                bulk.wait()
    finally:
        reap(srv)
    try:
        report = json.loads(out or "{}")
    except ValueError as exc:
        raise ReadingError(f"iperf3 printed no JSON: {exc}") from exc
    return FlowReading(receiver_intervals(report, reverse), received_bps(report), ping_cell(ping.stdout))
