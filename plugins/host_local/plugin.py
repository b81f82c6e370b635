"""host-local IPAM: the handlers, wiring config, the allocator (plan) and the disk store (kernel).

ADD/DEL/CHECK behave as containernetworking/plugins' host-local and share its on-disk state.
GC and STATUS (CNI 1.1) are additions the reference lacks: GC reclaims reservations of attachments
the runtime no longer knows (leaks after reboots or lost DELs); STATUS fails only when the store
directory cannot take reservations (unwritable, not creatable), which no pod gets past.  An
exhausted pool is *not* a STATUS failure: under containerd 2.1+ that would turn the node NotReady
and evict every running pod; it fails the next ADD ("no IP addresses available") instead.
"""

from __future__ import annotations

from cnichain.common.errors import plugin_error
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import DNS, IPConfig, Result

from .plan import allocate, os_error_text
from .config import IpamConfig, load
from .dns import parse_resolv_conf
from .kernel import DiskStore

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every exec
    from typing import Callable, Optional


def _os_errors(fn: Callable[[Request], Optional[Result]]) -> Callable[[Request], Optional[Result]]:
    """File system failures become the reference's plain ``op path: reason`` errors (code 999)."""

    def wrapper(req: Request) -> Optional[Result]:
        try:
            return fn(req)
        except OSError as exc:
            raise plugin_error(os_error_text(exc)) from None

    # What functools.wraps would copy, without importing functools for it.
    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    wrapper.__module__, wrapper.__wrapped__ = fn.__module__, fn  # type: ignore[attr-defined]
    return wrapper


def _load(req: Request) -> IpamConfig:
    return load(req.conf, req.args, strict=req.command == "ADD")


def _remove_locked(req: Request, remove: Callable[[IpamConfig, DiskStore], list[str]]) -> None:
    """DEL and GC: ``remove`` reservations under the network's lock, if the network has a store
    at all (a missing one is nothing to do); any file that could not be deleted fails the call."""
    cfg = _load(req)
    store = DiskStore(cfg.data_dir, cfg.name)
    errors: list[str] = []
    with store.locked(create=False) as held:
        if held:
            errors = remove(cfg, store)
    if errors:
        raise plugin_error(";".join(errors))


@_os_errors
def cmd_add(req: Request) -> Result:
    cfg = _load(req)
    dns = parse_resolv_conf(cfg.resolv_conf) if cfg.resolv_conf else DNS()
    store = DiskStore(cfg.data_dir, cfg.name)
    with store.locked():
        allocs = allocate(store, cfg, req.container_id, req.ifname)
    return Result(
        cni_version=req.cni_version,
        ips=[IPConfig(address=a.cidr, gateway=a.gateway) for a in allocs],
        routes=list(cfg.routes),
        dns=dns,
    )


@_os_errors
def cmd_del(req: Request) -> None:
    def release(cfg: IpamConfig, store: DiskStore) -> list[str]:
        # One release per range set, like the reference (the second pass is what catches legacy
        # id-only files left next to new-format ones).
        return [err for _ in cfg.ranges for err in store.release_by_id(req.container_id, req.ifname)]

    _remove_locked(req, release)
    return None


@_os_errors
def cmd_check(req: Request) -> None:
    cfg = _load(req)
    store = DiskStore(cfg.data_dir, cfg.name)
    with store.locked(create=False) as held:
        found = held and store.find_by_id(req.container_id, req.ifname)
    if not found:
        raise plugin_error(f"host-local: Failed to find address added by container {req.container_id}")
    return None


@_os_errors
def cmd_gc(req: Request) -> None:
    _remove_locked(req, lambda cfg, store: store.gc(set(req.valid_attachments())))
    return None


def cmd_status(req: Request) -> None:
    """Only ``name`` and ``ipam.dataDir`` are read (leniently): no other key can fail STATUS."""
    from cnichain.common.health import not_available

    from .config import status_data_dir
    from .kernel import store_unwritable

    reason = store_unwritable(status_data_dir(req.conf), req.network_name)
    if reason is not None:
        raise not_available("host-local", f"cannot store IP reservations: {reason}",
                            "make the directory writable by root, or point ipam.dataDir at a writable one")
    return None


PLUGIN = Plugin(
    name="host-local",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    gc=cmd_gc,
    status=cmd_status,
    about="CNI host-local plugin (cnichain)",
)
