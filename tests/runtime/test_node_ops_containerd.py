"""``cnichain inspect`` and ``cnichain gc`` on a pod that containerd's CRI made.

The commands run inside the node (the holder's mount and network namespaces), so they read the
node's private ``/var/lib/cni`` (containerd's libcni cache and host-local's reservations),
``/run/cni/tuning``, nftables and links, exactly as an operator on that node would.  The pod has a
hostPort and both bandwidth annotations; inspect must attribute all of it to the sandbox's ID.
Then containerd crashes and the pod's netns mount disappears (what a runtime that died mid-teardown
leaves): inspect must flag the pod as an orphan, ``gc`` must plan its DEL without changing
anything, and ``gc --apply`` must remove the portmap mapping, the IFB and the reservation using
only what libcni cached.
"""

from __future__ import annotations

import json
import os

import pytest

from . import leftovers
from .conftest import CriNode
from .cri_client import Port, PodSpec
from .node import NETWORK, cnichain_cli

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

INGRESS = 10_000_000  # "10M": bits/s into the pod (TBF on the host veth)
EGRESS = 20_000_000  # "20M": bits/s out of the pod (TBF on the IFB)
HOST_PORT, POD_PORT = 18091, 8080
LIBCNI_ROOT = os.path.dirname(leftovers.LIBCNI_CACHE_DIR)  # libcni's cache root (holds results/)


def _inspect(node) -> dict:
    proc = node.node_run(*cnichain_cli(), "inspect", "--json", "--cache-dir", LIBCNI_ROOT)
    return json.loads(proc.stdout)


def _container(view: dict, cid: str) -> dict:
    found = [c for c in view["containers"] if c["container_id"] == cid]
    assert len(found) == 1, f"inspect lists {[c['container_id'] for c in view['containers']]}, want {cid}"
    return found[0]


def test_inspect_and_gc_on_a_containerd_pod(cri_node: CriNode) -> None:
    node, cri = cri_node.node, cri_node.cri
    pod = cri.run_pod(PodSpec(name="ops", ports=[Port(container_port=POD_PORT, host_port=HOST_PORT)], annotations={
        "kubernetes.io/ingress-bandwidth": "10M",
        "kubernetes.io/egress-bandwidth": "20M",
    }))
    cache_file = f"{leftovers.LIBCNI_CACHE_DIR}/{NETWORK}-{pod.id}-eth0"

    # -- a live pod: everything attributed to the sandbox, no orphan -----------------------------
    view = _inspect(node)
    assert view["problems"] == [] and view["unattributed"] == [], view
    cv = _container(view, pod.id)
    # containerd caches two attachments per sandbox: its own loopback network for lo, and ours
    attached = sorted((a["network"], a["ifname"], a["netns"], a["netns_alive"]) for a in cv["attachments"])
    assert attached == [("cni-loopback", "lo", pod.netns, True), (NETWORK, "eth0", pod.netns, True)], cv
    ours = [a for a in cv["attachments"] if a["network"] == NETWORK][0]
    assert ours["cache_file"] == cache_file and [ip.split("/")[0] for ip in ours["ips"]] == [pod.ip]
    assert [(r["network"], r["ip"], r["ifname"]) for r in cv["host_local"]] == [(NETWORK, pod.ip, "eth0")]
    assert [(m["network"], m["protocol"], m["host_port"], m["host_ip"], m["pod_ip"], m["pod_port"])
            for m in cv["portmap"] if m["family"] == 4] == [(NETWORK, "tcp", HOST_PORT, "", pod.ip, POD_PORT)]
    # bandwidth's default layout (split): ingress on the host veth, egress on the pod's eth0, no IFB.
    shaped = [s for s in cv["bandwidth"] if s.get("kind") == "pod"]
    assert len(shaped) == 1, cv["bandwidth"]
    assert shaped[0]["network"] == NETWORK and shaped[0]["host_veth"] and shaped[0]["ifname"] == "eth0"
    assert shaped[0]["egress"]["rate_bits"] == EGRESS
    assert shaped[0]["ingress"]["rate_bits"] == INGRESS
    assert cv["orphan"] is False and cv["orphan_reasons"] == []
    assert view["orphans"] == []
    assert leftovers.ifbs(node.node_run) == []
    assert [q for q in leftovers.shaping_qdiscs(node.node_run)] == [f"qdisc tbf on {shaped[0]['host_veth']}"]

    # -- containerd crashes and the pod's netns mount is gone: an orphan ----------------------------
    cri_node.containerd.kill()
    node.node_run("umount", pod.netns)
    node.node_run("rm", "-f", pod.netns)
    view = _inspect(node)
    cv = _container(view, pod.id)
    assert cv["orphan"] is True and view["orphans"] == [pod.id]
    assert any(f"network namespace {pod.netns} no longer exists" in r for r in cv["orphan_reasons"]), cv
    before = (leftovers.portmap_entries(node.node_run), leftovers.shaping_qdiscs(node.node_run),
              leftovers.ipam_reservations(node.node_run), leftovers.files_in(node.node_run, leftovers.LIBCNI_CACHE_DIR))
    assert all(before), before
    assert leftovers.files_in(node.node_run, leftovers.TUNING_DIR), "tuning keeps its backup until DEL"

    # -- gc dry run: plans the DEL, changes nothing -------------------------------------------------
    gc = [*cnichain_cli(), "gc", "--cache-dir", LIBCNI_ROOT, "--bin-dir", node.bin_dir]
    plan = node.node_run(*gc).stdout
    print(f"gc plan:\n{plan}")  # shown with -rP
    assert f"would DEL   {NETWORK}/{pod.id}/eth0: netns {pod.netns} is gone" in plan, plan
    assert "dry run: nothing changed" in plan, plan
    after_dry = (leftovers.portmap_entries(node.node_run), leftovers.shaping_qdiscs(node.node_run),
                 leftovers.ipam_reservations(node.node_run), leftovers.files_in(node.node_run, leftovers.LIBCNI_CACHE_DIR))
    assert after_dry == before
    assert _container(_inspect(node), pod.id)["orphan"] is True

    # -- gc --apply: DEL with libcni's cached conflist, result and capability args ------------------
    applied = node.node_run(*gc, "--apply", check=False)
    print(f"gc --apply:\n{applied.stdout}")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"deleted {NETWORK}/{pod.id}/eth0" in applied.stdout, applied.stdout
    assert leftovers.portmap_entries(node.node_run) == []
    assert leftovers.ifbs(node.node_run) == [] and leftovers.shaping_qdiscs(node.node_run) == []
    assert leftovers.ipam_reservations(node.node_run) == []
    assert leftovers.files_in(node.node_run, leftovers.LIBCNI_CACHE_DIR) == []
    assert leftovers.files_in(node.node_run, leftovers.TUNING_DIR) == []
    # The host veth stays while the pause process holds the namespace; with the netns path gone,
    # no DEL can reach it, and inspect shows nothing for it: no cache entry names its container.
    assert [c["container_id"] for c in _inspect(node)["containers"]] == []
