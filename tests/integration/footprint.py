"""Everything pods leave on a lab node, as one comparable snapshot (kernel and disk).

``footprint`` reads what the chain owns per pod -- nftables rules and map/set elements (portmap's
table, bridge's masquerade table), veths and IFBs, tc qdiscs, host-local reservations, tuning
backups, the runner's result cache -- into sets of normalised strings, so a test can assert
"nothing left" (every set empty) or "exactly as before" (two snapshots equal) and a failure shows
the difference.  Bridges themselves are not per pod and are left out.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cnichain.plugins.bridge.rules import MASQ_TABLE, NET_CHAIN_PREFIX, PODS_CHAIN, SPOOF_TABLE
from cnichain.plugins.host_local.kernel import LAST_IP_PREFIX, LOCK_NAME, TEMP_PREFIX
from cnichain.plugins.portmap.names import TABLE as PORTMAP_TABLE_NAME
from cnichain.tools.lab import Lab
from tests.runtime.leftovers import PORTMAP_OWNED_PREFIXES, PORTMAP_TABLE

OWNED_TABLES = (PORTMAP_TABLE_NAME, MASQ_TABLE, SPOOF_TABLE)


def _strip(value: Any) -> Any:
    """Drop nftables handles (they change when a rule is re-made) and sort element lists."""
    if isinstance(value, dict):
        out = {k: _strip(v) for k, v in value.items() if k != "handle"}
        if isinstance(out.get("elem"), list):
            out["elem"] = sorted(out["elem"], key=lambda e: json.dumps(e, sort_keys=True))
        return out
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def nft_items(lab: Lab) -> set[str]:
    """Rules and map/set elements of our tables; portmap's shared skeleton (the hook chains and
    their map lookups) is not per pod, only its per-container chains' rules are, and neither is
    bridge's masquerade dispatch (``pods`` and the subnets' chains): its per-pod state is elements."""
    # A failed nft (or one that printed nothing) is not an empty ruleset: it raises here, so
    # "nothing left" cannot be read off a listing that never happened.
    proc = lab.run(lab.node, "nft", "-j", "list", "ruleset", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AssertionError(f"nft -j list ruleset failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    items = json.loads(proc.stdout)["nftables"]
    out = set()
    for item in items:
        for kind in ("rule", "map", "set"):
            body = item.get(kind)
            if not body or body.get("table") not in OWNED_TABLES:
                continue
            if kind != "rule" and not body.get("elem"):
                continue
            if (kind == "rule" and body.get("table") == PORTMAP_TABLE[1]
                    and not str(body.get("chain", "")).startswith(PORTMAP_OWNED_PREFIXES)):
                continue
            if (kind == "rule" and body.get("table") == MASQ_TABLE
                    and (body.get("chain") == PODS_CHAIN or str(body.get("chain", "")).startswith(NET_CHAIN_PREFIX))):
                continue
            out.add(f"{kind} " + json.dumps(_strip(body), sort_keys=True))
    return out


def links(lab: Lab) -> set[str]:
    found = json.loads(lab.run(lab.node, "ip", "-j", "-d", "link", "show").stdout or "[]")
    return {f"{(link.get('linkinfo') or {}).get('info_kind')} {link['ifname']}" for link in found
            if (link.get("linkinfo") or {}).get("info_kind") in ("veth", "ifb")}


def qdiscs(lab: Lab) -> set[str]:
    found = json.loads(lab.run(lab.node, "tc", "-j", "qdisc", "show").stdout or "[]")
    return {f"{q.get('kind')} {q.get('handle')} on {q.get('dev')}" for q in found
            if q.get("kind") in ("tbf", "ingress", "clsact")}


def files(folder: str, skip: tuple[str, ...] = ()) -> set[str]:
    out = set()
    for base, _dirs, names in os.walk(folder):
        for name in names:
            if name.startswith(skip):
                continue
            path = os.path.join(base, name)
            with open(path, "rb") as fh:
                out.add(f"{os.path.relpath(path, folder)}: {fh.read()[:200]!r}")
    return out


def footprint(lab: Lab, workdir: str = "", cache_dir: str = "") -> dict[str, set[str]]:
    """The snapshot; ``workdir`` is where ``isolate_conflist`` put IPAM and tuning state,
    ``cache_dir`` the runner's cache (both default to the lab's own)."""
    workdir = workdir or lab.workdir
    cache_dir = cache_dir or os.path.join(lab.workdir, "cache")
    return {
        "nft": nft_items(lab),
        "links": links(lab),
        "qdiscs": qdiscs(lab),
        "reservations": files(os.path.join(workdir, "ipam"), skip=(LOCK_NAME, LAST_IP_PREFIX, TEMP_PREFIX)),
        "ipam temp files": {f for f in files(os.path.join(workdir, "ipam")) if TEMP_PREFIX in f},
        "tuning backups": files(os.path.join(workdir, "tuning")),
        "result cache": files(os.path.join(cache_dir, "results")),
    }


def leftovers(snapshot: dict[str, set[str]]) -> dict[str, set[str]]:
    """The non-empty parts of a snapshot: ``{}`` means the node is clean."""
    return {k: v for k, v in snapshot.items() if v}


def difference(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """What appeared and what vanished between two snapshots: ``{}`` when they are equal."""
    out = {}
    for key in before:
        gone, new = before[key] - after[key], after[key] - before[key]
        if gone or new:
            out[key] = {"gone": gone, "new": new}
    return out
