"""What a pod may leave on a node after its sandbox is gone, read from the kernel and the disk.

StopPodSandbox/RemovePodSandbox (or ``podman rm -f``) must undo everything the chain did: portmap's
per-container chains and map elements, bandwidth's IFB and qdiscs, bridge's host veth, host-local's
reservation, tuning's backup file, and the runtime's pod netns and libcni result cache.  Each check
returns a list of human-readable findings so a failing assertion says exactly what was left.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Callable

from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR as IPAM_DIR
from cnichain.plugins.host_local.kernel import LAST_IP_PREFIX, LOCK_NAME
from cnichain.plugins.portmap import names as portmap_names
from cnichain.plugins.portmap import rebuild as portmap_rebuild
from cnichain.plugins.tuning.config import DEFAULT_DATA_DIR as TUNING_DIR
from cnichain.podstate import cache

PORTMAP_TABLE = (portmap_names.FAMILY, portmap_names.TABLE)
PORTMAP_OWNED_PREFIXES = portmap_names.OWNED_CHAIN_PREFIXES
LIBCNI_CACHE_DIR = os.path.join(cache.LIBCNI_CACHE_DIR, "results")  # the runtime's (libcni's) cached results and capability args
NETNS_DIR = "/run/netns"

Run = Callable[..., subprocess.CompletedProcess]  # Node.node_run: run argv inside the node


def _json(run: Run, *argv: str) -> list:
    text = run(*argv, check=False).stdout or ""
    return json.loads(text) if text.strip() else []


def portmap_snapshot(run: Run) -> portmap_rebuild.Snapshot:
    """portmap's table as portmap reads it (empty when there is no table at all)."""
    family, table = PORTMAP_TABLE
    proc = run("nft", "-j", "list", "table", family, table, check=False)
    if proc.returncode != 0:
        return portmap_rebuild.Snapshot()
    return portmap_rebuild.Snapshot.from_json(json.loads(proc.stdout).get("nftables", []))


def portmap_entries(run: Run) -> list[str]:
    """Per-container chains and map and set elements in our portmap table (the shared skeleton may stay)."""
    family, table = PORTMAP_TABLE
    proc = run("nft", "-j", "list", "table", family, table, check=False)
    if proc.returncode != 0:
        return []  # no table at all: nothing left
    found = []
    for item in json.loads(proc.stdout).get("nftables", []):
        chain = item.get("chain")
        if chain and chain.get("name", "").startswith(PORTMAP_OWNED_PREFIXES):
            found.append(f"chain {chain['name']}")
        for kind in ("map", "set"):
            body = item.get(kind)
            if body and body.get("elem"):
                found.append(f"{kind} {body['name']}: {len(body['elem'])} element(s)")
    return found


def portmap_held(run: Run, network: str, container_id: str) -> list[str]:
    """What portmap holds for one container, by kind, in either of its layouts."""
    snap = portmap_snapshot(run)
    owner = portmap_names.owner_id(network, container_id)
    found = [f"owners element {owner}"] if owner in snap.digests else []
    found += [f"chain {portmap_names.dnat_chain(owner)}"] if owner in snap.chain_owners() else []
    found += [f"map key {k}" for k in snap.map_keys(owner)]
    return found


def portmap_pods(run: Run) -> int:
    """Containers portmap holds hostPorts for (either layout): > 0 while a pod with hostPorts is up."""
    return len(portmap_snapshot(run).owners())


def ifbs(run: Run) -> list[str]:
    return [f"ifb {link['ifname']}" for link in _json(run, "ip", "-j", "link", "show", "type", "ifb")]


def shaping_qdiscs(run: Run) -> list[str]:
    """TBF, ingress and clsact qdiscs anywhere on the node (bandwidth's footprint)."""
    return [f"qdisc {q.get('kind')} on {q.get('dev')}" for q in _json(run, "tc", "-j", "qdisc", "show")
            if q.get("kind") in ("tbf", "ingress", "clsact")]


def pod_veths(run: Run) -> list[str]:
    """Host ends of pod veths (bridge names them ``veth`` + 8 hex; the client link is not one)."""
    return [f"veth {link['ifname']}" for link in _json(run, "ip", "-j", "link", "show", "type", "veth")
            if link.get("ifname", "").startswith("veth")]


def files_in(run: Run, directory: str, ignore: tuple[str, ...] = ()) -> list[str]:
    proc = run("find", directory, "-mindepth", "1", "-not", "-type", "d", check=False)
    names = [line for line in (proc.stdout or "").splitlines() if line]
    return [n for n in names if not n.rsplit("/", 1)[-1].startswith(ignore)]


def ipam_reservations(run: Run) -> list[str]:
    return files_in(run, IPAM_DIR, ignore=(LOCK_NAME, LAST_IP_PREFIX))


def cached_capability_args(run: Run, network: str, container_id: str, ifname: str = "eth0") -> dict:
    """The capability args the runtime passed for one attachment, as libcni cached them.

    This is the runtime's own record of what it sent, so a test can show that it exercised the
    shape it claims to (e.g. containerd's ``{"HostPort": ...}``), not just that a pod came up.
    """
    proc = run("cat", f"{LIBCNI_CACHE_DIR}/{network}-{container_id}-{ifname}")
    return json.loads(proc.stdout).get("capabilityArgs", {})


def everything(run: Run, with_netns: bool = True) -> list[str]:
    """All findings; an empty list means the node is as clean as before the pod."""
    found = portmap_entries(run) + ifbs(run) + shaping_qdiscs(run) + pod_veths(run) + ipam_reservations(run)
    found += files_in(run, TUNING_DIR) + files_in(run, LIBCNI_CACHE_DIR)
    if with_netns:
        found += files_in(run, NETNS_DIR)
    return found
