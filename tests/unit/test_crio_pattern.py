"""CRI-O's call pattern (tools/crio.py) against recording stand-in plugins: exactly what is exec'd,
with which environment and stdin, in which order.  The kernel side is tests/integration/test_crio.py."""

from __future__ import annotations

import json
import os
import sys

import pytest

from cnichain.tools import crio
from cnichain.podstate.runtime import ConfList, Runtime

# A stand-in plugin: appends {command, env, stdin} to $LOG, answers VERSION and ADD, prints
# $CHECK_OUTPUT on CHECK (empty by default).
FAKE = f"""#!{sys.executable}
import json, os, sys
data = sys.stdin.read()
cmd = os.environ["CNI_COMMAND"]
env = {{k: v for k, v in os.environ.items() if k.startswith("CNI_")}}
with open(os.environ["LOG"], "a") as fh:
    fh.write(json.dumps({{"type": os.path.basename(sys.argv[0]), "cmd": cmd, "env": env, "stdin": data}}) + "\\n")
if cmd == "VERSION":
    print(json.dumps({{"cniVersion": "1.1.0", "supportedVersions": os.environ.get("VERSIONS", "0.4.0 1.0.0 1.1.0").split()}}))
elif cmd == "ADD":
    conf = json.loads(data)
    print(json.dumps(conf.get("prevResult") or {{"cniVersion": conf["cniVersion"], "ips": [{{"address": "10.1.0.2/24"}}]}}))
elif cmd == "CHECK":
    sys.stdout.write(os.environ.get("CHECK_OUTPUT", ""))
"""


@pytest.fixture
def node(tmp_path):
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    bin_dir.mkdir()
    conf_dir.mkdir()
    for name in ("fakebr", "fakebw", "fakepm"):
        path = bin_dir / name
        path.write_text(FAKE)
        path.chmod(0o755)
    log = tmp_path / "log"
    runtime = Runtime([str(bin_dir)], str(tmp_path / "cache"), extra_env={"LOG": str(log)})
    return runtime, str(conf_dir), log


def calls(log) -> list[dict]:
    if not os.path.exists(log):
        return []
    out = [json.loads(line) for line in open(log)]
    open(log, "w").close()
    return out


def chain(name: str = "net1", version: str = "1.1.0", **extra) -> dict:
    return {"cniVersion": version, "name": name, **extra, "plugins": [
        {"type": "fakebr"},
        {"type": "fakepm", "capabilities": {"portMappings": True}},
        {"type": "fakebw", "capabilities": {"bandwidth": True}},
    ]}


POD = crio.CrioPod("sb1", "web", "default", "uid-1", "/run/netns/p1", ingress_rate=1_000_000,
                   ingress_burst=crio.BURST)


def test_bandwidth_is_camel_case_with_zeros_and_port_mappings_never_sent():
    assert crio.capability_args(POD) == {"bandwidth": {"ingressRate": 1_000_000, "ingressBurst": crio.BURST,
                                                      "egressRate": 0, "egressBurst": 0}}
    assert crio.capability_args(crio.CrioPod("s", "n", "ns", "u", "/x")) == {}
    assert [k for k, _ in crio.cni_args(POD)] == ["IgnoreUnknown", "K8S_POD_NAMESPACE", "K8S_POD_NAME",
                                                  "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_UID"]


def test_reload_runs_version_of_every_plugin_and_skips_what_does_not_fit(node):
    runtime, conf_dir, log = node
    crio.write_conflist(conf_dir, "10-a.conflist", chain("a", "1.1.0"))
    crio.write_conflist(conf_dir, "20-b.conflist", chain("b", "0.3.1"))  # not in the plugins' list
    crio.write_conflist(conf_dir, "30-a.conflist", chain("a", "1.0.0"))  # duplicate name
    with open(os.path.join(conf_dir, "40-broken.conf"), "w") as fh:
        fh.write("{")
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    assert [n.name for n in c.networks] == ["a"] and c.default.name == "a"
    assert set(c.skipped) == {"20-b.conflist", "30-a.conflist", "40-broken.conf"}
    assert "does not support config version '0.3.1'" in c.skipped["20-b.conflist"]
    versions = [x for x in calls(log) if x["cmd"] == "VERSION"]
    assert len(versions) == 9 and all(json.loads(x["stdin"]) == {"cniVersion": "1.1.0"} for x in versions)
    c.reload()  # every reload asks again
    assert len([x for x in calls(log) if x["cmd"] == "VERSION"]) == 9


def test_run_pod_is_add_then_check_of_the_whole_chain(node):
    runtime, conf_dir, log = node
    crio.write_conflist(conf_dir, "10.conflist", chain())
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    calls(log)
    c.run_pod(POD)
    seen = calls(log)
    assert [(x["cmd"], x["type"]) for x in seen] == [
        ("ADD", "fakebr"), ("ADD", "fakepm"), ("ADD", "fakebw"),
        ("CHECK", "fakebr"), ("CHECK", "fakepm"), ("CHECK", "fakebw")]
    for x in seen:
        conf = json.loads(x["stdin"])
        assert "portMappings" not in conf.get("runtimeConfig", {})
        assert x["env"]["CNI_ARGS"] == ("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;"
                                        "K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=uid-1")
    bw = json.loads(seen[5]["stdin"])
    assert bw["runtimeConfig"]["bandwidth"]["egressRate"] == 0 and "prevResult" in bw


