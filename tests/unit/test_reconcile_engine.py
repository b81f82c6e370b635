"""The reconciler's decisions that need no kernel: when the runtime's listing says "leave it"."""

from __future__ import annotations

from cnichain.agent.reconcile.engine import Reconciler
from cnichain.agent.reconcile.settings import ReconcileConfig
from cnichain.podstate import cri

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
    assert not rec.repairs._stopping(by_id["aaa"]) and rec.repairs._stopping(by_id["bbb"])
    assert len(calls) == 1  # one listing serves the repairs of a pass
    now[0] += 5
    rec.repairs._stopping(by_id["aaa"])
    assert len(calls) == 2

    class Silent(Listing):
        def states(self):
            return None  # the runtime cannot tell: never a reason to skip

    rec = Reconciler(ReconcileConfig(cache_dirs=[str(tmp_path)]), lambda _s: None, Silent())
    assert not rec.repairs._stopping(by_id["bbb"])


def test_free_addresses_come_from_host_local_s_own_store(tmp_path):
    import base64
    import json

    ipam_dir = tmp_path / "ipam"
    (ipam_dir / "net1").mkdir(parents=True)
    (ipam_dir / "net1" / "10.9.0.2").write_text("aaa\r\neth0")
    (ipam_dir / "net1" / "10.9.0.3").write_text("")  # a stale empty file: free
    conf = {"cniVersion": "1.0.0", "name": "net1", "plugins": [{"type": "bridge", "ipam": {
        "type": "host-local", "subnet": "10.9.0.0/28", "dataDir": str(ipam_dir)}}]}
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "net1-aaa-eth0").write_text(json.dumps({
        "kind": "cniCacheV1", "containerId": "aaa", "ifName": "eth0", "networkName": "net1", "netns": "/x",
        "config": base64.b64encode(json.dumps(conf).encode()).decode()}))
    now = [0.0]
    rec = Reconciler(ReconcileConfig(cache_dirs=[str(tmp_path)]), lambda _s: None, clock=lambda: now[0])
    rec.read_pools()
    assert rec.pools == [{"network": "net1", "data_dir": str(ipam_dir), "range_set": "10.9.0.1-10.9.0.14",
                          "capacity": 13, "reserved": 1, "free": 12}]
    (ipam_dir / "net1" / "10.9.0.4").write_text("bbb\r\neth0")
    rec.read_pools()
    assert rec.pools[0]["free"] == 12  # read at most every POOLS_EVERY seconds
    now[0] += 31
    rec.read_pools()
    assert rec.pools[0]["free"] == 11
