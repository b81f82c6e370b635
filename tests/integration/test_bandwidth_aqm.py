"""bandwidth's child qdisc: fq_codel with ECN under every TBF where the kernel has it, the TBF's own
time-bounded FIFO where it does not, and an ADD that never fails for the difference.

Which case a machine is in is the kernel's to say: a probe grafts fq_codel under a TBF on a
throwaway veth; its only acceptable refusal is the kernel's own ("Specified qdisc kind is
unknown", or EOPNOTSUPP), and any other failure of the probe fails the test.  Each layout puts its
TBFs in different places (host veth, pod eth0, an IFB in either namespace), so each is checked
for the child under every TBF it made, CHECK passes, a foreign child fails CHECK, and DEL leaves
nothing.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import uuid

import pytest

from cnichain.plugins.bandwidth import plan
from cnichain.plugins.bandwidth.kernel import AQM_KIND
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.tools.lab import isolate_conflist

pytestmark = pytest.mark.integration

REFUSALS = ("Error: Specified qdisc kind is unknown.", "RTNETLINK answers: Operation not supported")
SUBNET = "10.77.0.0/24"
BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True, "isDefaultGateway": True,
          "ipam": {"type": "host-local", "subnet": SUBNET}}
INTO_POD, OUT_OF_POD = 10_000_000, 1_000_000  # 1 Mbit/s: the target grows to 1.5 frames' time
LIMITS = {"ingressRate": INTO_POD, "ingressBurst": plan.CONTAINERD_BURST,
          "egressRate": OUT_OF_POD, "egressBurst": plan.CONTAINERD_BURST}


def fq_codel_refusal() -> str:
    """"" when this kernel grafts fq_codel under a TBF, else its own refusal (probed in a
    throwaway namespace); a probe that failed for any other reason fails the test."""
    name = f"cnit-aqm-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        def run(*argv: str) -> subprocess.CompletedProcess:
            return subprocess.run(["ip", "netns", "exec", name, *argv], capture_output=True, text=True, timeout=30)

        for argv in (("ip", "link", "add", "a0", "type", "veth", "peer", "name", "a1"),
                     ("tc", "qdisc", "add", "dev", "a0", "root", "handle", "1:", "tbf", "rate", "10mbit",
                      "burst", "10k", "limit", "20k")):
            assert run(*argv).returncode == 0, f"the fq_codel probe could not set up: {argv}"
        proc = run("tc", "qdisc", "add", "dev", "a0", "parent", "1:1", "handle", "10:", "fq_codel", "ecn")
        if proc.returncode == 0:
            return ""
        refusal = proc.stderr.strip()
        assert refusal in REFUSALS, f"the fq_codel probe failed, not for want of the kind: {refusal!r}"
        return refusal
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture(scope="module")
def refusal() -> str:
    return fq_codel_refusal()


def tbfs_and_children(lab, ns: str) -> dict[str, tuple[dict, list[dict]]]:
    """Every device in ``ns`` with a root TBF: (the TBF, the qdiscs under its class 1:1)."""
    found = json.loads(lab.run(ns, "tc", "-j", "qdisc", "show").stdout or "[]")
    out = {}
    for q in found:
        if q["kind"] == "tbf" and q.get("root"):
            children = [c for c in found if c.get("dev") == q["dev"] and c.get("parent") == q["handle"] + "1"]
            out[q["dev"]] = (q, children)
    return out


def _chain(lab, layout: str) -> ConfList:
    bw = {"type": "bandwidth", "capabilities": {"bandwidth": True}, "layout": layout}
    return ConfList.from_dict(isolate_conflist(
        {"cniVersion": "1.0.0", "name": "aqm", "plugins": [copy.deepcopy(BRIDGE), bw]}, lab.workdir))


@pytest.mark.parametrize("layout", ["split", "pod", "host"])
def test_every_tbf_gets_fq_codel_where_the_kernel_has_it_and_its_fifo_otherwise(lab, make_runtime, refusal, layout):
    """Runs on every kernel: which child each TBF has is the probe's answer, never an ADD error."""
    conf, rt = _chain(lab, layout), make_runtime()
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)})
    rt.add(conf, att)  # never refused for want of fq_codel
    shaped = {**tbfs_and_children(lab, lab.node), **{f"pod {d}": v for d, v in tbfs_and_children(lab, pod).items()}}
    assert len(shaped) == 2, shaped  # one TBF per direction, wherever the layout puts it
    for dev, (_tbf, children) in shaped.items():
        if refusal:
            assert children == [], f"{dev}: {children}"  # the TBF's own FIFO, which tc does not list
            continue
        assert [c["kind"] for c in children] == [AQM_KIND], f"{dev}: {children}"
        options = children[0]["options"]
        assert options.get("ecn") is True and options.get("limit") == plan.AQM_LIMIT_PACKETS, options
    rt.check(conf, att)
    rt.delete(conf, att)
    assert tbfs_and_children(lab, lab.node) == {} and tbfs_and_children(lab, pod) == {}


def test_fq_codel_target_follows_the_rate(lab, make_runtime, refusal):
    """5 ms at 10 Mbit/s; 1.5 full frames' time (18.2 ms) at 1 Mbit/s, where one frame takes 12 ms."""
    if refusal:
        pytest.skip(f"this kernel has no fq_codel: {refusal}")
    conf, rt = _chain(lab, "split"), make_runtime()
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)})
    result = rt.add(conf, att)
    veth = next(i["name"] for i in result["interfaces"] if not i.get("sandbox") and i["name"].startswith("veth"))
    for ns, dev, rate in ((lab.node, veth, INTO_POD), (pod, "eth0", OUT_OF_POD)):
        (_tbf, children) = tbfs_and_children(lab, ns)[dev]
        want = plan.aqm_as_read_back(plan.aqm(plan.TbfParams(rate=rate // 8, buffer=1, limit=1)))
        assert children[0]["options"]["target"] == want.target_us, children  # iproute2's JSON: microseconds
    rt.delete(conf, att)


def test_check_fails_on_a_child_that_is_not_ours(lab, make_runtime):
    """pfifo_head_drop is a FIFO every kernel with TBF has: grafted by hand under our TBF, CHECK
    must name the child; DEL still removes everything."""
    conf, rt = _chain(lab, "split"), make_runtime()
    pod = lab.netns("pod")
    att = Attachment("ctr1", pod, "eth0", capability_args={"bandwidth": dict(LIMITS)})
    rt.add(conf, att)
    (dev,) = tbfs_and_children(lab, pod)
    lab.run(pod, "tc", "qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "20:", "pfifo_head_drop",
            "limit", "10")
    with pytest.raises(PluginFailed, match="Child qdisc doesn't match"):
        rt.check(conf, att)
    rt.delete(conf, att)
    assert tbfs_and_children(lab, pod) == {}
