"""An ADD run again over what a killed ADD of the same request left: it succeeds, and DEL then
leaves nothing.

This is what the shims do when a warm worker dies mid-request (the kernel's OOM killer, an
operator): the agent closes the connection and the shim runs the very same request cold
(docs/agent.md).  Here each chained plugin's ADD is SIGKILLed -- its process group, so bridge's
delegated host-local dies with it -- at several points of its work, and the stand-in then execs the
real plugin with the same stdin and environment, as the shim does.  The runtime must see the chain's
ADD succeed (bridge finds its own half-made veth pair and IPAM reservation, bandwidth its own
qdiscs and IFB, portmap and tuning their own state), the pod must answer a ping through the
bridge, and its DEL must leave nothing behind.  A veth in the pod that is not ours still fails
bridge's ADD (tests/integration/test_bridge.py, test_interface_name_taken_leaves_nothing).
"""

from __future__ import annotations

import pytest

from cnichain.podstate.runtime import Attachment
from tests.integration.test_containerd_del_shapes import (CNI_ARGS, KILL_FRACTIONS, THEN_RETRY, add_seconds,
                                                          assert_clean, chain, conflist, containerd_caps,
                                                          killed_add_dir, remove_sandbox_del)

pytestmark = pytest.mark.integration

@pytest.mark.parametrize("plugin", sorted(KILL_FRACTIONS))
def test_add_again_after_a_kill_succeeds_and_del_cleans(lab, make_runtime, plugin_dir, plugin):
    conf = conflist(lab, chain("1.1.0"))
    took = add_seconds(make_runtime(), conf, lab, "bridge" if plugin == "host-local" else plugin)
    assert_clean(lab)
    runtime = make_runtime([killed_add_dir(lab, plugin_dir, plugin, THEN_RETRY, once=True), plugin_dir])
    caps = containerd_caps()
    for n, after in enumerate([f * took for f in KILL_FRACTIONS[plugin]] + [3.0]):
        cid = f"ctrd-r{n}"
        pod = lab.netns(f"r{n}")
        runtime.extra_env["KILL_AFTER"] = str(after)
        result = runtime.add(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps))
        assert [i["name"] for i in result["interfaces"] if i.get("sandbox")] == ["eth0"]
        assert len(result["ips"]) == 1
        lab.run(pod, "ping", "-c1", "-W2", "10.22.0.1")
        runtime.delete(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps))
        assert_clean(lab)
        lab.delete_netns(pod)
        remove_sandbox_del(runtime, conf, cid, caps)
        assert_clean(lab)
