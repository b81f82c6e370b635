"""bridge with ``enabledad``: an IPv6 address that fails duplicate detection fails ADD (1.9.1).

A stranger on the bridge already holds the address host-local hands the pod next; the kernel
marks the pod's copy DADFAILED, and ADD must fail with the reference's text and leave nothing
behind (no veth, no reservation), instead of returning a pod whose IPv6 address never works.
"""

from __future__ import annotations

import os

import pytest

from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed

pytestmark = pytest.mark.integration


def test_dad_failure_fails_add_and_rolls_back(lab, make_runtime, plugin_dir, reference_dir):
    runtime = make_runtime([plugin_dir, reference_dir])
    conf = ConfList.from_dict({"cniVersion": "1.0.0", "name": "dadnet", "plugins": [{
        "type": "bridge", "bridge": "brdad", "isGateway": True, "enabledad": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "fd00:78::/64"}]], "dataDir": lab.path("ipam")},
    }]})
    p0 = lab.netns("p0")
    lab.prompt_dad(p0)
    first = runtime.add(conf, Attachment("c0", p0, "eth0"))
    assert first["ips"][0]["address"] == "fd00:78::2/64"
    # a stranger on the same bridge already holds the next address
    stranger = lab.netns("dup")
    lab.run(lab.node, "ip", "link", "add", "dupport", "type", "veth", "peer", "name", "dupif",
            "netns", os.path.basename(stranger))
    lab.run(lab.node, "ip", "link", "set", "dupport", "master", "brdad", "up")
    lab.run(stranger, "ip", "link", "set", "dupif", "up")
    lab.run(stranger, "ip", "addr", "add", "fd00:78::3/64", "dev", "dupif", "nodad")

    pod = lab.netns("p1")
    lab.prompt_dad(pod)
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("c1", pod, "eth0"))
    msg = info.value.error.msg
    assert msg == 'failed to settle addresses for "eth0": link eth0 has address fd00:78::3 in DADFAILED state', msg
    assert "eth0" not in lab.run(pod, "ip", "-o", "link", "show").stdout
    assert not os.path.exists(lab.path("ipam", "dadnet", "fd00:78::3"))
