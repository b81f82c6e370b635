"""``cnichain gc``: remove what pods that no longer exist left on a node, whichever runtime made them.

The plan is built first and printed; only ``--apply`` executes it.  Steps:

1. every cached attachment without a live pod gets a DEL, with the conflist the runtime cached
   (libcni's ``config``) or the one given on the command line, its cached result as ``prevResult``
   and its cached CNI_ARGS and capability arguments, exactly as the runtime would have sent it;
2. every network with a known conflist of cniVersion 1.1.0 gets a CNI GC whose valid attachments
   are the live ones: our plugins then drop state the cache never knew about (planted by a crashed
   runtime, or left by a DEL that failed).  The plan lists that state, read as ``inspect`` does;
3. with ``--runtime-endpoint`` (and no ``--valid``): state of our plugins that no cache entry
   names, of containers the runtime does not list -- what a lost result cache leaves -- removed
   through each plugin's own code (:mod:`.uncached`; the reconciler does the same after its grace
   period).  Without the runtime's answer nobody can tell, and this step finds nothing.

"Live" is the operator's ``--valid`` list when given; otherwise an attachment is live unless the
namespace path its cache entry names is gone -- and, when the runtime was asked
(``--runtime-endpoint``, :mod:`.sandboxes`), it does not list the sandbox.  An entry that names no
namespace is kept.

Result-cache hygiene: a DEL that succeeds removes the entry (as libcni does).  A dead entry whose
conflist is known neither in the cache nor on the command line cannot be DELed; ``--apply``
removes its file (stale entries otherwise pile up by the hundred thousand, multus#1488), and says
that its plugins' state, if any, is left to CNI GC of its network and shown by ``inspect``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from cnichain.common.version import at_least

from cnichain.podstate.cache import CacheEntry
from cnichain.podstate.uncached import Leak
from cnichain.podstate.view import ContainerView, NodeView

if TYPE_CHECKING:
    from cnichain.podstate.runtime import Runtime


@dataclass
class Deletion:
    entry: CacheEntry
    reason: str
    conflist: Optional[dict]  # None: no config known, cannot DEL (reported)


@dataclass
class Collection:
    network: str
    conflist: Optional[dict]
    valid: list[tuple[str, str]]
    removes: list[str] = field(default_factory=list)  # what GC would drop, for the operator
    skipped: str = ""  # why no GC is sent for this network


@dataclass
class Plan:
    deletions: list[Deletion] = field(default_factory=list)
    kept: list[tuple[CacheEntry, str]] = field(default_factory=list)
    collections: list[Collection] = field(default_factory=list)
    uncached: list[Leak] = field(default_factory=list)  # state no cache entry names, of pods not listed
    uncached_note: str = ""  # why that state was not looked for
    node_netns: str = ""  # where that state is removed ("" the caller's namespace)


def parse_valid(items: list[str]) -> list[tuple[str, str]]:
    """``CID`` or ``CID/IFNAME`` -> (cid, ifname or "")."""
    out = []
    for item in items:
        cid, _, ifname = item.partition("/")
        out.append((cid, ifname))
    return out


def _is_valid(valid: list[tuple[str, str]], cid: str, ifname: str) -> bool:
    return any(c == cid and (not i or i == ifname) for c, i in valid)


def _state_summary(cv: ContainerView, network: str) -> list[str]:
    """What CNI GC of ``network`` removes for this container (tuning keeps no per-network state)."""
    out = [f"host-local {r.ip}" for r in cv.reservations if r.network == network]
    out += [f"portmap {m.protocol}/{m.host_port}" for m in cv.port_mappings if m.network == network]
    out += [f"ifb {s['ifb']}" for s in cv.shaping if s.get("ifb") and s.get("network") == network]
    out += [f"masquerade {','.join(m.addresses)}" for m in cv.masquerade if m.network == network]
    return out


def build(entries: list[CacheEntry], conflist: Optional[dict], valid: Optional[list[tuple[str, str]]],
          node: Optional[NodeView], listed: Optional[set[str]] = None) -> Plan:
    """The plan, from cache entries (already filtered to the network of interest, if any)."""
    plan = Plan()
    configs: dict[str, dict] = {}
    if conflist is not None:
        configs[str(conflist.get("name"))] = conflist
    for e in entries:
        if e.config is not None and e.network not in configs and e.config.get("name") == e.network:
            configs[e.network] = e.config
    live: dict[str, list[tuple[str, str]]] = {}
    for e in entries:
        if valid is not None:
            alive = _is_valid(valid, e.container_id, e.ifname)
            why = "in --valid" if alive else "not in --valid"
        elif e.netns_alive is None:
            alive, why = True, "its cache entry names no network namespace"
        elif listed is not None and e.container_id in listed:
            alive, why = True, "the runtime still lists its sandbox"
        else:
            alive = bool(e.netns_alive)
            why = f"netns {e.netns} {'exists' if alive else 'is gone'}"
        if alive:
            plan.kept.append((e, why))
            live.setdefault(e.network, []).append((e.container_id, e.ifname))
        else:
            plan.deletions.append(Deletion(e, why, e.config or configs.get(e.network)))
    networks = sorted(set(configs) | {e.network for e in entries})
    for network in networks:
        conf = configs.get(network)
        keep = _expand(valid, entries, node) if valid is not None else live.get(network, [])
        col = Collection(network, conf, keep)
        if conf is None:
            col.skipped = "no conflist known for this network (pass it as CONFLIST)"
        elif not isinstance(conf.get("cniVersion"), str) or not _v11(conf["cniVersion"]):
            col.skipped = f"cniVersion {conf.get('cniVersion')} has no GC (1.1.0 and later)"
        elif conf.get("disableGC") is True:
            col.skipped = "the conflist sets disableGC"
        if node is not None:
            deleted = {d.entry.container_id for d in plan.deletions if d.entry.network == network}
            keep_ids = {c for c, _ in keep}
            for cv in node.containers:
                if cv.container_id in keep_ids or cv.container_id in deleted:
                    continue
                held = _state_summary(cv, network)
                if held:
                    col.removes.append(f"{cv.container_id}: {', '.join(held)}")
        plan.collections.append(col)
    return plan


def _expand(valid: list[tuple[str, str]], entries: list[CacheEntry], node: Optional[NodeView]) -> list[tuple[str, str]]:
    """``--valid ID`` without an ifname keeps every interface the node knows for that container
    (cache entries, reservations, masquerade rules), or ``eth0`` when it knows none: GC must not
    drop a second interface's state because the operator named only the pod."""
    known: dict[str, list[str]] = {}
    for e in entries:
        known.setdefault(e.container_id, []).append(e.ifname)
    for cv in node.containers if node is not None else []:
        names = [r.ifname for r in cv.reservations if r.ifname] + [m.ifname for m in cv.masquerade if m.ifname]
        known.setdefault(cv.container_id, []).extend(names)
    out: list[tuple[str, str]] = []
    for cid, ifname in valid:
        for name in [ifname] if ifname else (known.get(cid) or ["eth0"]):
            if (cid, name) not in out:
                out.append((cid, name))
    return out


