"""`cnichain inspect` and `cnichain gc` on a throwaway node: pods made by our runner, orphans planted
straight into the kernel and the plugins' files without any runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cnichain.podstate.runtime import Attachment, ConfList, Runtime
from cnichain.plugins.bandwidth.config import ifb_name
from cnichain.plugins.bandwidth.kernel import ifb_alias
from cnichain.plugins.portmap import plan as planning
from cnichain.plugins.portmap.config import PortmapConfig, PortMapping

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "cnichain.cli.app"]
NET = "opsnet"
MAPPING = {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}
BANDWIDTH = {"ingressRate": 8_000_000, "ingressBurst": 800_000, "egressRate": 4_000_000, "egressBurst": 400_000}


@pytest.fixture
def node(lab, plugin_dir, tmp_path):
    """A conflist with every plugin that keeps state, its dirs in tmp_path, and a runner for it."""
    conf = {
        "cniVersion": "1.1.0",
        "name": NET,
        "plugins": [
            {"type": "bridge", "bridge": f"br{lab.run_id}", "isGateway": True, "ipMasq": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/24"}]], "dataDir": str(tmp_path / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            # The reference's layout: its host IFB is what the orphan and GC cases below look for.
            {"type": "bandwidth", "capabilities": {"bandwidth": True}, "layout": "host"},
            {"type": "tuning", "dataDir": str(tmp_path / "tuning"), "mtu": 1400,
             "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}},
        ],
    }
    path = tmp_path / "ops.conflist"
    path.write_text(json.dumps(conf))
    runtime = Runtime([plugin_dir], str(tmp_path / "cache"), node_netns=lab.node)
    return ConfList.load(str(path)), runtime, path


def add_pod(lab, conf: ConfList, runtime: Runtime, cid: str) -> tuple[str, dict]:
    pod = lab.netns(cid)
    att = Attachment(cid, pod, "eth0", capability_args={"portMappings": [MAPPING], "bandwidth": BANDWIDTH})
    return pod, runtime.add(conf, att)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def sources(lab, tmp_path) -> list[str]:
    return ["--cache-dir", str(tmp_path / "cache"), "--ipam-dir", str(tmp_path / "ipam"),
            "--tuning-dir", str(tmp_path / "tuning"), "--node-netns", lab.node]


def inspect(lab, tmp_path, *extra: str) -> dict:
    return json.loads(cli("inspect", "--json", *sources(lab, tmp_path), *extra).stdout)


def containers(doc: dict) -> dict:
    return {c["container_id"]: c for c in doc["containers"]}


def plant_ghost(lab, tmp_path, cid: str = "ghost") -> None:
    """What a crashed runtime leaves: state of all kinds for a container nobody cached."""
    folder = tmp_path / "ipam" / NET
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "10.88.0.200").write_bytes(f"{cid}\r\neth0".encode())
    (tmp_path / "tuning").mkdir(exist_ok=True)
    (tmp_path / "tuning" / f"{cid}_eth0.json").write_text(json.dumps({"mtu": 1500}))
    cfg = PortmapConfig(mappings=(PortMapping(9999, 99, "udp"),))
    plan = planning.plan_owner(NET, cid, cfg, {4: "10.88.0.200"})
    commands = planning.skeleton() + planning.fast_add(plan)
    lab.run(lab.node, "nft", "-j", "-f", "-", input=json.dumps({"nftables": commands}))
    ifb = ifb_name(NET, cid)
    lab.run(lab.node, "ip", "link", "add", ifb, "type", "ifb")
    lab.run(lab.node, "ip", "link", "set", ifb, "alias", ifb_alias(NET, cid))


def test_inspect_shows_what_each_plugin_holds(lab, node, tmp_path):
    conf, runtime, _ = node
    _, result = add_pod(lab, conf, runtime, "pod1")
    pod_ip = result["ips"][0]["address"].split("/")[0]

    doc = inspect(lab, tmp_path, "--container", "pod1")
    [c] = doc["containers"]
    assert c["container_id"] == "pod1" and not c["orphan"], c
    assert c["attachments"][0]["netns_alive"] is True
    assert [(r["network"], r["ip"], r["ifname"]) for r in c["host_local"]] == [(NET, pod_ip, "eth0")]
    [m] = c["portmap"]
    assert (m["protocol"], m["host_port"], m["host_ip"], m["pod_ip"], m["pod_port"]) == ("tcp", 8080, "", pod_ip, 80)
    [bw] = c["bandwidth"]
    assert bw["ifb"] == ifb_name(NET, "pod1") and bw["host_veth"].startswith("veth")
    assert bw["egress"]["rate_bits"] == BANDWIDTH["egressRate"]
    assert bw["ingress"]["rate_bits"] == BANDWIDTH["ingressRate"]
    assert abs(bw["egress"]["burst_bits"] - BANDWIDTH["egressBurst"]) <= 0.02 * BANDWIDTH["egressBurst"]
    [t] = c["tuning"]
    assert t["ifname"] == "eth0" and "mtu" in t["saved"]
    assert "net/ipv4/conf/eth0/arp_filter" in t["saved"]["sysctl"]
    [mq] = c["masquerade"]
    assert mq["addresses"] == [pod_ip] and mq["ifname"] == "eth0"

    text = cli("inspect", NET, *sources(lab, tmp_path)).stdout
    assert "container pod1" in text and f"tcp 0.0.0.0:8080 -> {pod_ip}:80" in text and "(alive)" in text
    assert "ORPHAN" not in text


def test_inspect_flags_a_pod_whose_netns_is_gone(lab, node, tmp_path):
    conf, runtime, _ = node
    pod, _ = add_pod(lab, conf, runtime, "pod2")
    lab.delete_netns(pod)
    [c] = inspect(lab, tmp_path, "--container", "pod2")["containers"]
    assert c["orphan"]
    assert any("no longer exists" in r for r in c["orphan_reasons"]), c["orphan_reasons"]
    assert any("has no host veth" in r for r in c["orphan_reasons"]), c["orphan_reasons"]


def test_inspect_shows_the_default_layout(lab, node, tmp_path):
    """Layout split: ingress on the host veth, egress on the pod's interface, read inside the pod."""
    conf, runtime, path = node
    data = json.loads(path.read_text())
    data["plugins"][2].pop("layout")
    split = tmp_path / "split.conflist"
    split.write_text(json.dumps(data))
    pod, result = add_pod(lab, ConfList.load(str(split)), runtime, "pod9")
    [c] = inspect(lab, tmp_path, "--container", "pod9")["containers"]
    [bw] = c["bandwidth"]
    assert (bw["kind"], bw["ifname"]) == ("pod", "eth0") and bw["host_veth"].startswith("veth"), bw
    assert bw["egress"]["rate_bits"] == BANDWIDTH["egressRate"]
    assert bw["ingress"]["rate_bits"] == BANDWIDTH["ingressRate"]


