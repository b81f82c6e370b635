"""A tiny run of ``cnichain bench``: the structure of its outputs, never its times."""

from __future__ import annotations

import json
import os

import pytest

from cnichain.benchmarks import latency as bench
from cnichain.tools.lab import leftover_namespaces
from tests import required
from tests.conftest import reference_dir_of

pytestmark = pytest.mark.integration


def _tiny(tmp_path, reference_dir: str, **kw) -> bench.Options:
    base = dict(pods=2, parallel=2, parallel_rounds=1, storm=(3,), growth=(0, 3), growth_samples=1, floor_samples=2, status_sweeps=2,
                modes=("cold", "reference"), reference_dir=reference_dir, output_dir=str(tmp_path / "out"),
                quiet=True, phases=tuple(p for p in bench.PHASES if p != "pods"))
    base.update(kw)
    return bench.Options(**base)


def test_tiny_bench_side_by_side(tmp_path, reference_dir):
    out, files = bench.run_bench(_tiny(tmp_path, reference_dir))
    assert not leftover_namespaces(f"cnib-{out['run_id']}"), "the bench left namespaces behind"
    assert not out["errors"], out["errors"]
    # both implementations ran the chain; the reference chain lacks route-override
    assert set(out["modes"]) == {"cold", "reference"}
    assert "route-override" in out["modes"]["reference"]["skipped"]
    assert out["modes"]["cold"]["plugins"]["bridge"] in ("ours", "reference")
    for command in ("ADD", "DEL"):
        cells = out["chain"]["bridge"][command]
        assert cells["cold"]["n"] == 2 and cells["reference"]["n"] == 2
        assert cells["cold"]["median_ms"] > 0 and cells["reference"]["p95_ms"] > 0
        assert cells["ratio"] > 0
        for mode in ("cold", "reference"):
            assert out["chain_totals"][mode]["all"][command]["n"] == 2
        assert out["chain_totals"]["ratio"][command] > 0
        assert out["parallel"]["cold"][command]["n"] == 1
        assert out["storm"]["3"]["cold"][command]["n"] == 1 and out["storm"]["3"]["ratios"]["cold/reference"][command] > 0
        for plugin in ("host-local", "portmap"):
            levels = out["growth"][plugin][command]
            assert set(levels) == {"0", "3"}
            assert levels["3"]["cold"]["n"] == 1 and levels["3"]["reference"]["n"] == 1
    if "route-override" in out["chain"]:  # ours only, reported alone
        assert set(out["chain"]["route-override"]["ADD"]) == {"cold"}
    assert out["floor"]["n"] == 2 and out["floor"]["median_ms"] > 0
    # the STATUS sweep: every plugin of the chain at 1.1.0, counted for both sides
    for mode in ("cold", "reference"):
        assert out["status"][mode]["sweep"]["n"] == 2 and out["status"][mode]["sweep"]["median_ms"] > 0
    assert out["status"]["cold"]["failed"] == {}, "a STATUS of ours failed on a healthy node"
    assert set(out["status"]["cold"]["plugins"]) == set(out["modes"]["cold"]["plugins"]) - {"host-local"}
    assert out["status"]["ratio"] > 0
    assert {t["target"].split()[0] for t in out["targets"]} >= {"chain"}
    # files: JSON equal to the summary, a table, and a chart or a note why not
    with open(files["json"]) as fh:
        assert json.load(fh)["schema"] == "cnichain-bench/2"
    table = open(files["table"]).read()
    assert "chain totals per pod" in table and "growth" in table and "ours/" in table and "STATUS sweep" in table
    assert "png" in files or any(n.startswith("chart skipped") for n in out["notes"])
    if "png" in files:
        with open(files["png"], "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_both_references_on_either_portmap_backend(tmp_path, reference_dir):
    """1.1.1 (iptables only) and 1.9.1 on each portmap backend, side by side in one run."""
    newer = reference_dir_of("1.9.1")
    out, files = bench.run_bench(_tiny(
        tmp_path, reference_dir, pods=1, parallel=0, growth=(0,), status_sweeps=1, phases=("chain", "status", "growth"),
        references=(("ref-1.1.1", reference_dir), ("ref-1.9.1", newer)),
        reference_portmap_backends=("iptables", "nftables"), chart=False))
    assert not leftover_namespaces(f"cnib-{out['run_id']}"), "the bench left namespaces behind"
    refs = ["ref-1.1.1", "ref-1.9.1-iptables", "ref-1.9.1-nft"]
    assert out["references"] == refs and set(out["modes"]) == {"cold", *refs}
    assert [out["modes"][r]["portmap_backend"] for r in refs] == [None, "iptables", "nftables"]
    assert out["modes"]["ref-1.9.1-nft"]["reference"] == "ref-1.9.1"
    assert any("ref-1.1.1" in n and "backend" in n for n in out["notes"])
    assert not out["errors"], out["errors"]
    for cells in (out["chain"]["portmap"]["ADD"], out["growth"]["portmap"]["DEL"]["0"]):
        assert {r for r in refs if cells[r]["n"] == 1} == set(refs)
        assert set(cells["ratios"]) == {f"cold/{r}" for r in refs} and all(v > 0 for v in cells["ratios"].values())
    assert set(out["chain_totals"]["ratios"]) == {f"cold/{r}" for r in refs}
    assert set(out["status"]["ratios"]) == {f"cold/{r}" for r in refs}
    assert {t["reference"] for t in out["targets"] if t["target"].startswith("chain")} == set(refs)
    table = open(files["table"]).read()
    assert "1.9.1-nft" in table and "1.9.1-ipt" in table and "1.1.1" in table


def test_pods_through_containerd_cri(tmp_path, reference_dir):
    """Whole pods through containerd 2.1's CRI, cold, warm (when the agent is there) and reference."""
    from cnichain.benchmarks.latency.pods import containerd_dir

    where = containerd_dir(bench.Options.containerd_dir)
    if not where or not os.path.isfile(os.path.join(where, "containerd")):
        required.missing("sid's containerd in the deb cache")
    modes = ("cold", "warm", "reference")
    out, files = bench.run_bench(_tiny(tmp_path, reference_dir, pods_e2e=2, modes=modes, phases=("pods",)))
    assert not leftover_namespaces(f"cnib-{out['run_id']}"), "the bench left namespaces behind"
    assert not out["errors"], out["errors"]
    pods = out["pods"]
    assert pods["runtime"]["version"].startswith("2.") and pods["failed"] == 0
    for mode in modes:
        for step in ("run", "stop_remove", "total"):
            assert pods[mode][step]["n"] == 2 and pods[mode][step]["median_ms"] > 0
    assert set(pods["ratios"]) == {f"{m}/reference" for m in modes if m != "reference"}
    assert pods["ratio"]["total"] > 0
    assert "pods through containerd's CRI" in open(files["table"]).read()


def test_ours_alone_without_reference(tmp_path, reference_dir):
    out, files = bench.run_bench(_tiny(tmp_path, reference_dir, pods=1, modes=("cold",), phases=("chain",),
                                       fallback=True, chart=False))
    assert set(out["modes"]) == {"cold"}
    assert "ratio" not in out["chain_totals"]
    assert "png" not in files
    assert "ours/" not in bench.render_table(out)


def test_warm_mode_is_reported_when_the_agent_is_missing(tmp_path, reference_dir, monkeypatch):
    """The agent ships with the package, so its absence is simulated where the bench asks for it."""
    from cnichain.benchmarks.latency import modes

    assert bench.warm_unavailable() == ""  # here it is present: the bench measures warm
    monkeypatch.setattr(modes, "warm_unavailable", lambda: "the node agent (cnichain.agent) is not available")
    out, _ = bench.run_bench(_tiny(tmp_path, reference_dir, pods=1, modes=("cold", "warm"), phases=("chain",),
                                   chart=False))
    assert "warm" not in out["modes"] and "cold" in out["modes"]
    assert "warm skipped: the node agent (cnichain.agent) is not available" in out["notes"]


def test_storm_reports_the_warm_agents_cgroup_and_queue(tmp_path, reference_dir):
    """The storm phase with the warm agent in its memory cgroup: each batch carries the cgroup's
    peak, OOM kills and the agent's queue; the idle footprint is read; the cgroup is removed."""
    from cnichain.tools.memcg import leftover_cgroups

    out, _ = bench.run_bench(_tiny(tmp_path, reference_dir, modes=("warm", "reference"), phases=("storm",),
                                   storm=(4,), chart=False))
    assert not out["errors"], out["errors"]
    cells = out["storm"]["4"]
    for command in ("ADD", "DEL"):
        view = cells["agent"][command]
        assert view["oom_kills"] == 0 and 0 < view["peak_mib"] < view["limit_mib"] == 512
        assert view["capacity"] >= 2 and "queue_peak" in view
        assert cells["warm"][command]["n"] == 1 and cells["ratios"]["warm/reference"][command] > 0
        # The node's CPU per pod, split: the runtime's own, the agent's process tree (it served
        # every request: never 0), the rest; and ours/reference per command.
        split = cells["cpu_split_ms"]["warm"][command]
        assert split["agent"] > 0 and split["runtime"] > 0, split
        assert abs(sum(split.values()) - cells["cpu_per_pod_ms"]["warm"][command]) < 1e-6
        assert "agent" not in cells["cpu_split_ms"]["reference"][command]
        assert cells["cpu_ratios"]["warm/reference"][f"node_{command}"] > 0
    assert cells["cpu_ratios"]["warm/reference"]["node_pod"] > 0
    assert any("node CPU per pod (ADD+DEL)" in t["target"] and t["value"] > 0 for t in out["targets"])
    assert out["agent_idle"]["usage_mib"] > 0
    assert any(t["target"].startswith("warm agent idle") for t in out["targets"])
    assert not leftover_cgroups()


CORPUS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "corpus")


@pytest.mark.parametrize(
    "name", ["containerd-install-cni.conflist", "podman-87-podman-bridge.conflist", "minikube-bridge.conflist"]
)
def test_bench_runs_corpus_conflists_unchanged(tmp_path, reference_dir, name):
    """Other projects' bridge-based conflists, as written, through both implementations."""
    path = os.path.join(CORPUS, name)
    with open(path) as fh:
        types = [p["type"] for p in json.load(fh)["plugins"]]
    out, _ = bench.run_bench(_tiny(tmp_path, reference_dir, pods=1, phases=("chain",), conflist=path, chart=False))
    assert not out["errors"], out["errors"]
    for mode in ("cold", "reference"):
        assert set(types) <= set(out["modes"][mode]["plugins"]), out["modes"][mode]
        assert out["chain_totals"][mode]["all"]["ADD+DEL"]["n"] == 1
    for t in types:
        assert out["chain"][t]["ADD"]["cold"]["n"] == 1 and out["chain"][t]["DEL"]["reference"]["n"] == 1
