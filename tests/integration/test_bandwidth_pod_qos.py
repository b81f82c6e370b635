"""bandwidth's QoS from pod annotations against a real kernel: what a pod's annotations ask for is
what the kernel's TBFs hold, in the right direction, CHECK holds it to that, and an annotation the
plugin cannot use is a CNI error that names it and leaves nothing behind.

The runtime sends the annotations as containerd and CRI-O do: the whole map under
``io.kubernetes.cri.pod-annotations``, beside the kubelet's rate with containerd's burst.
"""

from __future__ import annotations

import copy
import re

import pytest

from cnichain.plugins.bandwidth.config import ifb_name
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.tools.lab import isolate_conflist
from tests.integration.bandwidth_lab import host_veth, link, root_tbf
from tests.specver import check_as_runtime

pytestmark = pytest.mark.integration

POD_ANNOTATIONS = "io.kubernetes.cri.pod-annotations"
CONTAINERD_BURST = 2**32 - 1
BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
          "ipam": {"type": "host-local", "subnet": "10.79.0.0/24"}}
# "host": both TBFs on the node (host veth and IFB), where one read shows both directions.
BW = {"type": "bandwidth", "capabilities": {"bandwidth": True, POD_ANNOTATIONS: True}, "layout": "host"}
# Different numbers per direction, so a swap of ingress and egress cannot pass.
KUBELET = {"ingressRate": 10_000_000, "ingressBurst": CONTAINERD_BURST,
           "egressRate": 6_000_000, "egressBurst": CONTAINERD_BURST}
ANNOTATIONS = {
    "kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "6M",
    "qos.projectcalico.org/ingressBurst": "320k",  # bits: 40,000 bytes
    "qos.projectcalico.org/egressBurst": "96k",  # 12,000 bytes
    "qos.projectcalico.org/ingressPeakrate": "40M", "qos.projectcalico.org/ingressMinburst": "4000",
}


def conflist(lab) -> ConfList:
    data = {"cniVersion": "1.0.0", "name": "bwqos", "plugins": [copy.deepcopy(BRIDGE), dict(BW)]}
    return ConfList.from_dict(isolate_conflist(data, lab.workdir))


def tbf_line(lab, dev: str) -> str:
    out = lab.run(lab.node, "tc", "qdisc", "show", "dev", dev).stdout
    return next((line for line in out.splitlines() if line.startswith("qdisc tbf")), "")


def test_the_pods_annotations_shape_each_direction_as_asked(lab, make_runtime, plugin_dir, reference_dir):
    rt = make_runtime([plugin_dir, reference_dir])
    conf = conflist(lab)
    pod = lab.netns("pod")
    att = Attachment("qos1", pod, "eth0", capability_args={"bandwidth": dict(KUBELET), POD_ANNOTATIONS: dict(ANNOTATIONS)})
    result = rt.add(conf, att)
    try:
        veth, ifb = host_veth(result), ifb_name("bwqos", "qos1")
        into, out_of = root_tbf(lab, veth)["options"], root_tbf(lab, ifb)["options"]
        assert (into["rate"], into["burst"]) == (1_250_000, 40_000)
        assert (out_of["rate"], out_of["burst"]) == (750_000, 12_000)
        # iproute2's JSON has no peakrate: the text line carries it (rounding: one byte either way).
        line = tbf_line(lab, veth)
        assert "peakrate 40Mbit" in line, line
        minburst = int(re.search(r"minburst (\d+)b", line).group(1))  # type: ignore[union-attr]
        assert abs(minburst - 4000) <= 1, line
        assert "peakrate" not in tbf_line(lab, ifb)
        check_as_runtime(rt, conf, att)
    finally:
        rt.delete(conf, att)
    assert link(lab, ifb_name("bwqos", "qos1")) is None
    assert "qdisc tbf" not in lab.run(lab.node, "tc", "qdisc", "show").stdout


@pytest.mark.parametrize("bad", [
    {"qos.projectcalico.org/egressBurst": "a lot"},
    {"qos.projectcalico.org/ingressPeakrate": "5M"},  # not above the 10M rate
    {"qos.projectcalico.org/egressMinburst": "1500"},  # no egress peak rate to size
])
def test_an_unusable_annotation_fails_the_add_by_name_and_shapes_nothing(lab, make_runtime, plugin_dir, reference_dir, bad):
    rt = make_runtime([plugin_dir, reference_dir])
    conf = conflist(lab)
    pod = lab.netns("pod")
    annotations = {**ANNOTATIONS, **bad}
    att = Attachment("qos2", pod, "eth0", capability_args={"bandwidth": dict(KUBELET), POD_ANNOTATIONS: annotations})
    with pytest.raises(PluginFailed) as exc:
        rt.add(conf, att)
    (name,) = bad
    assert exc.value.plugin_type == "bandwidth" and name in exc.value.error.msg, exc.value
    assert link(lab, ifb_name("bwqos", "qos2")) is None
    # No TBF on any link of the node: the half-shaped pod this guards against would have one.
    assert "qdisc tbf" not in lab.run(lab.node, "tc", "qdisc", "show").stdout
    rt.delete(conf, att)
