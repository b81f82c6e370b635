"""Runner logic that needs no kernel: config building and the result cache."""

from __future__ import annotations

from cnichain.podstate.runtime import Attachment, ConfList, Runtime

CONF = ConfList.from_dict(
    {
        "cniVersion": "1.0.0",
        "name": "n1",
        "plugins": [
            {"type": "bridge", "ipam": {"type": "host-local"}},
            {"type": "portmap", "capabilities": {"portMappings": True, "io.kubernetes.cri.pod-annotations": False}},
        ],
    }
)


def test_capabilities_become_runtime_config_intersection():
    rt = Runtime([], "/nonexistent")
    att = Attachment("c1", "/run/netns/x", capability_args={"portMappings": [{"hostPort": 1}], "bandwidth": {}})
    conf = rt.plugin_config(CONF, CONF.plugins[1], att, {"cniVersion": "1.0.0"})
    assert conf["runtimeConfig"] == {"portMappings": [{"hostPort": 1}]}
    assert "capabilities" not in conf
    assert conf["name"] == "n1" and conf["cniVersion"] == "1.0.0" and conf["prevResult"] == {"cniVersion": "1.0.0"}


def test_first_plugin_gets_no_prev_result():
    conf = Runtime([], "/x").plugin_config(CONF, CONF.plugins[0], Attachment("c", "/n"), None)
    assert "prevResult" not in conf and "runtimeConfig" not in conf


def test_single_conf_is_wrapped():
    conf = ConfList.from_dict({"cniVersion": "0.3.1", "name": "one", "type": "bridge"})
    assert conf.name == "one" and conf.plugins[0]["type"] == "bridge"


def test_cache_round_trip(tmp_path):
    rt = Runtime([], str(tmp_path))
    att = Attachment("c1", "/run/netns/x", capability_args={"portMappings": []})
    rt._save_cache(CONF, att, {"cniVersion": "1.0.0"})
    entry = rt.cached("n1", att)
    assert entry["result"] == {"cniVersion": "1.0.0"} and entry["netns"] == "/run/netns/x"
    assert [e["containerId"] for e in rt.cached_attachments("n1")] == ["c1"]
    assert (tmp_path / "results" / "n1-c1-eth0").stat().st_mode & 0o777 == 0o600
