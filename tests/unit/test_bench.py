"""The bench's pure parts: ratios, target verdicts, the summary document, the table, options,
output files and the chart -- on synthetic samples, so no namespace, plugin or root is needed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cnichain.benchmarks import latency as bench
from cnichain.benchmarks.latency import stats as st
from cnichain.benchmarks.latency.session import Sample
from cnichain.benchmarks.latency.summary import ours_mode, summarize

# -- statistics ------------------------------------------------------------------------------------


def test_ratios_are_none_when_a_side_is_missing():
    assert st.ratio(2.0, 4.0) == 0.5
    assert st.ratio(None, 4.0) is None and st.ratio(2.0, None) is None and st.ratio(2.0, 0.0) is None
    assert st.median_ratio({"median_ms": 3.0}, {"median_ms": 6.0}) == 0.5
    assert st.median_ratio({}, {"median_ms": 6.0}) is None and st.median_ratio({"n": 0}, None) is None


def _cell(ms: float, impl: str = "ours") -> dict:
    return {"n": 3, "median_ms": ms, "p95_ms": ms * 1.5, "impl": impl}


def _targets_input(portmap_impl: str = "ours") -> dict:
    def growth(ours_ms: float, ref_ms: float) -> dict:
        return {"cold": _cell(ours_ms, portmap_impl), "reference": _cell(ref_ms, "reference"), "ratio": ours_ms / ref_ms}

    return {
        "floor": {"n": 5, "median_ms": 10.0},
        "growth": {
            "portmap": {"ADD": {"0": growth(8, 10), "1000": growth(8, 10)}, "DEL": {"0": growth(12, 10)}},
            "host-local": {"ADD": {"0": {"cold": _cell(20)}}, "DEL": {"0": {"cold": _cell(30)}}},
        },
        "chain": {"tuning": {"ADD": {"cold": _cell(24)}}},
        "chain_totals": {"cold": {"like_for_like": {"ADD+DEL": {"median_ms": 30.0}}},
                         "reference": {"all": {"ADD+DEL": {"median_ms": 10.0}}}},
    }


def test_target_verdicts():
    rows = {r["target"]: r for r in st.targets(_targets_input(), "cold")}
    assert rows["portmap ADD median, 0 pods: ours/reference"]["met"] is True
    assert rows["portmap ADD median, 1000 pods: ours/reference"]["met"] is False  # 0.8 > 0.5
    assert rows["portmap DEL median, 0 pods: ours/reference"]["met"] is False  # 1.2 > 1.0
    assert rows["host-local ADD median, 0 pods: ours/python floor"]["value"] == pytest.approx(2.0)
    assert rows["host-local DEL median, 0 pods: ours/python floor"]["met"] is False  # 3.0 > 2.5
    assert rows["tuning (sysctls only) ADD median: ours/python floor"]["met"] is True
    assert rows["chain ADD+DEL per pod median: ours/reference (like for like)"]["met"] is True
    assert [st.verdict(v) for v in (None, True, False)] == ["n/a", "met", "MISSED"]


def test_targets_never_count_a_reference_stand_in_and_need_an_ours_mode():
    rows = st.targets(_targets_input(portmap_impl="reference"), "cold")
    assert not [r for r in rows if r["target"].startswith("portmap")]
    assert st.targets(_targets_input(), None) == []


# -- the summary document -----------------------------------------------------------------------------


def _mode(name: str, provenance: dict) -> SimpleNamespace:
    return SimpleNamespace(name=name, bin_dirs=[f"/{name}"], provenance=provenance, skipped={})


def _fake_bench() -> SimpleNamespace:
    ours = {"bridge": "ours", "host-local": "ours", "portmap": "reference", "route-override": "ours"}
    ref = {"bridge": "reference", "host-local": "reference", "portmap": "reference"}
    samples = [Sample("python", "floor", "python -I -S -c pass", "START", s, 0) for s in (0.010, 0.012, 0.011)]
    for mode, scale in (("cold", 2.0), ("reference", 1.0)):
        samples.append(Sample(mode, "floor", "bridge", "VERSION", 0.005 * scale, 0))
        for _pod in range(2):
            samples.append(Sample(mode, "chain", "bridge", "ADD", 0.010 * scale, 0))
            samples.append(Sample(mode, "chain", "bridge", "DEL", 0.008 * scale, 0))
        samples.append(Sample(mode, "growth", "portmap", "ADD", 0.004 * scale, 0, present=100))
    samples.append(Sample("cold", "chain", "route-override", "ADD", 0.003, 0))
    samples.append(Sample("cold", "chain", "bridge", "ADD", 9.0, 1))  # failed: left out
    totals = []
    for mode, scale in (("cold", 2.0), ("reference", 1.0)):
        for pod in range(2):
            plugins = {"bridge": 0.010 * scale} | ({"route-override": 0.003} if mode == "cold" else {})
            totals.append({"mode": mode, "pod": pod, "command": "ADD", "ok": True,
                           "seconds": sum(plugins.values()), "plugins": plugins})
            totals.append({"mode": mode, "pod": pod, "command": "DEL", "ok": True,
                           "seconds": 0.008 * scale, "plugins": {"bridge": 0.008 * scale}})
    totals.append({"mode": "cold", "pod": 9, "command": "ADD", "ok": False, "seconds": 5.0, "plugins": {"bridge": 5.0}})
    parallel = [{"mode": m, "round": 0, "command": c, "pods": 2, "wall_seconds": w, "failed": 0}
                for m, w in (("cold", 0.2), ("reference", 0.1)) for c in ("ADD", "DEL")]
    parallel.append({"mode": "cold", "round": 1, "command": "ADD", "pods": 2, "wall_seconds": 99.0, "failed": 1})
    return SimpleNamespace(
        samples=samples, modes={"cold": _mode("cold", ours), "reference": _mode("reference", ref)},
        o=bench.Options(pods=2, parallel=2), notes=["a note"], errors=[], chain_totals=totals, parallel=parallel,
        loadavg=[(0.1, 0.1, 0.1), (0.2, 0.2, 0.2)],
    )


@pytest.fixture
def summary() -> dict:
    return summarize(_fake_bench(), 12.5)


def test_summary_reduces_samples_per_plugin_command_and_mode(summary):
    assert summary["schema"] == "cnichain-bench/2" and summary["elapsed_seconds"] == 12.5
    assert summary["floor"]["n"] == 3 and summary["floor"]["median_ms"] == pytest.approx(11)
    bridge_add = summary["chain"]["bridge"]["ADD"]
    assert bridge_add["cold"]["n"] == 2 and bridge_add["cold"]["median_ms"] == pytest.approx(20)  # failure left out
    assert bridge_add["cold"]["impl"] == "ours" and bridge_add["reference"]["impl"] == "reference"
    assert bridge_add["ratio"] == pytest.approx(2.0)
    assert set(summary["chain"]["route-override"]["ADD"]) == {"cold"}  # no reference: no ratio
    assert summary["version"]["bridge"]["cold"]["median_ms"] == pytest.approx(10)
    grow = summary["growth"]["portmap"]["ADD"]["100"]
    assert grow["cold"]["impl"] == "reference" and grow["ratio"] == pytest.approx(2.0)
    assert summary["options"]["modes"] == ["cold", "reference"]  # tuples become lists for JSON
    json.dumps(summary)


def test_summary_chain_totals_compare_like_for_like(summary):
    tot = summary["chain_totals"]
    assert tot["cold"]["all"]["ADD"]["median_ms"] == pytest.approx(23)  # with route-override
    assert tot["cold"]["like_for_like"]["ADD"]["median_ms"] == pytest.approx(20)  # without
    assert tot["cold"]["all"]["ADD"]["n"] == 2  # the failed pod is left out
    assert tot["cold"]["all"]["ADD+DEL"]["median_ms"] == pytest.approx(39)
    assert tot["ratio"]["ADD"] == pytest.approx(2.0) and tot["ratio"]["DEL"] == pytest.approx(2.0)
    assert "ratio_warm" not in tot


def test_summary_parallel_leaves_out_failed_batches(summary):
    par = summary["parallel"]
    assert par["cold"]["ADD"]["n"] == 1 and par["cold"]["ADD"]["median_ms"] == pytest.approx(200)
    assert par["ratio"] == {"ADD": pytest.approx(2.0), "DEL": pytest.approx(2.0)}
    assert summary["parallel_pods"] == 2


@pytest.mark.parametrize("modes,expected", [(["cold", "reference"], "cold"), (["warm", "reference"], "warm"),
                                            (["reference"], None), ([], None), (["reference", "warm"], None)])
def test_ours_mode(modes, expected):
    assert ours_mode(modes) == expected


# -- the table ---------------------------------------------------------------------------------------


def test_table_side_by_side(summary):
    text = bench.render_table(summary)
    assert text.startswith("cnichain bench  ")
    assert "interpreter floor (python -I -S -c pass): median 11.0 ms" in text
    assert "mode cold: bridge, host-local, portmap, route-override  (reference fallback: portmap)" in text
    assert "ours/" in text and "med" in text and "p95" in text and " ref" in text
    assert "2.00x" in text
    assert "portmap ADD @100 [ref binary]" in text
    assert "note: a note" in text
    assert "targets" in text and "chain ADD+DEL per pod median" in text


def test_table_ours_alone_and_errors():
    fake = _fake_bench()
    del fake.modes["reference"]
    fake.samples = [s for s in fake.samples if s.mode != "reference"]
    fake.errors = [{"phase": "chain", "mode": "cold", "what": "pod 1 ADD", "error": "boom"}]
    text = bench.render_table(summarize(fake, 1.0))
    assert "ours/" not in text and "    ref" not in text
    assert text.splitlines()[-1] == "errors: 1 (first: cold pod 1 ADD: boom)"


# -- options ---------------------------------------------------------------------------------------------


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown mode"):
        bench.options_from(1, 0, 1, "", 1, 1, "cold,hot", "/usr/lib/cni", "", "/tmp", "chain", True, False, True)
    with pytest.raises(ValueError, match="unknown phase"):
        bench.options_from(1, 0, 1, "", 1, 1, "cold", "/usr/lib/cni", "", "/tmp", "chain,nap", True, False, True)
    with pytest.raises(ValueError, match="at least 1"):
        bench.options_from(0, 0, 1, "", 1, 1, "cold", "/usr/lib/cni", "", "/tmp", "chain", True, False, True)
    assert bench.main(["--modes", "nope"]) == 2


def test_phases_with_nothing_to_do_are_dropped():
    o = bench.parse_args(["--parallel", "0", "--growth", "", "--parallel-rounds", "0", "--no-chart", "--pods-e2e", "0",
                          "--storm", ""])
    assert o.phases == ("floor", "chain", "status") and o.parallel_rounds == 1 and o.chart is False
    assert bench.parse_args([]) == bench.Options()


# -- files and chart --------------------------------------------------------------------------------------


def test_write_outputs_json_and_table(summary, tmp_path):
    files = bench.write_outputs(summary, bench.Options(output_dir=str(tmp_path / "out"), chart=False))
    assert set(files) == {"json", "table"}
    with open(files["json"]) as fh:
        assert json.load(fh)["chain"]["bridge"]["ADD"]["ratio"] == pytest.approx(2.0)
    assert open(files["table"]).read() == bench.render_table(summary) + "\n"


def test_chart_is_a_png_or_says_why_not(summary, tmp_path):
    assert bench.write_chart({"when": "now"}, str(tmp_path / "none.png")) in (
        "no chain, growth or pods data", "matplotlib is not installed (pip install 'cnichain[bench]')")
    path = tmp_path / "g.png"
    why = bench.write_chart(summary, str(path))
    if why is None:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "matplotlib" in why


# -- the warm path: targets, columns, the per-plugin chart -------------------------------------------


def _warm_bench() -> SimpleNamespace:
    fake = _fake_bench()
    fake.modes["warm"] = _mode("warm", {"bridge": "ours", "host-local": "ours", "portmap": "reference"})
    fake.samples.append(Sample("shim", "floor", "cnichain-shim", "START", 0.0005, 0))
    fake.samples.append(Sample("warm", "floor", "bridge", "VERSION", 0.004, 0))
    for _pod in range(2):
        fake.samples.append(Sample("warm", "chain", "bridge", "ADD", 0.006, 0))
        fake.samples.append(Sample("warm", "chain", "bridge", "DEL", 0.013, 0))
    for pod in range(2):
        fake.chain_totals.append({"mode": "warm", "pod": pod, "command": "ADD", "ok": True, "seconds": 0.006,
                                  "plugins": {"bridge": 0.006}})
        fake.chain_totals.append({"mode": "warm", "pod": pod, "command": "DEL", "ok": True, "seconds": 0.013,
                                  "plugins": {"bridge": 0.013}})
    fake.parallel += [{"mode": "warm", "round": 0, "command": c, "pods": 2, "wall_seconds": 0.05, "failed": 0}
                      for c in ("ADD", "DEL")]
    fake.executables = "native shim"
    return fake


def test_warm_targets_are_warm_over_reference():
    rows = {r["target"]: r for r in st.targets(summarize(_warm_bench(), 1.0), "cold")}
    assert rows["warm bridge ADD median: warm/reference"]["value"] == pytest.approx(0.6)
    assert rows["warm bridge ADD median: warm/reference"]["met"] is True
    assert rows["warm bridge DEL median: warm/reference"]["met"] is False  # 13 ms of 8 ms: over 1.5x
    assert rows["warm bridge VERSION median: warm/reference"]["value"] == pytest.approx(0.8)
    assert rows["warm chain ADD per pod median: warm/reference"]["value"] == pytest.approx(0.6)
    assert rows["warm chain ADD+DEL per pod median: warm/reference"]["met"] is False  # 19 ms of 18 ms
    assert rows["warm 2 pods in parallel ADD: warm/reference"]["value"] == pytest.approx(0.5)
    assert not [t for t in rows if t.startswith("warm") and "portmap" in t]  # no warm portmap samples


def test_table_shows_the_warm_column_the_shim_floor_and_the_executables():
    text = bench.render_table(summarize(_warm_bench(), 1.0))
    assert "warm/" in text and "0.60x" in text
    assert "native shim bare exec (cnichain-shim): median 0.5 ms" in text
    assert "our plugin executables: native shim" in text


def test_chain_chart_bars_per_plugin_command_and_mode():
    from cnichain.benchmarks.latency.chart import chain_bars

    labels, values = chain_bars(summarize(_warm_bench(), 1.0))
    assert labels[:2] == ["bridge\nADD", "bridge\nDEL"] and labels[-2:] == ["chain/pod\nADD", "chain/pod\nDEL"]
    assert list(values) == ["cold", "warm", "reference"]
    assert values["warm"][0] == pytest.approx(6) and values["reference"][0] == pytest.approx(10)
    assert "route-override\nADD" in labels and values["reference"][labels.index("route-override\nADD")] is None


def test_status_sweeps_count_failed_execs_and_compare_like_for_like():
    """The reference's failed STATUS execs are its cost all the same; ours like-for-like leaves
    out plugins the reference chain lacks (route-override here)."""
    fake = _fake_bench()
    fake.status_sweeps = [
        {"mode": "cold", "sweep": i, "seconds": 0.030, "plugins": {"bridge": 0.020, "route-override": 0.010},
         "failed": {}} for i in range(3)
    ] + [
        {"mode": "reference", "sweep": i, "seconds": 0.005, "plugins": {"bridge": 0.005},
         "failed": {"bridge": "unknown command"}} for i in range(3)
    ]
    out = summarize(fake, 1.0)["status"]
    assert out["cold"]["sweep"]["median_ms"] == pytest.approx(30)
    assert out["cold"]["like_for_like"]["median_ms"] == pytest.approx(20)
    assert out["reference"]["sweep"]["n"] == 3 and out["reference"]["failed"] == {"bridge": "unknown command"}
    assert out["ratio"] == pytest.approx(4.0) and "ratio_warm" not in out
    assert out["cold"]["later_sweeps"]["n"] == 2
    table = bench.render_table(summarize(fake, 1.0))
    assert "STATUS sweep" in table and "ref fails STATUS in: bridge" in table


# -- several references side by side ----------------------------------------------------------------


def _ref_mode(name: str, backend=None) -> SimpleNamespace:
    return SimpleNamespace(name=name, bin_dirs=[f"/{name}"], provenance={"bridge": "reference"}, skipped={},
                           kind="reference", reference=name.rsplit("-", 1)[0] if backend else name,
                           version="1.9.1+ds1-1" if backend else "1.1.1+ds1-4", portmap_backend=backend)


def _three_references() -> SimpleNamespace:
    """cold against ref-1.1.1, ref-1.9.1-iptables and ref-1.9.1-nft, bridge ADD 20 ms against 10/20/40."""
    fake = _fake_bench()
    del fake.modes["reference"]
    fake.samples = [s for s in fake.samples if s.mode != "reference"]
    fake.chain_totals = [t for t in fake.chain_totals if t["mode"] != "reference"]
    fake.parallel = [p for p in fake.parallel if p["mode"] != "reference"]
    for name, backend, scale in (("ref-1.1.1", None, 1.0), ("ref-1.9.1-iptables", "iptables", 2.0),
                                 ("ref-1.9.1-nft", "nftables", 4.0)):
        fake.modes[name] = _ref_mode(name, backend)
        for pod in range(2):
            fake.samples.append(Sample(name, "chain", "bridge", "ADD", 0.010 * scale, 0))
            fake.chain_totals.append({"mode": name, "pod": pod, "command": "ADD", "ok": True,
                                      "seconds": 0.010 * scale, "plugins": {"bridge": 0.010 * scale}})
    fake.pod_rows = [{"mode": m, "pod": i, "ok": True, "run": r, "stop_remove": r / 2, "total": r * 1.5}
                     for m, r in (("cold", 0.4), ("ref-1.1.1", 0.2), ("ref-1.9.1-iptables", 0.2),
                                  ("ref-1.9.1-nft", 0.1)) for i in range(2)]
    fake.pod_rows.append({"mode": "cold", "pod": 9, "ok": False, "run": 9.0, "stop_remove": 0.0, "total": 9.0})
    fake.pods_runtime = {"name": "containerd", "version": "2.1.9"}
    return fake


def test_several_references_each_get_a_column_and_a_ratio():
    out = summarize(_three_references(), 1.0)
    assert out["references"] == ["ref-1.1.1", "ref-1.9.1-iptables", "ref-1.9.1-nft"]
    assert out["modes"]["ref-1.9.1-nft"]["portmap_backend"] == "nftables"
    assert out["modes"]["ref-1.9.1-nft"]["kind"] == "reference" and out["modes"]["cold"]["kind"] == "ours"
    cells = out["chain"]["bridge"]["ADD"]
    assert cells["ratios"] == {"cold/ref-1.1.1": pytest.approx(2.0), "cold/ref-1.9.1-iptables": pytest.approx(1.0),
                               "cold/ref-1.9.1-nft": pytest.approx(0.5)}
    assert cells["ratio"] == pytest.approx(2.0)  # against the first reference, as with one
    tot = out["chain_totals"]
    assert tot["ratios"]["cold/ref-1.9.1-nft"]["ADD"] == pytest.approx(0.5) and tot["ratio"]["ADD"] == pytest.approx(2.0)
    chain_targets = [t for t in out["targets"] if t["target"].startswith("chain ADD+DEL")]
    assert {t["reference"] for t in chain_targets} == set(out["references"])
    assert all(t["target"].endswith(f"[{t['reference']}]") for t in chain_targets)
    text = bench.render_table(out)
    head = next(i for i, line in enumerate(text.splitlines()) if line.startswith("chain, per plugin"))
    labels, columns = text.splitlines()[head + 1].split(), text.splitlines()[head + 2].split()
    assert labels == ["ours", "1.1.1", "1.9.1-ipt", "1.9.1-nft", "ours/", "ours/", "ours/"]
    assert columns == ["plugin", "command"] + ["med", "p95"] * 4 + ["1.1.1", "1.9.1-ipt", "1.9.1-nft"]
    assert "mode ref-1.9.1-nft [1.9.1+ds1-1, portmap nftables]" in text
    json.dumps(out)


def test_pods_phase_per_pod_steps_and_ratios():
    out = summarize(_three_references(), 1.0)["pods"]
    assert out["cold"]["run"]["n"] == 2 and out["cold"]["run"]["median_ms"] == pytest.approx(400)  # failed pod out
    assert out["cold"]["total"]["median_ms"] == pytest.approx(600) and out["failed"] == 1
    assert out["ratios"]["cold/ref-1.9.1-nft"] == {"run": pytest.approx(4.0), "stop_remove": pytest.approx(4.0),
                                                   "total": pytest.approx(4.0)}
    assert out["runtime"]["version"] == "2.1.9"
    text = bench.render_table(summarize(_three_references(), 1.0))
    assert "pods through containerd's CRI" in text and "RunPodSandbox" in text and "4.00x" in text


def test_reference_options():
    o = bench.parse_args(["--reference", "ref-1.1.1=/usr/lib/cni", "--reference", "ref-1.9.1=debian:sid",
                          "--reference-portmap-backends", "iptables,nftables"])
    assert o.references == (("ref-1.1.1", "/usr/lib/cni"), ("ref-1.9.1", "debian:sid"))
    assert o.reference_specs() == o.references and o.reference_portmap_backends == ("iptables", "nftables")
    assert bench.parse_args(["--reference-dir", "/x"]).reference_specs() == (("reference", "/x"),)
    for bad in (["--reference", "nodir"], ["--reference", "cold=/x"], ["--reference", "a=/x", "--reference", "a=/y"],
                ["--reference", "a b=/x"], ["--reference-portmap-backends", "ebpf"]):
        with pytest.raises(ValueError):
            bench.parse_args(bad)


def test_chart_has_a_bar_per_mode_and_pod_step(tmp_path):
    from cnichain.benchmarks.latency.chart import pods_bars

    out = summarize(_three_references(), 1.0)
    labels, values = pods_bars(out)
    assert labels == ["RunPodSandbox", "Stop+Remove", "pod total"]
    assert list(values) == ["cold", "ref-1.1.1", "ref-1.9.1-iptables", "ref-1.9.1-nft"]
    assert values["ref-1.9.1-nft"] == [pytest.approx(100), pytest.approx(50), pytest.approx(150)]
    why = bench.write_chart(out, str(tmp_path / "p.png"))
    assert why is None or "matplotlib" in why


def test_warm_targets_cover_parallel_del_and_the_status_sweep():
    out = {"parallel_pods": 8,
           "parallel": {"warm": {"ADD": {"median_ms": 70.0}, "DEL": {"median_ms": 60.0}},
                        "reference": {"ADD": {"median_ms": 100.0}, "DEL": {"median_ms": 100.0}}},
           "status": {"warm": {"like_for_like": {"median_ms": 9.0}}, "reference": {"sweep": {"median_ms": 10.0}}}}
    rows = {r["target"]: r for r in st.warm_targets(out)}
    assert rows["warm 8 pods in parallel ADD: warm/reference"]["met"] is True  # 0.7 <= 0.75
    assert rows["warm 8 pods in parallel DEL: warm/reference"]["met"] is False  # 0.6 > 0.5
    assert rows["warm STATUS sweep median (like for like): warm/reference"]["value"] == pytest.approx(0.9)