@pytest.mark.parametrize("extra,checks", [({}, 3), ({"disableCheck": True}, 0)])
def test_check_is_skipped_below_0_4_0_and_with_disable_check(node, extra, checks):
    runtime, conf_dir, log = node
    crio.write_conflist(conf_dir, "10.conflist", chain(version="1.0.0", **extra))
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    c.run_pod(POD)
    assert len([x for x in calls(log) if x["cmd"] == "CHECK"]) == checks


def test_check_that_prints_fails_the_pod_and_tears_it_down(node):
    runtime, conf_dir, log = node
    runtime.extra_env["CHECK_OUTPUT"] = "{}"
    crio.write_conflist(conf_dir, "10.conflist", chain())
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    calls(log)
    with pytest.raises(crio.CheckPrinted):
        c.run_pod(POD)
    assert [x["cmd"] for x in calls(log)][-3:] == ["DEL", "DEL", "DEL"]
    assert runtime.cached("net1", crio.attachment(POD)) is None


def test_stop_pod_deletes_with_the_conflist_cached_at_add(node):
    runtime, conf_dir, log = node
    crio.write_conflist(conf_dir, "10.conflist", chain())
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    c.run_pod(POD)
    grown = chain()
    grown["plugins"].append({"type": "fakebw", "extra": True})
    crio.write_conflist(conf_dir, "10.conflist", grown)
    c.reload()
    calls(log)
    c.stop_pod(POD)
    dels = [x for x in calls(log) if x["cmd"] == "DEL"]
    assert [x["type"] for x in dels] == ["fakebw", "fakepm", "fakebr"]  # the ADD-time chain, reversed


def test_restart_checks_running_pods_deletes_stale_ones_then_gcs_every_network(node):
    runtime, conf_dir, log = node
    crio.write_conflist(conf_dir, "10-main.conflist", chain("main"))
    crio.write_conflist(conf_dir, "20-other.conflist", chain("other"))
    c = crio.Crio(runtime, conf_dir)
    c.reload()
    live = POD
    gone = crio.CrioPod("sb2", "old", "default", "uid-2", "/run/netns/p2-gone", egress_rate=5_000_000,
                        egress_burst=crio.BURST)
    c.run_pod(live)
    c.run_pod(gone)
    calls(log)

    assert crio.Crio(runtime, conf_dir).restart([live]) == []
    seen = [x for x in calls(log) if x["cmd"] != "VERSION"]
    assert [x["cmd"] for x in seen] == ["STATUS"] * 3 + ["CHECK"] * 3 + ["DEL"] * 3 + ["GC"] * 6
    assert {x["env"]["CNI_CONTAINERID"] for x in seen if x["cmd"] == "CHECK"} == {"sb1"}
    for x in (x for x in seen if x["cmd"] == "DEL"):
        # the synthetic DEL: the cached netns path, CNI_ARGS and capability args
        assert x["env"]["CNI_CONTAINERID"] == "sb2" and x["env"]["CNI_NETNS"] == "/run/netns/p2-gone"
        assert "K8S_POD_NAME=old" in x["env"]["CNI_ARGS"]
        conf = json.loads(x["stdin"])
        if x["type"] == "fakebw":
            assert conf["runtimeConfig"]["bandwidth"] == {"ingressRate": 0, "ingressBurst": 0,
                                                          "egressRate": 5_000_000, "egressBurst": crio.BURST}
    gcs = [json.loads(x["stdin"]) for x in seen if x["cmd"] == "GC"]
    assert [g["name"] for g in gcs] == ["main"] * 3 + ["other"] * 3
    for g in gcs[:3]:
        assert g["cni.dev/valid-attachments"] == g["cni.dev/attachments"] == [{"containerID": "sb1", "ifname": "eth0"}]
        assert "runtimeConfig" not in g and "prevResult" not in g
    for g in gcs[3:]:
        assert g["cni.dev/valid-attachments"] is None and g["cni.dev/attachments"] is None
    assert [e["containerId"] for e in runtime.cached_attachments("main")] == ["sb1"]


@pytest.mark.parametrize("version,extra,gcs,dels", [("1.0.0", {}, 0, 3), ("1.1.0", {"disableGC": True}, 0, 0)])
def test_gc_needs_1_1_0_and_disable_gc_skips_the_deletes_too(node, version, extra, gcs, dels):
    runtime, conf_dir, log = node
    conf = ConfList.from_dict(chain("n", version, **extra))
    runtime.add(conf, crio.attachment(POD))
    calls(log)
    assert runtime.gc_network_list(conf, []) == []
    seen = [x["cmd"] for x in calls(log)]
    assert seen.count("GC") == gcs and seen.count("DEL") == dels
