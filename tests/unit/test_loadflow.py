"""The load-flow readers: a reading of nothing is an error, never a zero (benchmarks/loadflow.py)."""

from __future__ import annotations

import pytest

from cnichain.benchmarks.loadflow import PingCell, ReadingError, ping_cell, received_bps, receiver_intervals

STATS = "\n--- 10.77.0.2 ping statistics ---\n{sent} packets transmitted, {got} received, time 12970ms\n"


@pytest.mark.parametrize("empty", [{}, {"intervals": []}, {"server_output_json": {"intervals": []}},
                                   {"server_output_json": {"intervals": [{"sum": {"bits_per_second": 0}}]}}])
def test_an_iperf_report_of_nothing_is_an_error(empty):
    for reverse in (False, True):
        with pytest.raises(ReadingError):
            receiver_intervals(empty, reverse)
    with pytest.raises(ReadingError):
        received_bps(empty)


def test_the_receiver_side_is_read_per_direction():
    report = {"intervals": [{"sum": {"bits_per_second": 5.0}}],
              "server_output_json": {"intervals": [{"sum": {"bits_per_second": 7.0}}]},
              "end": {"sum_received": {"bits_per_second": 6.0}}}
    assert receiver_intervals(report, reverse=True) == [5.0]  # -R: the client receives
    assert receiver_intervals(report, reverse=False) == [7.0]  # the server receives
    assert received_bps(report) == 6.0
    with pytest.raises(ReadingError, match="refused"):
        receiver_intervals({"error": "refused"}, reverse=True)


def test_a_ping_run_without_its_statistics_or_its_replies_is_an_error():
    with pytest.raises(ReadingError):
        ping_cell("PING 10.77.0.2 (10.77.0.2) 56(84) bytes of data.\n")  # killed before its statistics
    with pytest.raises(ReadingError):
        ping_cell("PING 10.77.0.2 56(84) bytes of data.\n" + STATS.format(sent=3, got=3))  # replies cut


def test_every_probe_lost_is_a_reading_with_no_rtt():
    lost = ping_cell("PING 10.77.0.2 56(84) bytes of data.\n" + STATS.format(sent=228, got=0))
    assert lost == PingCell(sent=228, n=0, p50_ms=None, p95_ms=None)


def test_rtts_are_read_from_every_reply():
    lines = "".join(f"64 bytes from 10.77.0.2: icmp_seq={i} ttl=64 time={i}.5 ms\n" for i in range(1, 21))
    cell = ping_cell(lines + STATS.format(sent=20, got=20))
    assert (cell.sent, cell.n, cell.p50_ms, cell.p95_ms) == (20, 20, 11.0, 19.5)  # median of 1.5..20.5; 19th of 20
