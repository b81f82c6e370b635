"""route-override: rewrite the pod's routes (flush, delete, add) after the interface plugin ran.

Drop-in for openshift/route-override-cni with its known defects fixed: a missing ``prevResult`` is
a clear error instead of a nil-pointer panic (upstream issue #22); ``delroutes`` removes the route
from the pod even when the previous result did not list it; CNI 1.1.0 is supported.  A route the
kernel refuses (a clash, an unreachable gateway) is printed to stderr and skipped, as the original
does, so a conflist that worked with it keeps working.  DEL is a no-op, as in the reference
(routes die with the pod's interface), and never loads pyroute2.

Latency: DEL and VERSION load nothing beyond the skeleton; the config and plan modules (which
need ``ipaddress``) are imported by ADD and CHECK only.
"""

from __future__ import annotations

from cnichain.common import netns
from cnichain.common.errors import plugin_error
from cnichain.common.kernel_errors import KernelError
from cnichain.common.log import log
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Result

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable

PREV_MISSING = (
    "Required prevResult missing: route-override must be chained after the plugin that "
    "creates the interface"
)


def _tolerated(step: Callable[..., None], *args: Any) -> None:
    """A route the kernel refuses to delete or add is reported on stderr and skipped, as the
    original plugin does (it prints every netlink error and carries on): a conflist that worked
    with it keeps creating pods here."""
    try:
        step(*args)
    except KernelError as exc:
        log.notice(f"route-override: {exc.msg} (ignored, as the original route-override does)")


def cmd_add(req: Request) -> Result:
    from .config import load
    from .plan import new_result, routes_to_delete, target_interfaces

    cfg = load(req.conf)
    for what in cfg.skipped:
        log.notice(f"route-override: {what}: route skipped (ignored, as the original route-override does)")
    prev = req.require_prev_result(PREV_MISSING)
    targets = target_interfaces(prev, req.ifname)
    result = new_result(prev, cfg)
    if not (cfg.flushroutes or cfg.all_delroutes() or cfg.addroutes):
        return result  # nothing to change in the pod
    from cnichain.common import netlink

    from . import kernel

    try:
        with netns.entered(req.netns):
            with netlink.route_socket() as ipr:
                indexes = kernel.interface_indexes(ipr, targets)
                present = kernel.list_routes(ipr)
                by_index = {v: k for k, v in indexes.items()}
                for r in routes_to_delete(present, set(indexes.values()), cfg):
                    _tolerated(kernel.delete, ipr, r, by_index.get(r.oif or 0, "?"))
                if cfg.addroutes:
                    dev = targets[0]
                    oif = kernel.interface_or_error(indexes, dev)
                    present = kernel.list_routes(ipr)
                    for spec in cfg.addroutes:
                        _tolerated(kernel.add, ipr, spec, oif, dev, present)
    except netns.NetnsGone as exc:
        raise plugin_error(f"failed to override routes: {exc.msg}") from None
    return result


def cmd_del(req: Request) -> None:
    """Nothing to undo: the routes belong to the pod's interface and go with it."""
    return None


def cmd_check(req: Request) -> None:
    from .config import load
    from .plan import check_problems, target_interfaces

    cfg = load(req.conf)
    if cfg.skipcheck:
        return None
    prev = req.require_prev_result("Required prevResult missing")
    if not (cfg.flushroutes or cfg.all_delroutes() or cfg.addroutes):
        # Nothing overridden, nothing of ours to verify: the routes in the result are the previous
        # plugin's, and its own CHECK covers them.
        return None
    targets = target_interfaces(prev, req.ifname)
    from cnichain.common import netlink

    from . import kernel

    with netns.entered(req.netns):
        with netlink.route_socket() as ipr:
            indexes = kernel.interface_indexes(ipr, targets)
            present = kernel.list_routes(ipr)
    problems = check_problems(present, set(indexes.values()), prev, cfg)
    if problems:
        raise plugin_error(problems[0], "; ".join(problems[1:]))
    return None


PLUGIN = Plugin(
    name="route-override",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    about="CNI route-override plugin (cnichain)",
)