def _v11(version: str) -> bool:
    try:
        return at_least(version, "1.1.0")
    except Exception:  # malformed version: no GC
        return False


def render(plan: Plan, applied: Optional[list[str]] = None) -> str:
    lines = []
    verb = "" if applied is not None else "would "
    for d in plan.deletions:
        e = d.entry
        if d.conflist is None:
            lines.append(f"{verb}drop  {e.network}/{e.container_id}/{e.ifname}: {d.reason}; no conflist known, "
                         f"so only its stale cache file {e.path} (pass CONFLIST to DEL it)")
            continue
        lines.append(f"{verb}DEL   {e.network}/{e.container_id}/{e.ifname}: {d.reason}")
    for e, why in plan.kept:
        lines.append(f"keep  {e.network}/{e.container_id}/{e.ifname}: {why}")
    for c in plan.collections:
        if c.skipped:
            lines.append(f"no GC {c.network}: {c.skipped}")
            continue
        lines.append(f"{verb}GC    {c.network} keeping {len(c.valid)} attachment(s)")
        for r in c.removes:
            lines.append(f"      removes {r}")
    from cnichain.podstate import uncached

    lines += uncached.render(plan.uncached, verb) if applied is None else []
    if plan.uncached_note:
        lines.append(plan.uncached_note)
    if applied is not None:
        lines += applied
    elif plan.deletions or plan.uncached or any(not c.skipped for c in plan.collections):
        lines.append("dry run: nothing changed (use --apply)")
    else:
        lines.append("nothing to collect")
    return "\n".join(lines)


