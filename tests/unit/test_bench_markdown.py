"""The figures in README.md and benchmarks/README.md are the published run's, rendered.

benchmarks/results/latest.json is the one committed bench run; every table of figures sits between
marker comments and must be exactly what :mod:`cnichain.benchmarks.latency.markdown` renders from
that file, so a hand edit of a number, or a new run published without re-rendering, fails here.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from cnichain.benchmarks.latency import markdown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        return fh.read()


def _published() -> dict:
    return json.loads(_read(markdown.RESULTS))


def test_the_published_run_is_a_bench_document_without_machine_paths():
    out = _published()
    assert out["schema"] == "cnichain-bench/2"
    assert out["published"]["note"], "say on what machine and under what load the run was taken"
    assert not [m for m, info in out["modes"].items() if "bin_dirs" in info]
    assert "bin_dir" not in out.get("pods", {}).get("runtime", {})


@pytest.mark.parametrize("doc", sorted(markdown.DOCUMENTS))
def test_each_documents_figures_are_what_the_published_run_renders(doc):
    text = _read(doc)
    rendered, found = markdown.splice(text, markdown.render(_published()))
    assert sorted(found) == sorted(markdown.DOCUMENTS[doc]), f"{doc} lacks a marked block"
    assert rendered == text, (f"{doc} differs from {markdown.RESULTS}: run "
                              "'python -m cnichain.benchmarks.latency.markdown' and commit the result")


def test_a_hand_edited_figure_is_caught():
    text = _read("README.md")
    blocks = markdown.render(_published())
    first = re.search(r"\d+\.\d\dx", blocks["ratios"])
    assert first, "the ratios block shows no ratio"
    edited = text.replace(blocks["ratios"], blocks["ratios"].replace(first.group(0), "9.99x", 1))
    assert edited != text
    assert markdown.splice(edited, blocks)[0] == text


def test_a_marked_block_without_a_renderer_is_refused():
    text = markdown.marked("no-such-table", "| a |")
    with pytest.raises(ValueError, match="no-such-table"):
        markdown.splice(text, markdown.render(_published()))


def test_publishing_drops_the_machine_paths_and_keeps_the_figures():
    out = {"modes": {"cold": {"bin_dirs": ["/tmp/x/bin"], "plugins": {}}},
           "pods": {"runtime": {"name": "containerd", "bin_dir": "/var/cache/x"}},
           "options": {"output_dir": "o", "pods": 3}, "floor": {"median_ms": 8.0}}
    doc = markdown.publish(out, "a quiet machine", "/somewhere/bench-1.json")
    assert doc["modes"]["cold"] == {"plugins": {}} and doc["pods"]["runtime"] == {"name": "containerd"}
    assert doc["options"] == {"pods": 3} and doc["floor"] == {"median_ms": 8.0}
    assert doc["published"] == {"source": "bench-1.json", "note": "a quiet machine"}
    assert "bin_dirs" in out["modes"]["cold"]  # the run's own document is left as it was
