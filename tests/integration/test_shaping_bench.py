"""The shaping bench in its quickest form: the report's structure and that its numbers were read.

Never its performance: the figures belong to the bench's run (benchmarks/README.md).  What this
guards is that every number in the report came out of iperf3's or ping's output, so a parser that
stopped finding what it looks for fails here rather than publishing a zero or a stale field.
"""

from __future__ import annotations

import pytest

from cnichain.benchmarks import shaping
from cnichain.tools.lab import leftover_namespaces

pytestmark = pytest.mark.integration

RATE = 10_000_000


def test_quick_shaping_bench_reports_real_readings_for_both_directions():
    report = shaping.run([RATE / 1e6], ["containerd"], seconds=2, impls=["ours"], reference_dir=None, prefix="shapet")
    assert not leftover_namespaces(f"shapet-{report['run_id']}"), "the bench left namespaces behind"
    assert report["schema"] == shaping.SCHEMA and report["seconds"] == 2
    rows = report["rows"]
    assert [(r["impl"], r["direction"]) for r in rows] == [("ours", "ingress"), ("ours", "egress")]
    for row in rows:
        assert "error" not in row, row["error"]
        assert row["rate_bps"] == RATE and row["burst_bits"] == shaping.BURSTS["containerd"]
        # the receiver's 1 s intervals of a 2 s flow: at least two, every one a reading above zero
        assert len(row["intervals_bps"]) >= 2 and all(v > 0 for v in row["intervals_bps"])
        assert row["first_s_bps"] == row["intervals_bps"][0]
        assert row["whole_bps"] > 0 and row["whole_ratio"] == pytest.approx(row["whole_bps"] / RATE)
        assert row["first_s_ratio"] == pytest.approx(row["first_s_bps"] / RATE)
        for cell in (row["rtt_idle"], row["rtt_load"]):
            assert cell["sent"] >= cell["n"] >= 1 and 0 < cell["p50_ms"] <= cell["p95_ms"]
        # the shaping as the kernel holds it: a TBF at the rate on each side (ours: host veth, pod eth0)
        tbfs = [q for q in row["qdisc"] if " tbf " in q and "rate 10Mbit" in q]
        assert {q.split(":")[0] for q in tbfs} == {"node", "pod"}, row["qdisc"]
    assert report["ratios"] == []  # one side only: nothing to divide
    assert "ours" in shaping.table(report)
