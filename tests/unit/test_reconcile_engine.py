"""The reconciler's decisions that need no kernel: when the runtime's listing says "leave it"."""

from __future__ import annotations

from cnichain.agent.reconcile.engine import Reconciler
from cnichain.agent.reconcile.settings import ReconcileConfig
from cnichain.node import cri

from tests.unit.test_reconcile_attachments import _write


def test_a_sandbox_the_runtime_lists_as_not_ready_is_being_stopped_and_not_repaired(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    _write(str(folder), "aaa")
    _write(str(folder), "bbb")
    calls = []

    class Listing:
        description = "test"

        def listed(self):
            return {"aaa", "bbb"}

        def states(self):
            calls.append(1)
            return {"aaa": cri.SANDBOX_READY, "bbb": cri.SANDBOX_NOTREADY}

    now = [100.0]
    rec = Reconciler(ReconcileConfig(cache_dirs=[str(tmp_path)]), lambda _s: None, Listing(), clock=lambda: now[0])
    by_id = {t.entry.container_id: t for t in rec.reader.targets([str(tmp_path)])[0]}
    assert not rec._stopping(by_id["aaa"]) and rec._stopping(by_id["bbb"])
    assert len(calls) == 1  # one listing serves the repairs of a pass
    now[0] += 5
    rec._stopping(by_id["aaa"])
    assert len(calls) == 2

    class Silent(Listing):
        def states(self):
            return None  # the runtime cannot tell: never a reason to skip

    rec = Reconciler(ReconcileConfig(cache_dirs=[str(tmp_path)]), lambda _s: None, Silent())
    assert not rec._stopping(by_id["bbb"])
