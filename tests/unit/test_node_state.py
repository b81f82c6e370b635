"""Reading node state without a kernel: libcni cache entries, plugin files, the GC plan."""

from __future__ import annotations

import base64
import json

from cnichain.plugins.host_local.kernel import LAST_IP_PREFIX
from cnichain.podstate import cache, files, view

CONFLIST = {"cniVersion": "1.0.0", "name": "k8s", "plugins": [
    {"type": "bridge", "ipam": {"type": "host-local", "dataDir": "/srv/ipam", "subnet": "10.1.0.0/24"}},
    {"type": "tuning", "dataDir": "/srv/tuning"}]}


def libcni_entry(cid: str = "abc123", sandbox: str = "/var/run/netns/cni-1") -> bytes:
    """What containerd's libcni writes to /var/lib/cni/results."""
    return json.dumps({
        "kind": "cniCacheV1", "containerId": cid, "ifName": "eth0", "networkName": "k8s",
        "config": base64.b64encode(json.dumps(CONFLIST).encode()).decode(),
        "cniArgs": [["K8S_POD_NAME", "web"]], "capabilityArgs": {"portMappings": []},
        "result": {"cniVersion": "1.0.0", "interfaces": [{"name": "veth1"}, {"name": "eth0", "sandbox": sandbox}],
                   "ips": [{"address": "10.1.0.5/24", "interface": 1}]},
    }).encode()


def test_libcni_entry_is_read_with_its_config_and_sandbox():
    e = cache.parse_entry("/x", libcni_entry())
    assert (e.network, e.container_id, e.ifname, e.netns) == ("k8s", "abc123", "eth0", "/var/run/netns/cni-1")
    assert e.config["name"] == "k8s" and e.cni_args == [("K8S_POD_NAME", "web")] and e.ips() == ["10.1.0.5/24"]
    assert e.netns_alive is False
    assert view.discovered_dirs([e]) == (["/srv/ipam"], ["/srv/tuning"])


def test_unsafe_or_foreign_entries_are_skipped():
    assert cache.parse_entry("/x", libcni_entry(cid="../../etc")) is None
    assert cache.parse_entry("/x", b"not json") is None
    assert cache.parse_entry("/x", json.dumps({"kind": "other"}).encode()) is None


def test_cache_dir_listing(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "k8s-abc123-eth0").write_bytes(libcni_entry())
    (results / "k8s-abc123-eth0.tmp1").write_bytes(b"{")
    assert [e.container_id for e in cache.read_cache(str(tmp_path))] == ["abc123"]
    assert cache.read_cache(str(tmp_path / "missing")) == []


def test_plugin_files(tmp_path):
    net = tmp_path / "ipam" / "k8s"
    net.mkdir(parents=True)
    (net / "10.1.0.5").write_bytes(b"abc123\r\neth0")
    (net / "10.1.0.6").write_bytes(b"legacy1")
    (net / "10.1.0.7").write_bytes(b"")  # stale: held by nobody
    (net / f"{LAST_IP_PREFIX}0").write_bytes(b"10.1.0.7")
    (net / "lock").write_bytes(b"")
    got = sorted((r.ip, r.container_id, r.ifname) for r in files.read_reservations(str(tmp_path / "ipam")))
    assert got == [("10.1.0.5", "abc123", "eth0"), ("10.1.0.6", "legacy1", None)]
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    (tuning / "abc_123_net1.json").write_text(json.dumps({"mtu": 1500}))
    [b] = files.read_tuning_backups(str(tuning))
    assert (b.container_id, b.ifname, b.saved) == ("abc_123", "net1", {"mtu": 1500})
    assert files.read_reservations("relative") == []


def test_pools_report_free_addresses_per_range_set(tmp_path):
    """inspect's exhaustion report (STATUS stays 0 on a full range; operators look here)."""
    from cnichain.podstate import render

    net = tmp_path / "ipam" / "k8s"
    net.mkdir(parents=True)
    for ip in ("10.1.0.2", "10.1.0.3"):
        (net / ip).write_bytes(b"abc123\r\neth0")
    (net / "10.1.0.4").write_bytes(b"")  # stale: free
    ipam = {"type": "host-local", "dataDir": str(tmp_path / "ipam"),
            "ranges": [[{"subnet": "10.1.0.0/29"}], [{"subnet": "10.2.0.0/30"}]]}
    config = {"cniVersion": "1.1.0", "name": "k8s", "plugins": [{"type": "bridge", "ipam": ipam}]}
    entry = cache.CacheEntry(path="/x", network="k8s", container_id="abc123", ifname="eth0", config=config)
    pools = view.pools_of([entry, entry])
    assert [p.to_dict() for p in pools] == [
        {"network": "k8s", "data_dir": str(tmp_path / "ipam"), "range_set": "10.1.0.1-10.1.0.6",
         "capacity": 5, "reserved": 2, "free": 3},
        {"network": "k8s", "data_dir": str(tmp_path / "ipam"), "range_set": "10.2.0.1-10.2.0.2",
         "capacity": 1, "reserved": 0, "free": 1},
    ]
    (net / "10.2.0.2").write_bytes(b"abc123\r\neth0")
    text = render.render_text(view.NodeView([], pools=view.pools_of([entry])))
    assert "pool k8s  10.2.0.1-10.2.0.2  0 of 1 free" in text and "EXHAUSTED: the next ADD fails" in text
    bad = cache.CacheEntry(path="/x", network="k8s", container_id="c", ifname="eth0",
                           config={"cniVersion": "1.1.0", "plugins": [{"ipam": {"type": "host-local", "ranges": 7}}]})
    assert view.pools_of([bad]) == []


def test_gc_plan_keeps_every_interface_of_a_valid_pod_and_deletes_dead_ones():
    from cnichain.podstate import gc

    conflist = dict(CONFLIST, cniVersion="1.1.0")
    alive = cache.parse_entry("/c/results/k8s-abc123-net1", libcni_entry().replace(b'"eth0"', b'"net1"'))
    dead = cache.parse_entry("/c/results/k8s-dead1-eth0", libcni_entry(cid="dead1", sandbox="/nonexistent/ns"))
    plan = gc.build([alive, dead], conflist, gc.parse_valid(["abc123"]), None)
    assert [(d.entry.container_id, d.reason) for d in plan.deletions] == [("dead1", "not in --valid")]
    [col] = plan.collections
    assert col.valid == [("abc123", "net1")] and not col.skipped
    plan = gc.build([alive, dead], None, None, None)  # liveness from the cached sandbox paths
    assert [d.entry.container_id for d in plan.deletions] == ["abc123", "dead1"]
    assert plan.collections[0].skipped.startswith("cniVersion 1.0.0 has no GC")
    assert "would DEL   k8s/dead1/eth0: netns /nonexistent/ns is gone" in gc.render(plan)