def test_inspect_flags_planted_state_without_a_runtime(lab, node, tmp_path):
    conf, runtime, _ = node
    add_pod(lab, conf, runtime, "pod3")
    plant_ghost(lab, tmp_path)
    by_id = containers(inspect(lab, tmp_path))
    ghost = by_id["ghost"]
    assert ghost["orphan"] and not by_id["pod3"]["orphan"]
    assert any("no entry in the result cache" in r for r in ghost["orphan_reasons"])
    assert [r["ip"] for r in ghost["host_local"]] == ["10.88.0.200"]
    assert [(m["protocol"], m["host_port"], m["pod_port"]) for m in ghost["portmap"]] == [("udp", 9999, 99)]
    assert [b["ifb"] for b in ghost["bandwidth"]] == [ifb_name(NET, "ghost")]
    assert [t["ifname"] for t in ghost["tuning"]] == ["eth0"]

    # With an explicit list of live containers, anything else is an orphan whatever the cache says.
    by_id = containers(inspect(lab, tmp_path, "--live", "ghost"))
    assert not any("--live" in r for r in by_id["ghost"]["orphan_reasons"])
    assert "not in the --live list" in by_id["pod3"]["orphan_reasons"]


def test_inspect_refuses_bad_input(lab, tmp_path):
    for args in (["--container", "../etc"], ["--cache-dir", "relative/dir"], ["--node-netns", str(tmp_path / "none")]):
        proc = cli("inspect", *args, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr


def gc_args(lab, tmp_path, plugin_dir) -> list[str]:
    return [*sources(lab, tmp_path), "--bin-dir", plugin_dir]


def test_gc_dry_run_then_apply(lab, node, tmp_path, plugin_dir):
    conf, runtime, path = node
    add_pod(lab, conf, runtime, "alive1")
    gone_ns, _ = add_pod(lab, conf, runtime, "gone1")
    lab.delete_netns(gone_ns)
    plant_ghost(lab, tmp_path)
    cached = tmp_path / "cache" / "results" / f"{NET}-gone1-eth0"
    assert cached.exists()

    dry = cli("gc", str(path), *gc_args(lab, tmp_path, plugin_dir)).stdout
    assert f"would DEL   {NET}/gone1/eth0: netns {gone_ns} is gone" in dry, dry
    assert f"keep  {NET}/alive1/eth0" in dry
    assert f"would GC    {NET} keeping 1 attachment(s)" in dry
    assert "removes ghost: host-local 10.88.0.200, portmap udp/9999, ifb " in dry
    assert "dry run: nothing changed" in dry
    assert cached.exists() and (tmp_path / "ipam" / NET / "10.88.0.200").exists()

    applied = cli("gc", str(path), "--apply", *gc_args(lab, tmp_path, plugin_dir)).stdout
    assert f"deleted {NET}/gone1/eth0" in applied and f"collected {NET}" in applied, applied
    assert not cached.exists()
    by_id = containers(inspect(lab, tmp_path))
    assert "gone1" not in by_id
    ghost = by_id.get("ghost")
    # GC leaves only tuning's backup (tuning keeps no per-network state; DEL is what restores it).
    assert ghost is None or (not ghost["host_local"] and not ghost["portmap"] and not ghost["bandwidth"]), ghost
    alive = by_id["alive1"]
    assert not alive["orphan"] and alive["host_local"] and alive["portmap"] and alive["bandwidth"]


def test_gc_from_a_libcni_cache_without_conflist(lab, node, tmp_path, plugin_dir):
    """containerd's cache carries the conflist (base64) and no netns field: gc needs nothing else."""
    import base64

    conf, runtime, path = node
    pod, _ = add_pod(lab, conf, runtime, "cri1")
    ours = tmp_path / "cache" / "results" / f"{NET}-cri1-eth0"
    entry = json.loads(ours.read_text())
    entry.pop("netns")
    entry["config"] = base64.b64encode(path.read_bytes()).decode()
    libcni = tmp_path / "libcni" / "results"
    libcni.mkdir(parents=True)
    (libcni / ours.name).write_text(json.dumps(entry))
    ours.unlink()
    args = ["--cache-dir", str(tmp_path / "libcni"), "--ipam-dir", str(tmp_path / "ipam"),
            "--node-netns", lab.node, "--bin-dir", plugin_dir]

    assert f"keep  {NET}/cri1/eth0: netns {pod} exists" in cli("gc", *args).stdout
    lab.delete_netns(pod)
    out = cli("gc", "--apply", *args).stdout
    assert f"deleted {NET}/cri1/eth0" in out, out
    assert not (libcni / ours.name).exists()
    assert not [n for n in os.listdir(tmp_path / "ipam" / NET) if n[0].isdigit()]


def test_gc_with_valid_list_collects_everything_else(lab, node, tmp_path, plugin_dir):
    conf, runtime, path = node
    add_pod(lab, conf, runtime, "keepme")
    add_pod(lab, conf, runtime, "dropme")
    out = cli("gc", str(path), "--valid", "keepme/eth0", *gc_args(lab, tmp_path, plugin_dir)).stdout
    assert f"would DEL   {NET}/dropme/eth0: not in --valid" in out and f"keep  {NET}/keepme/eth0: in --valid" in out
    out = cli("gc", str(path), "--valid", "keepme", "--apply", *gc_args(lab, tmp_path, plugin_dir)).stdout
    assert f"deleted {NET}/dropme/eth0" in out, out
    assert sorted(containers(inspect(lab, tmp_path))) == ["keepme"]
