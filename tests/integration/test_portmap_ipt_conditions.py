"""iptables-style ``conditionsV4``/``V6`` (the reference's default backend) against a real kernel:
the translated nftables matches filter real traffic the way the iptables rule would.

The client namespace holds two addresses per family; the conditions admit one source and one
ingress interface, so the other source, and localhost on the node (ingress ``lo``), are not
forwarded to the pod while the admitted one is.  Single version: the translation happens while
parsing the config, before any version-dependent step.
"""

from __future__ import annotations

import pytest

from cnichain.podstate.runtime import Attachment
from tests.integration.portmap_traffic import CLIENT4, CLIENT6, NODE4, NODE6, bridge_conflist, fetch, serve, wait_no_tentative

pytestmark = pytest.mark.integration

OTHER4, OTHER6 = "192.168.77.3", "fd77::3"


def fetch_from(lab, ns, addr, port, source) -> str:
    host = f"[{addr}]" if ":" in addr else addr
    src = f"[{source}]" if ":" in source else source
    out = lab.run(ns, "socat", "-T2", "-", f"TCP:{host}:{port},connect-timeout=2,bind={src}",
                  check=False, input="", timeout=10)
    return out.stdout.strip()


def test_translated_conditions_filter_real_traffic(lab, make_runtime, plugin_dir, reference_dir):
    client = lab.netns("client")
    node_if = lab.wire(client, [f"{CLIENT4}/24", f"{OTHER4}/24", f"{CLIENT6}/64", f"{OTHER6}/64"],
                       [f"{NODE4}/24", f"{NODE6}/64"], "cli")
    lab.run(lab.node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    runtime = make_runtime([plugin_dir, reference_dir])
    conf = bridge_conflist(lab, portmap={
        # the reference README's negation form, a source set, an interface, a protocol and a comment
        "conditionsV4": ["!", "-s", f"{OTHER4}/32", "-i", node_if, "-p", "tcp", "-m", "comment", "--comment", "lb"],
        "conditionsV6": ["-s", f"{CLIENT6},fd99::/64", "-p", "tcp", "--dport", "8080"],
    })
    pod = lab.netns("pod")
    att = Attachment("ctr-cond", pod, "eth0", capability_args={"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    runtime.add(conf, att)
    wait_no_tentative(lab, lab.node)
    server = serve(lab, pod, 80, "pod")
    try:
        assert fetch_from(lab, client, NODE4, 8080, CLIENT4) == "pod"
        assert fetch_from(lab, client, NODE4, 8080, OTHER4) == ""  # ! -s OTHER4
        assert fetch(lab, lab.node, "127.0.0.1", 8080) == ""  # -i <client link>: lo is not it
        assert fetch_from(lab, client, NODE6, 8080, CLIENT6) == "pod"
        assert fetch_from(lab, client, NODE6, 8080, OTHER6) == ""  # -s CLIENT6,fd99::/64 only
        runtime.check(conf, att)
        runtime.delete(conf, att)
        # control: without the conditions the refused sources do reach the pod
        plain = bridge_conflist(lab)
        runtime.add(plain, att)
        assert fetch_from(lab, client, NODE4, 8080, OTHER4) == "pod"
        assert fetch_from(lab, client, NODE6, 8080, OTHER6) == "pod"
        runtime.delete(plain, att)
    finally:
        server.kill()
        server.wait()
