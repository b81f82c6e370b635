"""The agent's reconciler against a real kernel: lab namespaces, real packets, real plugin state.

A node namespace runs our bridge (ipMasq), host-local, portmap and bandwidth through the runner
(which caches results the way libcni does, conflist included); an agent runs inside the node
namespace with its reconciler scoped to the lab's result cache and a long sweep interval, so a
repair seen before the sweep came from the kernel's notifications.  A "client" namespace plays a
remote machine.  Every wait is a bounded poll; no test asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Iterator

import pytest

from cnichain.podstate.runtime import Attachment, PluginFailed
from tests.polling import wait_for
from cnichain.plugins.bandwidth.config import ifb_name
from cnichain.plugins.bridge.rules import SPOOF_TABLE
from cnichain.plugins.portmap import names

from tests.integration.reconciler_node import NODE4, Node, conflist, masquerade_rules
from tests.runtime import leftovers

pytestmark = pytest.mark.integration


@pytest.fixture
def node(lab, make_runtime) -> Iterator[Node]:
    with Node(lab, make_runtime) as n:
        yield n


def tc_json(lab, *argv: str) -> list:
    out = lab.run(lab.node, "tc", "-j", *argv, check=False)
    return json.loads(out.stdout or "[]") if out.returncode == 0 else []


def host_veth(result: dict) -> str:
    return next(i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"].startswith("veth"))


def all_ok(node: Node, att: Attachment) -> bool:
    return node.plugin_states(att) == {"bridge": "ok", "portmap": "ok", "bandwidth": "ok"}


def test_flushed_ruleset_and_deleted_qdiscs_come_back_from_the_plugins_own_state(node, lab):
    pod, att, result = node.pod("pod", 8080)
    veth = host_veth(result)
    assert node.fetch(8080) == "pod"
    with node.agent("--sweep-interval", "600", "--grace", "600") as agent:
        wait_for("the first sweep to see every plugin's state installed", lambda: all_ok(node, att))
        # A firewall reload: everything in nftables is gone, ours with it.
        lab.run(lab.node, "nft", "flush", "ruleset")
        flushed = time.monotonic()
        assert "cnichain" not in lab.run(lab.node, "nft", "list", "tables").stdout
        assert wait_for("the hostPort to answer again", lambda: node.fetch(8080) == "pod", timeout=15)
        print(f"hostPort answered again {time.monotonic() - flushed:.3f} s after the flush")  # reported, not asserted
        assert "masquerade" in masquerade_rules(lab)
        node.runtime.check(node.conf, Attachment(att.container_id, pod, "eth0"))  # CHECK of every plugin passes
        # Someone deletes the pod's shaping: the TBF on its veth and its IFB.
        lab.run(lab.node, "tc", "qdisc", "del", "dev", veth, "root")
        lab.run(lab.node, "ip", "link", "del", ifb_name(node.conf.name, att.container_id))
        wait_for("shaping to return", lambda: any(q.get("kind") == "tbf" for q in tc_json(lab, "qdisc", "show", "dev", veth))
                 and tc_json(lab, "qdisc", "show", "dev", ifb_name(node.conf.name, att.container_id)))
        node.runtime.check(node.conf, Attachment(att.container_id, pod, "eth0"))
        # Only the redirect to the IFB: egress shaping silently stops; the survey notices it.
        lab.run(lab.node, "tc", "filter", "del", "dev", veth, "ingress")
        wait_for("the redirect to return", lambda: tc_json(lab, "filter", "show", "dev", veth, "ingress"))
        node.runtime.check(node.conf, Attachment(att.container_id, pod, "eth0"))
        # The view is published after the pass that repaired: wait for it, bounded.
        wait_for("the repairs to be counted", lambda: 'plugin="bandwidth",outcome="ok"} 2' in agent.metrics())
        metrics = agent.metrics()
        assert 'cnichain_agent_reconcile_repairs_total{plugin="portmap",outcome="ok"} 1' in metrics
        assert 'cnichain_agent_reconcile_repairs_total{plugin="bridge",outcome="ok"} 1' in metrics
        assert 'cnichain_agent_reconcile_repairs_total{plugin="bandwidth",outcome="ok"} 2' in metrics
        assert "cnichain_agent_reconcile_sweeps_total 1\n" in metrics  # only the first sweep: the events did it
        assert "cnichain_agent_reconciler_up 1" in metrics
        # host-local's own store: a /24 less the gateway, one pod.
        assert 'cnichain_agent_ipam_free_addresses{network="rcnet",range_set="10.78.0.1-10.78.0.254"} 252' in metrics
        with open(agent.log_path) as fh:
            log = fh.read()
        assert "reconcile: repaired portmap of rcnet/ctr-pod/eth0" in log
        shown = cli("agent", "status", "--socket", node.sock).stdout
        assert "  rcnet/ctr-pod/eth0: bandwidth " in shown  # each plugin's state: ok, or repaired since
        assert "bandwidth/ok 2" in shown and "portmap/ok 1" in shown and "bridge/ok 1" in shown
    node.runtime.delete(node.conf, att)
    assert leftovers.portmap_held(lambda *argv, **kw: lab.run(lab.node, *argv, **kw), "rcnet", "ctr-pod") == []


def test_dry_run_changes_nothing(node, lab):
    # (State that is not ours is left alone: tests/integration/test_reconcile_early.py.)
    _pod, att, _result = node.pod("pod2", 8082)
    with node.agent("--reconcile", "dry-run", "--sweep-interval", "0.5", "--grace", "600") as agent:
        wait_for("the first sweep", lambda: all_ok(node, att))
        lab.run(lab.node, "nft", "flush", "ruleset")
        wait_for("the dry run to notice", lambda: node.plugin_states(att).get("portmap") == "missing")
        assert node.fetch(8082) == ""
        wait_for("the dry run to be counted", lambda: 'outcome="dry-run"} 1' in agent.metrics())
        assert 'cnichain_agent_reconcile_repairs_total{plugin="portmap",outcome="dry-run"} 1' in agent.metrics()
    node.runtime.delete(node.conf, att)


def test_something_that_keeps_removing_our_rules_is_not_fought(node, lab):
    _pod, att, _result = node.pod("pod", 8083)
    with node.agent("--sweep-interval", "600", "--grace", "600") as agent:
        wait_for("the first sweep", lambda: all_ok(node, att))
        for _ in range(8):
            if node.plugin_states(att).get("portmap") == "backoff":
                break
            lab.run(lab.node, "nft", "flush", "ruleset")
            wait_for("a repair or a back-off", lambda: node.fetch(8083) == "pod"
                     or node.plugin_states(att).get("portmap") == "backoff")
        wait_for("the back-off", lambda: node.plugin_states(att).get("portmap") == "backoff")
        assert "cnichain_agent_reconcile_backoffs_total 1" in agent.metrics() or \
            "cnichain_agent_reconcile_backoffs_total 2" in agent.metrics()
    node.runtime.delete(node.conf, att)


def test_a_pod_whose_netns_vanished_is_collected_after_grace_and_live_pods_keep_theirs(node, lab):
    dead_ns, dead, _ = node.pod("dead", 8084)
    live_ns, live, _ = node.pod("live", 8085)
    ipam_dir = os.path.join(lab.workdir, "ipam", "rcnet")
    cache = os.path.join(node.cache_root, "results")

    def owners() -> list[str]:
        out = []
        for name in os.listdir(ipam_dir):
            if name[0].isdigit():
                with open(os.path.join(ipam_dir, name)) as fh:
                    out.append(fh.read().split()[0])
        return out

    assert sorted(owners()) == ["ctr-dead", "ctr-live"]
    with node.agent("--sweep-interval", "0.5", "--grace", "1") as agent:
        wait_for("the first sweep", lambda: all_ok(node, live) and all_ok(node, dead))
        # The pod's processes are gone and its namespace removed behind the runtime's back: no DEL.
        lab.delete_netns(dead_ns)
        wait_for("the dead pod's cache entry to go", lambda: not os.path.exists(os.path.join(cache, "rcnet-ctr-dead-eth0")))
        wait_for("the collection to be counted", lambda: "leaks_collected_total 1" in agent.metrics())
        assert owners() == ["ctr-live"]
        links = lab.run(lab.node, "ip", "-o", "link", "show").stdout
        assert ifb_name("rcnet", "ctr-dead") not in links and ifb_name("rcnet", "ctr-live") in links
        def held(cid: str) -> list[str]:
            return leftovers.portmap_held(lambda *argv, **kw: lab.run(lab.node, *argv, **kw), "rcnet", cid)
        assert held("ctr-dead") == [] and held("ctr-live") != []
        assert "ctr-dead" not in masquerade_rules(lab) and "ctr-live" in masquerade_rules(lab)
        assert node.fetch(8085) == "live"
        metrics = agent.metrics()
        assert "cnichain_agent_reconcile_leaks_found_total 1" in metrics
        assert "cnichain_agent_reconcile_leaks_collected_total 1" in metrics
        assert os.path.exists(os.path.join(cache, "rcnet-ctr-live-eth0"))
    node.runtime.delete(node.conf, live)
    assert live_ns


def test_with_the_agent_gone_the_reconciler_is_gone_and_plugins_work_as_before(node, lab):
    _pod, att, _ = node.pod("pod", 8086)
    with node.agent("--sweep-interval", "600") as agent:
        wait_for("the first sweep", lambda: all_ok(node, att))
        pid = int(node.status()["pid"])
        agent.kill()  # SIGKILL: no drain, no chance to stop its child
        wait_for("the reconciler to follow its agent", lambda: not os.path.exists(f"/proc/{pid}")
                 or open(f"/proc/{pid}/stat").read().split()[2] == "Z")
    lab.run(lab.node, "nft", "flush", "ruleset")
    time.sleep(0.5)
    assert node.fetch(8086) == ""  # nothing repairs it: the agent is down
    with pytest.raises(PluginFailed):
        node.runtime.check(node.conf, Attachment(att.container_id, att.netns, "eth0"))
    node.runtime.delete(node.conf, att)  # DEL of a flushed pod still succeeds
    _pod2, att2, _ = node.pod("pod2", 8087)
    assert node.fetch(8087) == "pod2"
    node.runtime.delete(node.conf, att2)


def spoof_rules(lab) -> str:
    return lab.run(lab.node, "nft", "list", "table", "bridge", SPOOF_TABLE, check=False).stdout


def test_a_flushed_mac_spoof_check_comes_back_and_drops_a_changed_mac_again(node, lab):
    node.conf = conflist(lab, macspoofchk=True)
    pod, att, result = node.pod("pod", 8090)
    veth = host_veth(result)
    mac = next(i["mac"] for i in result["interfaces"] if i.get("sandbox"))
    assert veth in spoof_rules(lab) and mac in spoof_rules(lab)
    with node.agent("--sweep-interval", "600", "--grace", "600") as agent:
        wait_for("the first sweep", lambda: all_ok(node, att))
        lab.run(lab.node, "nft", "flush", "ruleset")
        assert SPOOF_TABLE not in lab.run(lab.node, "nft", "list", "tables").stdout
        wait_for("the spoof check to return", lambda: veth in spoof_rules(lab) and mac in spoof_rules(lab))
        wait_for("the hostPort to answer again", lambda: node.fetch(8090) == "pod", timeout=15)
        # Real frames: the pod takes another MAC and the node forgets the old one; the pod's
        # answers now carry a source MAC the repaired rule drops.
        lab.run(pod, "ip", "link", "set", "eth0", "address", "02:00:00:00:be:ef")
        lab.run(lab.node, "ip", "neigh", "flush", "dev", "rc0")
        assert node.fetch(8090) == ""
        lab.run(pod, "ip", "link", "set", "eth0", "address", mac)
        lab.run(lab.node, "ip", "neigh", "flush", "dev", "rc0")
        assert wait_for("the pod's own MAC to pass again", lambda: node.fetch(8090) == "pod", timeout=15)
        wait_for("the repair to be counted", lambda: 'plugin="bridge",outcome="ok"} 1' in agent.metrics())
    node.runtime.delete(node.conf, att)
    assert veth not in spoof_rules(lab)


def test_a_single_lost_map_element_is_put_back(node, lab):
    """portmap's map layout: one element deleted by hand (the pod's DNAT target) stops its hostPort;
    the sweep finds the pod not intact and its ADD, one transaction, adds back what is missing."""
    pod, att, _result = node.pod("one", 8086)
    assert node.fetch(8086) == "one"
    target_map = names.TO_MAPS[("any", 4)][0]
    with node.agent("--sweep-interval", "0.5", "--grace", "600") as agent:
        wait_for("the first sweep to see every plugin's state installed", lambda: all_ok(node, att))
        lab.run(lab.node, "nft", "delete", "element", names.FAMILY, names.TABLE, target_map, "{ tcp . 8086 }")
        wait_for("the hostPort to answer again", lambda: node.fetch(8086) == "one", timeout=15)
        wait_for("the repair to be counted",
                 lambda: 'cnichain_agent_reconcile_repairs_total{plugin="portmap",outcome="ok"} 1' in agent.metrics())
        node.runtime.check(node.conf, Attachment(att.container_id, pod, "eth0"))
    node.runtime.delete(node.conf, att)


# -- conntrack: the plugin's own job at ADD and DEL, agent or not ------------------------------------

UDP_ASK = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('', int(sys.argv[3])))\n"
    "s.settimeout(float(sys.argv[4]))\n"
    "s.sendto(b'ping\\n', (sys.argv[1], int(sys.argv[2])))\n"
    "try: print(s.recv(200).decode().strip())\n"
    "except (socket.timeout, ConnectionRefusedError): pass\n"
)


def udp_ask(node: Node, port: int, sport: int) -> str:
    """One datagram from a fixed client port (so every ask hits the same conntrack entry), and the
    first answer.  The answer may take seconds on a loaded machine (the server forks a shell per
    datagram), so the wait is long; it ends as soon as the answer is there."""
    for _ in range(3):  # bounded: a datagram can be lost while an address settles
        out = node.lab.run(node.client, sys.executable, "-c", UDP_ASK, NODE4, str(port), str(sport), "5",
                           check=False, timeout=20)
        if out.stdout.strip():
            return out.stdout.strip()
    return ""


def udp_server(node: Node, ns: str, port: int, text: str) -> None:
    node.servers.append(node.lab.popen(ns, "socat", f"UDP-RECVFROM:{port},fork,reuseaddr", f"SYSTEM:echo {text}",
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_for("the UDP server", lambda: node.lab.run(ns, "socat", "-T0.3", "-", f"UDP:127.0.0.1:{port}", check=False,
                                                    input="ping\n").stdout.strip() == text, 10)


def conntrack_to(lab, port: int) -> str:
    return lab.run(lab.node, "conntrack", "-L", "-p", "udp", "--dport", str(port), check=False).stdout


def test_a_udp_flow_follows_its_host_port_to_the_new_pod_and_to_the_host(node, lab):
    port, sport = 5455, 40455
    old_ns, old, old_result = node.pod("old", port)
    udp_server(node, old_ns, 80, "old")
    assert udp_ask(node, port, sport) == "old"
    old_ip = old_result["ips"][0]["address"].split("/")[0]
    assert f"src={old_ip}" in conntrack_to(lab, port)
    node.runtime.delete(node.conf, old)
    # DEL flushed the flows DNATed to the deleted pod: a hostNetwork server on the port gets the
    # client's next datagram instead of a blackhole towards the old address (plugins#1190).
    assert f"src={old_ip}" not in conntrack_to(lab, port)
    udp_server(node, lab.node, port, "host")
    assert udp_ask(node, port, sport) == "host"
    node.servers.pop().kill()
    new_ns, new, _ = node.pod("new", port)
    udp_server(node, new_ns, 80, "new")
    assert udp_ask(node, port, sport) == "new"  # ADD flushed the un-NATed entry the host server left
    node.runtime.delete(node.conf, new)


# -- result-cache hygiene: inspect reports, gc removes ------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess:
    import sys

    proc = subprocess.run([sys.executable, "-m", "cnichain.cli.app", *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_inspect_reports_stale_cache_entries_and_gc_removes_them(node, lab):
    dead_ns, dead, _ = node.pod("dead", 8088)
    _live_ns, live, _ = node.pod("live", 8089)
    cache = os.path.join(node.cache_root, "results")
    # An entry of a network whose conflist nothing caches, whose pod is gone.
    foreign = os.path.join(cache, "othernet-ghost-eth0")
    with open(foreign, "w") as fh:
        json.dump({"kind": "cniCacheV1", "containerId": "ghost", "ifName": "eth0", "networkName": "othernet",
                   "netns": "/run/netns/" + lab.name("never-existed"), "result": {}}, fh)
    lab.delete_netns(dead_ns)
    src = ["--cache-dir", node.cache_root, "--ipam-dir", os.path.join(lab.workdir, "ipam"), "--node-netns", lab.node]
    doc = json.loads(cli("inspect", "--json", *src).stdout)
    stale = {s["container_id"]: s for s in doc["stale_cache"]}
    assert set(stale) == {"ctr-dead", "ghost"}
    assert stale["ctr-dead"]["has_config"] and not stale["ghost"]["has_config"]
    assert "2 stale cache entries" in cli("inspect", *src).stdout
    plan = cli("gc", *src).stdout
    assert "would DEL   rcnet/ctr-dead/eth0" in plan and "would drop  othernet/ghost/eth0" in plan
    assert os.path.exists(foreign)
    out = cli("gc", "--apply", "--bin-dir", node.runtime.bin_dirs[0], *src).stdout
    assert f"removed stale cache file {foreign}" in out
    assert sorted(os.listdir(cache)) == ["rcnet-ctr-live-eth0"]
    assert json.loads(cli("inspect", "--json", *src).stdout)["stale_cache"] == []
    node.runtime.delete(node.conf, live)
