"""The DEL shapes a real containerd produces, recorded at the plugins, and that each one leaves
nothing: StopPodSandbox's DEL (netns, cached prevResult) then RemovePodSandbox's second DEL
(``CNI_NETNS=""``, no prevResult, the capability args again), and DELs with the *current*
conflist after the file gained plugins that never saw the pod's ADD.

Every plugin of the chain is wrapped by a recorder that logs what it was called with and then
runs the installed executable unchanged.  The runner-level cases (also an ADD killed mid-way,
which containerd before 2.3 never follows with a DEL) are in
tests/integration/test_containerd_del_shapes.py.
"""

from __future__ import annotations

import json
import os
import time

import grpc
import pytest

from cnichain.common import atomic

from . import leftovers
from .conftest import CriNode
from .cri_client import Port, PodSpec

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

CHAIN = ("bridge", "portmap", "bandwidth", "tuning", "route-override")
RECORDED_DIR = ".recorded"  # the installed executables move here, under the bin dir

# Logs one JSON line per exec (command, container, netns, whether prevResult / runtimeConfig came),
# then runs the real executable with the same stdin, passing its output and exit status through.
RECORDER = """#!/usr/bin/python3 -I
import json, os, subprocess, sys
plugin = os.path.basename(sys.argv[0])
data = sys.stdin.buffer.read()
try:
    conf = json.loads(data)
except ValueError:
    conf = {{}}
entry = {{"plugin": plugin, "cmd": os.environ.get("CNI_COMMAND"), "cid": os.environ.get("CNI_CONTAINERID"),
         "netns": os.environ.get("CNI_NETNS"), "prev": "prevResult" in conf,
         "runtimeConfig": conf.get("runtimeConfig") if isinstance(conf, dict) else None}}
real = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), {recorded!r}, plugin)
proc = subprocess.run([real], input=data, capture_output=True)
entry["code"] = proc.returncode
with open({log!r}, "a") as fh:
    fh.write(json.dumps(entry) + "\\n")
sys.stdout.buffer.write(proc.stdout)
sys.stderr.buffer.write(proc.stderr)
sys.exit(proc.returncode)
"""


def record_plugins(bin_dir: str, log: str) -> None:
    """Put the recorder in front of every plugin of the chain (host-local, bridge's IPAM, too)."""
    os.makedirs(os.path.join(bin_dir, RECORDED_DIR), exist_ok=True)
    for plugin in CHAIN + ("host-local",):
        path = os.path.join(bin_dir, plugin)
        os.rename(path, os.path.join(bin_dir, RECORDED_DIR, plugin))
        with open(path, "w") as fh:
            fh.write(RECORDER.format(recorded=RECORDED_DIR, log=log))
        os.chmod(path, 0o755)


def calls(log: str, cid: str) -> list[dict]:
    if not os.path.exists(log):
        return []
    with open(log) as fh:
        return [e for e in map(json.loads, fh) if e["cid"] == cid]


def write_chain(conflist_path: str, types: tuple[str, ...]) -> None:
    """Rewrite the installed conflist with only ``types``, temp file then rename in the conf dir
    (the only way containerd's watcher is sure to notice)."""
    with open(conflist_path) as fh:
        data = json.load(fh)
    if not hasattr(write_chain, "full"):
        write_chain.full = list(data["plugins"])  # type: ignore[attr-defined]
    data["plugins"] = [p for p in write_chain.full if p["type"] in types]  # type: ignore[attr-defined]
    atomic.write_file(conflist_path, json.dumps(data).encode(), 0o644)


def loaded_types(cri_node: CriNode) -> list[str]:
    """The plugin types of the conflist containerd has loaded (CRI Status, verbose)."""
    cri = cri_node.cri
    try:
        status = cri.runtime.Status(cri.pb.StatusRequest(verbose=True), timeout=10)
    except grpc.RpcError:
        return []
    config = json.loads(status.info.get("cniconfig", "{}") or "{}")
    for net in config.get("Networks") or []:
        plugins = (net.get("Config") or {}).get("Plugins") or []
        types = [(p.get("Network") or {}).get("type") for p in plugins]
        if "loopback" not in types:
            return types
    return []


def wait_loaded(cri_node: CriNode, types: tuple[str, ...], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tuple(loaded_types(cri_node)) == types:
            return
        time.sleep(0.2)
    raise AssertionError(f"containerd did not load {types}: it has {loaded_types(cri_node)}")


def test_stop_then_remove_send_two_dels_the_second_without_netns_or_prev_result(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    log = os.path.join(node.workdir, "plugin-calls.jsonl")
    record_plugins(node.bin_dir, log)
    pod = cri.run_pod(PodSpec(name="twice", ports=[Port(80, 18090)], annotations={
        "kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "10M"}))
    cri.stop_pod(pod.id)
    assert leftovers.everything(node.node_run, with_netns=False) == []
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []

    seen = calls(log, pod.id)
    assert all(e["code"] == 0 for e in seen), [e for e in seen if e["code"]]
    for plugin in CHAIN:
        dels = [e for e in seen if e["plugin"] == plugin and e["cmd"] == "DEL"]
        assert len(dels) >= 2, (plugin, dels)
        first, last = dels[0], dels[-1]
        assert first["netns"] and first["prev"], first
        assert last["netns"] == "" and not last["prev"], last
    portmap_last = [e for e in seen if e["plugin"] == "portmap" and e["cmd"] == "DEL"][-1]
    assert portmap_last["runtimeConfig"]["portMappings"][0]["HostPort"] == 18090  # go-cni's casing, again
    bandwidth_last = [e for e in seen if e["plugin"] == "bandwidth" and e["cmd"] == "DEL"][-1]
    assert bandwidth_last["runtimeConfig"]["bandwidth"]["IngressRate"] == 10_000_000


def test_del_with_the_current_conflist_reaches_plugins_that_never_saw_the_add(cri_node: CriNode) -> None:
    """The pod is added by bridge + portmap; the file then gains bandwidth, tuning and
    route-override; StopPodSandbox and RemovePodSandbox DEL through the whole new chain."""
    node, cri = cri_node.node, cri_node.cri
    log = os.path.join(node.workdir, "plugin-calls.jsonl")
    record_plugins(node.bin_dir, log)
    write_chain(node.conflist_path, ("bridge", "portmap"))
    wait_loaded(cri_node, ("bridge", "portmap"))
    pod = cri.run_pod(PodSpec(name="grown", ports=[Port(80, 18091)], annotations={
        "kubernetes.io/egress-bandwidth": "10M"}))
    write_chain(node.conflist_path, CHAIN)
    wait_loaded(cri_node, CHAIN)
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
    assert leftovers.everything(node.node_run) == []

    seen = calls(log, pod.id)
    assert all(e["code"] == 0 for e in seen), [e for e in seen if e["code"]]
    for plugin in ("bandwidth", "tuning", "route-override"):
        cmds = [e["cmd"] for e in seen if e["plugin"] == plugin]
        assert "ADD" not in cmds and cmds.count("DEL") >= 2, (plugin, cmds)
    bandwidth_first = next(e for e in seen if e["plugin"] == "bandwidth")
    assert bandwidth_first["runtimeConfig"]["bandwidth"]["EgressRate"] == 10_000_000
