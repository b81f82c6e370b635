"""The pure parts of early protection and of uncached collection: inotify records, which executable
is ours, and which containers' state no cache entry names."""

from __future__ import annotations

import os
import shutil
import struct

from cnichain.agent.reconcile import cache_events as ce
from cnichain.agent.reconcile.ownership import Ownership
from cnichain.plugins.bandwidth.config import ifb_name
from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR
from cnichain.node import launchers
from cnichain.plugins.portmap.listing import HeldMapping
from cnichain.plugins.bridge.state import Masquerade
from cnichain.podstate import files, uncached
from cnichain.podstate.view import ContainerView, NodeView


def _event(wd: int, mask: int, name: str = "") -> bytes:
    raw = name.encode()
    raw += b"\0" * ((-len(raw)) % 16 or (16 if raw else 0))
    return struct.pack("iIII", wd, mask, 0, len(raw)) + raw


def test_inotify_records_name_new_and_removed_entries_and_skip_temporaries():
    dirs = {1: "/c", 2: "/c/results"}
    data = (_event(2, ce.IN_CLOSE_WRITE, "net-abc-eth0") + _event(2, ce.IN_MOVED_TO, "net-def-eth0")
            + _event(2, ce.IN_CLOSE_WRITE, "net-x-eth0.tmp123") + _event(2, ce.IN_DELETE, "net-old-eth0")
            + _event(9, ce.IN_CLOSE_WRITE, "unknown-wd"))
    got = ce.parse(data, dirs)
    assert got.written == {"/c/results/net-abc-eth0", "/c/results/net-def-eth0"}
    assert got.removed == {"/c/results/net-old-eth0"} and not got.rescan
    assert ce.parse(_event(1, ce.IN_CREATE | ce.IN_ISDIR, "results"), dirs).rescan  # libcni made results/
    assert ce.parse(_event(2, ce.IN_IGNORED), dirs).rescan  # results/ removed: watch again
    assert ce.parse(_event(-1, ce.IN_Q_OVERFLOW), dirs).rescan  # events lost: look at everything
    assert not ce.parse(b"\x01\x02", dirs)  # a truncated buffer is nothing, never a crash


def test_a_cache_watch_sees_a_file_written_into_results(tmp_path):
    watch = ce.CacheWatch([str(tmp_path)])
    try:
        assert watch.watching == [str(tmp_path)]  # no results/ yet
        os.mkdir(tmp_path / "results")
        assert watch.read().rescan and str(tmp_path / "results") in watch.watching
        (tmp_path / "results" / "n-c-eth0").write_text("{}")
        assert watch.read().written == {str(tmp_path / "results" / "n-c-eth0")}
    finally:
        watch.close()


def test_only_our_own_executables_make_unseen_state_ours(tmp_path):
    ours, other = tmp_path / "ours", tmp_path / "other"
    launchers.install(str(ours), plugins=["portmap", "bandwidth"], agent_socket="")
    other.mkdir()
    (other / "portmap").write_text("#!/bin/sh\nexec true\n")
    os.chmod(other / "portmap", 0o755)
    shutil.copy2(ours / "bandwidth", other / "bandwidth")  # a copy of our launcher is still ours
    assert launchers.written_here(str(ours / "portmap"), "portmap")
    assert not launchers.written_here(str(ours / "portmap"), "bandwidth")  # not that plugin's launcher
    assert not launchers.written_here(str(other / "portmap"), "portmap")
    first = Ownership(lambda: [str(other), str(ours)])  # libcni's order: the first match is what runs
    assert not first.ours("n/c/eth0", "portmap") and first.ours("n/c/eth0", "bandwidth")
    first.served("n/c/eth0", "portmap")  # the agent answered that ADD itself
    assert first.ours("n/c/eth0", "portmap") and not first.ours("n/d/eth0", "portmap")
    assert Ownership(lambda: [str(ours)]).ours("n/c/eth0", "portmap")
    assert not Ownership(lambda: [str(ours)]).ours("n/c/eth0", "../portmap")


def _node() -> NodeView:
    lost = ContainerView("lost", reservations=[files.Reservation("net", "10.1.0.5", "lost", "eth0",
                                                                 f"{DEFAULT_DATA_DIR}/net/10.1.0.5")],
                         port_mappings=[HeldMapping("net", "lost", "tcp", 8080, "", 4, "10.1.0.5", 80)],
                         shaping=[{"kind": "ifb", "ifb": ifb_name("net", "lost"), "network": "net", "container_id": "lost"}],
                         masquerade=[Masquerade("net", "lost", "eth0", ["10.1.0.5/24"])])
    live = ContainerView("live", reservations=[files.Reservation("net", "10.1.0.6", "live", "eth0", "/x/net/10.1.0.6")])
    other_net = ContainerView("elsewhere", reservations=[files.Reservation("net", "10.1.0.7", "elsewhere", "eth1",
                                                                           "/x/net/10.1.0.7")])
    anonymous = ContainerView("anon", port_mappings=[HeldMapping("", "anon", "tcp", 81, "", 4, "10.1.0.9", 80)])
    return NodeView([lost, live, other_net, anonymous])


def test_uncached_state_is_a_leak_only_when_the_runtime_answered_and_lacks_it():
    node = _node()
    assert uncached.find(node, None, set()) == []  # no listing, or a failed one: cannot tell
    leaks = uncached.find(node, {"live"}, {"elsewhere"})  # "elsewhere" is cached on another network
    assert [lk.key for lk in leaks] == ["net/lost"]
    (leak,) = leaks
    assert leak.held() == ["host-local 10.1.0.5", "portmap tcp/8080", f"ifb {ifb_name('net', 'lost')}", "masquerade 10.1.0.5/24"]
    assert leak.held_by["host-local"][0][0] == DEFAULT_DATA_DIR
    assert uncached.render(leaks)[0].startswith("would collect net/lost (no cache entry")
    assert uncached.find(node, {"live", "lost"}, set())[0].key == "net/elsewhere"  # listed: kept


def test_an_add_the_agent_served_reaches_the_reconciler_as_ownership(tmp_path):
    import socket
    from types import SimpleNamespace

    from cnichain.agent.reconcile import Process, loop
    from cnichain.agent.reconcile.settings import ReconcileConfig

    proc = Process(ReconcileConfig(), lambda _m: None)
    proc.hints, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    theirs.setblocking(False)
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_IFNAME": "eth0"}
    stdin = b'{"cniVersion": "1.0.0", "name": "net", "type": "portmap"}'
    proc.served(SimpleNamespace(command="ADD", plugin_type="portmap", env=env, stdin=stdin), 0)
    proc.served(SimpleNamespace(command="ADD", plugin_type="bandwidth", env=env, stdin=stdin), 1)  # failed: no hint
    proc.served(SimpleNamespace(command="DEL", plugin_type="bridge", env=env, stdin=stdin), 0)  # not an ADD
    proc.hints.send(b"not json\n{}")  # malformed: dropped
    ownership = Ownership(lambda: [])
    assert loop._read_hints(theirs, ownership) == 1
    assert ownership.ours("net/c1/eth0", "portmap") and not ownership.ours("net/c1/eth0", "bandwidth")
    proc.hints.close()
    theirs.close()
