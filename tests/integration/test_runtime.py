"""The runner drives real plugins in a throwaway node namespace, exactly as a runtime would."""

from __future__ import annotations

import os

import pytest

from cnichain.common.errors import CniError, Code
from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, Runtime

pytestmark = pytest.mark.integration


def _bridge_conf(cache_dir: str) -> ConfList:
    return ConfList.from_dict(
        {
            "cniVersion": "0.4.0",
            "name": "rtnet",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipam": {"type": "host-local", "subnet": "10.99.0.0/24", "dataDir": os.path.join(cache_dir, "ipam")},
                },
                {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
            ],
        }
    )


def test_reference_chain_add_check_del(lab, reference_dir):
    runtime = Runtime([reference_dir], lab.path("cache"), node_netns=lab.node)
    conf = _bridge_conf(lab.workdir)
    pod = lab.netns("pod")
    att = Attachment("ctr-rt-1", pod, "eth0", capability_args={"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]})
    result = runtime.add(conf, att)
    assert result["ips"][0]["address"].startswith("10.99.0.")
    assert runtime.cached("rtnet", att)["capabilityArgs"]["portMappings"][0]["hostPort"] == 18080
    # CHECK is left out: the reference portmap (1.1.1) fails it for IPv4-only pods (upstream #819)
    lab.run(pod, "ping", "-c1", "-W2", "10.99.0.1")
    runtime.delete(conf, Attachment("ctr-rt-1", pod, "eth0"))
    assert runtime.cached("rtnet", att) is None
    # the pod interface is gone
    assert "eth0" not in lab.run(pod, "ip", "-o", "link").stdout


def test_missing_plugin_is_a_clear_error(lab, tmp_path):
    runtime = Runtime([str(tmp_path)], str(tmp_path / "cache"), node_netns=lab.node)
    conf = ConfList.from_dict({"cniVersion": "1.0.0", "name": "n", "plugins": [{"type": "nope"}]})
    with pytest.raises(CniError) as info:
        runtime.add(conf, Attachment("c1", lab.netns("p"), "eth0"))
    assert info.value.code == Code.INTERNAL and info.value.msg.startswith('failed to find plugin "nope" in path')


@pytest.mark.parametrize(
    "data,msg",
    [({"name": "x"}, "neither a config list"), ({"name": "x", "plugins": []}, "non-empty"), ({"plugins": [{"type": "a"}]}, "name")],
)
def test_broken_conflist(data, msg):
    with pytest.raises(ConfigError, match=msg):
        ConfList.from_dict(data)