def execute(plan: Plan, runtime_for: Callable[[CacheEntry | None], Runtime]) -> tuple[list[str], bool]:
    """Run the plan; ``runtime_for(entry)`` gives a Runtime whose cache holds ``entry`` (None: any).

    Returns report lines and whether everything succeeded.  A failed DEL leaves the entry cached
    (the runtime will retry, and so can the next gc); the GC of its network still runs.
    """
    from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, PluginFailed

    ok = True
    out = []
    for d in plan.deletions:
        e = d.entry
        if d.conflist is None:
            try:
                os.unlink(e.path)
                out.append(f"removed stale cache file {e.path} (no conflist: its plugins' state, if any, is "
                           "left to CNI GC of its network)")
            except FileNotFoundError:
                pass
            except OSError as exc:
                ok = False
                out.append(f"cannot remove {e.path}: {exc.strerror}")
            continue
        try:
            conf = ConfList.from_dict(d.conflist, e.path)
            netns = e.netns if e.netns_alive else ""
            runtime_for(e).delete(conf, Attachment(e.container_id, netns, e.ifname, list(e.cni_args),
                                                   dict(e.capability_args)))
            out.append(f"deleted {e.network}/{e.container_id}/{e.ifname}")
        except (PluginFailed, ConfigError, OSError) as exc:
            ok = False
            out.append(f"DEL failed for {e.network}/{e.container_id}/{e.ifname}: {exc}")
    for c in plan.collections:
        if c.skipped:
            continue
        try:
            runtime_for(None).gc(ConfList.from_dict(c.conflist, c.network), c.valid)
            out.append(f"collected {c.network}")
        except (PluginFailed, ConfigError, OSError) as exc:
            ok = False
            out.append(f"GC failed for {c.network}: {exc}")
    from cnichain.podstate import uncached

    from cnichain.podstate.kernel import _in_netns

    for leak in plan.uncached:
        with _in_netns(plan.node_netns or None):
            lines, done = uncached.collect(leak)
        ok = ok and done
        out.append(f"{'collected' if done else 'collecting failed for'} {leak.key} (no cache entry): "
                   f"{'; '.join(lines)}")
    return out, ok


def run(conflist: str, valid: list[str], cache_dirs: list[str], bin_dirs: list[str], node_netns: str,
        ipam_dirs: list[str], tuning_dirs: list[str], runtime_endpoint: str, apply: bool) -> tuple[str, bool]:
    """``cnichain gc``: the plan, executed when ``apply``, as report text; and whether all of it succeeded.

    ``conflist`` (a path, or "") limits the collection to its network.  Raises ValueError for input
    that is not what it claims to be, :class:`~cnichain.podstate.runtime.ConfigError` (a ValueError) for
    an unusable conflist, RuntimeError when the named runtime does not list its sandboxes.
    """
    from cnichain.podstate import cache as cache_mod
    from cnichain.podstate import view
    from cnichain.podstate.sandboxes import required_listing
    from cnichain.podstate.runtime import ConfList, Runtime, plugin_dirs

    pairs = parse_valid(valid)
    view.check_inputs(cache_dirs, ipam_dirs, tuning_dirs, node_netns, [c for c, _ in pairs])
    if any(i and not cache_mod.valid_ifname(i) for _, i in pairs):
        raise ValueError("--valid: invalid interface name")
    conf_doc = ConfList.load(conflist).raw if conflist else None
    entries = every_entry = [e for d in cache_dirs for e in cache_mod.read_cache(d)]
    if conf_doc is not None:
        entries = [e for e in entries if e.network == conf_doc.get("name")]
    listed = required_listing(runtime_endpoint)
    src = view.Sources(cache_dirs=cache_dirs, ipam_dirs=ipam_dirs, tuning_dirs=tuning_dirs,
                       node_netns=node_netns or None, listed=listed)
    node = view.collect(src, network=str(conf_doc.get("name")) if conf_doc else "")
    plan = build(entries, conf_doc, pairs if valid else None, node, listed)
    _add_uncached(plan, node, listed, every_entry, str(conf_doc.get("name")) if conf_doc else "", bool(valid))
    plan.node_netns = node_netns
    if not apply:
        return render(plan), True
    dirs = plugin_dirs(bin_dirs)

    def runtime_for(entry: Optional[CacheEntry]) -> Runtime:  # the entry's cache root, so DEL finds its result
        root = os.path.dirname(os.path.dirname(entry.path)) if entry is not None else cache_dirs[0]
        return Runtime(dirs, root, node_netns=node_netns or None)

    lines, ok = execute(plan, runtime_for)
    return render(plan, lines), ok


def _add_uncached(plan: Plan, node: NodeView, listed: Optional[set[str]], entries: list[CacheEntry],
                  network: str, operator_valid: bool) -> None:
    """State no cache entry names, of containers the runtime does not list (what the reconciler
    collects after its grace period; here the operator decides).  Only with the runtime's listing:
    without it nobody can tell a lost cache's pod from a live one."""
    from cnichain.podstate import uncached

    if operator_valid:
        return  # --valid drives the CNI GC of the networks; it says nothing about uncached state
    if listed is None:
        plan.uncached_note = "state with no cache entry: not looked for without --runtime-endpoint (cannot tell)"
        return
    leaks = uncached.find(node, listed, {e.container_id for e in entries})
    plan.uncached = [lk for lk in leaks if not network or lk.network == network]
