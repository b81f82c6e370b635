"""Swap in place through containerd's CRI: pods started under the reference plugins, the
executables swapped for ours (re-installed as ``cnichain install`` writes them), the old pods
stopped by our DEL, new pods started by ours on the same hostPort.

Runs against both references (1.1.1 and 1.9.1, ``any_reference``), with the default conflist
(bridge with ipMasq, portmap on the reference's default iptables backend, bandwidth, tuning;
route-override, which Debian's package lacks, stays ours throughout).  Afterwards the node holds
none of the reference's objects and nothing of any pod (``leftovers.everything``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest

from cnichain.common import reference_rules

from cnichain.tools.containerd_node import ocimage

from . import leftovers, traffic
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import CONFLIST, NETWORK, NODE_IP, cnichain_cli

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

SWAPPED = ("bridge", "host-local", "portmap", "bandwidth", "tuning")
# The highest spec version each reference's plugins list (1.1.1 predates CNI 1.1.0).
REFERENCE_MAX_CNI = {"1.1.1": "1.0.0", "1.9.1": "1.1.0"}


def _loaded_version(cri_node: CriNode) -> str:
    """cniVersion of the conflist containerd's CRI loaded for eth0, from verbose Status."""
    for net in (cri_node.cri.status_info().get("cniconfig") or {}).get("Networks") or []:
        if net.get("IFName") == "eth0":
            return str(json.loads(net["Config"]["Source"]).get("cniVersion", ""))
    return ""


def cap_cni_version(cri_node: CriNode, ref_version: str) -> None:
    """Run the conflist at a version the reference speaks: on containerd 2.1 (1.1.0) the 1.1.1
    reference refuses 1.1.0 outright, a node running it would have 1.0.0 configs.  Waits
    (bounded) until containerd reloaded the rewritten file."""
    cap = REFERENCE_MAX_CNI[ref_version]
    current = _loaded_version(cri_node)
    if tuple(map(int, current.split("."))) <= tuple(map(int, cap.split("."))):
        return
    cri_node.node.set_cni_version(cri_node.node.conf_dir, cap)
    deadline = time.monotonic() + 30
    while _loaded_version(cri_node) != cap:
        assert time.monotonic() < deadline, "containerd did not reload the conflist"
        time.sleep(0.2)


def install_reference(bin_dir: str, ref_dir: str) -> None:
    """Replace our executables by the reference's, each by one rename (what a node install does)."""
    for name in SWAPPED:
        tmp = os.path.join(bin_dir, f".{name}.swap")
        shutil.copy2(os.path.join(ref_dir, name), tmp)
        os.replace(tmp, os.path.join(bin_dir, name))


def install_ours(node, agent_socket: str) -> None:
    """Our executables back over the reference's: ``--force``, since the installer otherwise
    refuses to overwrite files it did not write (what an operator swapping in place passes)."""
    subprocess.run([*cnichain_cli(), "install", "--bin-dir", node.bin_dir, "--conf-dir", node.conf_dir,
                    "--conflist", CONFLIST, "--force"], check=True, capture_output=True, text=True,
                   env=dict(os.environ, CNICHAIN_AGENT_SOCKET=agent_socket))  # as the node fixture installs


def reference_traces(node, pod_id: str) -> list[str]:
    names = [reference_rules.iptables_chain(NETWORK, pod_id, p) for p in ("", "DN-", "SN-")]
    out = []
    for tool in ("iptables-save", "ip6tables-save"):
        saved = node.node_run(tool, check=False).stdout
        out += [line for line in saved.splitlines() if pod_id in line or any(n in line for n in names)]
    ruleset = node.node_run("nft", "list", "ruleset").stdout
    out += [line for line in ruleset.splitlines() if pod_id in line]
    return out


def serve_and_get(cri_node: CriNode, pod) -> bytes:
    cri = cri_node.cri
    cri.start_container(pod, "httpd", cri_node.image, ["/bin/httpd"], ["-f", "-p", "80", "-h", "/www"])
    traffic.wait_listening(traffic.pod_argv(pod.pid), 80)
    return traffic.http_get(cri_node.node.client_argv(), NODE_IP, 18090)


def test_reference_pods_torn_down_by_ours_after_the_swap(cri_node: CriNode, any_reference, agent_socket: str) -> None:
    node, cri = cri_node.node, cri_node.cri
    ref_version, ref_dir = any_reference
    cap_cni_version(cri_node, ref_version)
    install_reference(node.bin_dir, ref_dir)
    old = cri.run_pod(PodSpec(name="old", ports=[Port(container_port=80, host_port=18090)]))
    assert ocimage.PAGE in serve_and_get(cri_node, old)
    assert reference_traces(node, old.id), "the reference left nothing to remove: the test proves nothing"

    install_ours(node, agent_socket)
    cri.stop_pod(old.id)
    cri.remove_pod(old.id)
    assert reference_traces(node, old.id) == []

    new = cri.run_pod(PodSpec(name="new", ports=[Port(container_port=80, host_port=18090)]))
    reply = serve_and_get(cri_node, new)
    assert b"200 OK" in reply and ocimage.PAGE in reply, reply
    cri.stop_pod(new.id)
    cri.remove_pod(new.id)
    assert leftovers.everything(node.node_run) == []
    assert reference_traces(node, old.id) == [] and reference_traces(node, new.id) == []
