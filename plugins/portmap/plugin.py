"""portmap: forward host ports to a pod, on nftables, owned per container.

ADD installs this container's map elements (or, for a config with conditions or a key another
container claimed first, its chains) in one transaction; DEL removes exactly them, with or without
``prevResult``, ``CNI_NETNS`` or ``runtimeConfig.portMappings`` (the reference needs the mappings
again on DEL and leaks its rules without them).  CHECK reads the container's entries back; GC
removes the mappings of containers not in ``cni.dev/valid-attachments``.
The result is ``prevResult``, untouched, in the config's version.
"""

from __future__ import annotations

from cnichain.common.errors import CniError, plugin_error
from cnichain.common.log import log
from cnichain.common.rollback import Rollback
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Result

from . import names
from .config import PortmapConfig, container_ips, load
from .plan import OwnerPlan, plan_owner

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Optional


def _config(req: Request) -> PortmapConfig:
    """The config, strict for ADD only (see :func:`.config.load`); what a lenient load left out
    and what is accepted for compatibility only are logged once."""
    cfg = load(req.conf, strict=req.command == "ADD")
    if cfg.backend == "iptables":
        log.info('portmap: backend "iptables" requested; this plugin always programs nftables '
                 f"(table {names.FAMILY_TABLE}), and iptables-style conditions are translated")
    marks = [k for k in cfg.ignored_keys if k in ("markMasqBit", "externalSetMarkChain")]
    if marks:
        log.info(
            f"portmap: {', '.join(marks)} only tune the iptables backend's packet marks; "
            "this plugin masquerades hairpin and localhost traffic itself, so they have no effect"
        )
    log.skipped(req.command, cfg.skipped)
    return cfg


def _plan(req: Request, cfg: PortmapConfig, prev: Result) -> tuple[Optional[OwnerPlan], dict[int, str]]:
    """The container's rules and keys as the config and prevResult describe them (None when
    there is nothing to map), and the container IPs they were planned for."""
    if not cfg.mappings:
        return None, {}
    ips = container_ips(prev, req.ifname)
    plan = plan_owner(req.network_name, req.container_id, cfg, ips)
    return (None if plan.empty else plan), ips


def cmd_add(req: Request) -> Result:
    cfg = _config(req)
    prev = req.require_prev_result("must be called as chained plugin")
    plan, ips = _plan(req, cfg, prev)
    if plan is None:
        return prev
    from . import kernel

    localnet = None
    if cfg.snat and 4 in ips and any(m.applies_to(4) for m in cfg.mappings):
        localnet = kernel.localnet_interface(ips[4], prev)
    with Rollback() as undo:  # all or nothing
        kernel.install(plan)
        undo.push("remove rules", kernel.remove, plan.owner)
        if localnet:
            kernel.enable_route_localnet(localnet)
    for family in sorted(ips):
        for proto in kernel.CONNTRACK_PROTOCOLS:
            ports = sorted({m.host_port for m in cfg.mappings if m.protocol == proto and m.applies_to(family)})
            if ports:
                kernel.flush_conntrack(family, proto, ports)
    return prev


def cmd_del(req: Request) -> None:
    """Removes by owner (network + container ID) and by the reference's tags, so it needs no
    config key at all: a config that does not even decode is logged and cleaned up anyway."""
    try:
        cfg: Optional[PortmapConfig] = _config(req)
    except CniError as exc:
        log.skipped("DEL", [f"the portmap keys ({exc.msg}); removing by container ID"])
        cfg = None
    plan = None
    ips: dict[int, str] = {}
    try:
        prev = req.prev_result
    except CniError:
        prev = None
    if prev is not None:
        ips = container_ips(prev, req.ifname)
    if cfg is not None and cfg.mappings and prev is not None and not cfg.skipped:
        # What ADD installed if the runtime resent the same mappings and prevResult (libcni
        # does): lets DEL skip listing.  Anything unusable here only means listing instead.
        plan, _ips = _plan(req, cfg, prev)
    from . import kernel

    held = kernel.remove(names.owner_id(req.network_name, req.container_id), plan)
    _flush_deleted(held, ips)
    kernel.remove_reference_rules(req.network_name, req.container_id)
    return None


def _flush_deleted(held: list[str], ips: dict[int, str]) -> None:
    """The UDP/SCTP flows DNATed to this pod's ports, so a client's next datagram finds the
    port's new owner (or nothing) instead of the deleted pod; all flows to the port when the
    pod's addresses are unknown (no prevResult)."""
    from . import kernel

    by: dict[tuple[int, str], set[int]] = {}
    for key in held:
        served = names.key_port(key)
        if served is not None and served[1] in kernel.CONNTRACK_PROTOCOLS:
            by.setdefault((served[0], served[1]), set()).add(served[2])
    for (family, proto), ports in sorted(by.items()):
        pod = {ips[family]} if family in ips else None
        kernel.flush_conntrack(family, proto, sorted(ports), pod)


def cmd_check(req: Request) -> None:
    cfg = _config(req)
    prev = req.require_prev_result("Required prevResult missing")
    plan, _ips = _plan(req, cfg, prev)
    if plan is None:
        return None
    from . import kernel

    from .verify import holds_any, problem

    snap = kernel.snapshot()
    if not holds_any(snap, plan) and kernel.reference_rules_present(req.network_name, req.container_id):
        return None  # a pod the reference set up before a swap in place: its rules do the job
    found = problem(snap, plan)
    if found is not None:
        raise plugin_error(found)
    return None


def cmd_gc(req: Request) -> None:
    _config(req)
    valid = [cid for cid, _ifname in req.valid_attachments()]
    from . import kernel

    from .rebuild import stale_owners

    kernel.remove_many(lambda snap: stale_owners(snap, req.network_name, valid))
    return None


def cmd_status(req: Request) -> None:
    """Node health only: fails (code 50) when nftables is unusable, since every ADD with a
    hostPort would fail.  No config key is read: none can fail STATUS."""
    from . import kernel

    reason = kernel.nft_unusable()
    if reason is not None:
        from cnichain.common.health import not_available

        raise not_available("portmap", f"nftables is unusable: {reason}",
                            "load the nf_tables kernel modules and install libnftables with its Python binding")
    return None


PLUGIN = Plugin(
    name="portmap",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    gc=cmd_gc,
    status=cmd_status,
    about="CNI portmap plugin (cnichain, nftables)",
)
