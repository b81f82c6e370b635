"""tuning: sysctls and interface attributes of the pod's interface, chained after its creator.

ADD reads every original value first, saves them in the backup file, and only then writes; if any
write fails, what was already changed is put back and the backup removed, so a failed ADD leaves
the pod as it found it.  DEL restores MAC, MTU, promisc, allmulti and txqueuelen like the reference
and, unlike it, also the sysctls tuning changed (a sysctl is put back only while it still holds the
value tuning wrote, so a later change by someone else wins).  That matters for interfaces that
outlive the pod (host-device, SR-IOV); for a veth the namespace dies anyway.

Latency: a sysctl-only config never imports pyroute2 (sysctls are files under /proc/sys, written
with the thread inside the pod namespace); DEL without a backup file does not even enter the
namespace.  Nothing on those paths imports ``typing``, ``dataclasses`` or ``socket`` either (about
10 ms per exec together, measured with benchmarks/cold_path.py).
"""

from __future__ import annotations

import os

from cnichain.common import netns, sysctl
from cnichain.common.errors import CniError, plugin_error
from cnichain.common.log import log
from cnichain.common.rollback import Rollback
from cnichain.common.skel import Plugin, Request
from cnichain.common.types import Result

from . import backup, kernel, plan
from .config import (
    DEFAULT_DATA_DIR,
    Sysctl,
    TuningConfig,
    check_allowlist,
    check_duplicate_sysctl_keys,
    load,
    read_allowlist,
    resolve_sysctls,
    valid_rel_path,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from typing import Any, Optional

PREV_MISSING = "Required prevResult missing"


def _read_sysctl(path: str) -> str:
    try:
        return sysctl.read(path)
    except OSError as exc:
        raise kernel.os_error("open", path, exc) from None


def cmd_add(req: Request) -> Result:
    check_duplicate_sysctl_keys(req.stdin)
    cfg = load(req.conf, req.args)
    check_allowlist(cfg, read_allowlist())
    sysctls = resolve_sysctls(cfg, req.ifname)
    prev = req.require_prev_result(PREV_MISSING)
    wanted = plan.wanted_link(cfg)
    if not sysctls and not wanted:
        return prev  # e.g. podman's bare {"type": "tuning"}: nothing to do, nothing to enter
    with netns.entered(req.netns):
        if wanted:
            from cnichain.common import netlink

            with netlink.route_socket() as ipr:
                _apply(req, cfg, sysctls, wanted, ipr)
        else:
            _apply(req, cfg, sysctls, wanted, None)
    if cfg.mac or cfg.mtu:
        for iface in prev.interfaces:
            if iface.name == req.ifname:
                if cfg.mac:
                    iface.mac = cfg.mac
                if cfg.mtu and iface.mtu:
                    iface.mtu = cfg.mtu
    return prev


def _apply(req: Request, cfg: TuningConfig, sysctls: list[Sysctl], wanted: dict, ipr: Any) -> None:
    """Snapshot, save the backup, then change; undo everything if a change fails."""
    olds = [(s, _read_sysctl(s.path)) for s in sysctls]
    state = None
    data: dict[str, Any] = {}
    if wanted:
        state = kernel.require(ipr, req.ifname)
        data.update(plan.link_snapshot(state, wanted))
    changed = plan.changed_sysctls(olds)
    if changed:
        data["sysctl"] = changed
    path = backup.backup_path(cfg.data_dir, req.container_id, req.ifname)
    existing = backup.load(path)
    with Rollback() as undo:
        if data:
            kernel.save_backup(path, backup.merge(existing, data))
            undo.push("backup file", _restore_backup, path, existing)
        for s, old in olds:
            if s.rel in changed:
                kernel.write_sysctl(s.path, s.value)
                undo.push(f"sysctl {s.path}", kernel.write_sysctl, s.path, old)
        if wanted and state is not None:  # state was read above whenever link changes are wanted
            # Registered first: a partly applied change is put back as a whole.
            undo.push("link attributes", _restore_link, ipr, req.ifname, data)
            kernel.apply(ipr, state, req.ifname, wanted)


def _restore_backup(path: str, existing: Optional[dict]) -> None:
    """The backup file as it was before this ADD: the earlier one, or none."""
    if existing:
        kernel.save_backup(path, existing)
    else:
        kernel.remove_backup(path)


def _restore_link(ipr: Any, ifname: str, data: dict) -> None:
    now = kernel.read(ipr, ifname)
    if now is not None:
        kernel.apply(ipr, now, ifname, backup.link_part(data))


# -- DEL ----------------------------------------------------------------------------------------


def cmd_del(req: Request) -> None:
    try:
        cfg = load(req.conf, req.args, strict=False)
        log.skipped("DEL", cfg.skipped)
        data_dir = cfg.data_dir
    except CniError as exc:  # DEL needs only the dataDir: restore from the backup anyway
        raw = req.conf.get("dataDir")
        data_dir = raw if isinstance(raw, str) and raw.startswith("/") and "\0" not in raw else DEFAULT_DATA_DIR
        log.skipped("DEL", [f"the tuning keys ({exc.msg}); restoring from {data_dir}"])
    if not data_dir:
        return None  # no backup can be found (logged above)
    path = backup.backup_path(data_dir, req.container_id, req.ifname)
    data = backup.load(path)
    if data is None:
        return None  # nothing was changed, or already restored: no namespace, no netlink
    if not data or not req.netns:
        kernel.remove_backup(path)  # unreadable, or the pod's namespace is already gone
        return None
    try:
        with netns.entered(req.netns):
            errors = _restore(req, data)
    except netns.NetnsGone:
        kernel.remove_backup(path)
        return None
    if errors:
        # As the reference: DEL still succeeds (a failing DEL wedges pod deletion), but the backup
        # stays so a repeated DEL can try again.
        log.error(f"tuning: restore of {req.ifname} incomplete: {'; '.join(errors)}")
        return None
    kernel.remove_backup(path)
    return None


def _restore(req: Request, data: dict) -> list[str]:
    errors: list[str] = []
    saved = data.get("sysctl")
    if isinstance(saved, dict):
        for rel, entry in saved.items():
            if not (isinstance(rel, str) and valid_rel_path(rel) and isinstance(entry, dict)):
                continue
            old, new = entry.get("old"), entry.get("new")
            if not isinstance(old, str) or not isinstance(new, str):
                continue
            full = os.path.join(sysctl.PROC_SYS, rel)
            try:
                kernel.restore_sysctl(full, old, new)  # False: its interface is gone, nothing to do
            except OSError as exc:
                errors.append(f"failed to restore {full}: {exc.strerror}")
    wanted = backup.link_part(data)
    if wanted:
        from cnichain.common import netlink

        with netlink.route_socket() as ipr:
            state = kernel.read(ipr, req.ifname)
            if state is not None:
                try:
                    kernel.apply(ipr, state, req.ifname, wanted)
                except CniError as exc:
                    errors.append(exc.msg)
    return errors


# -- CHECK --------------------------------------------------------------------------------------


def cmd_check(req: Request) -> None:
    check_duplicate_sysctl_keys(req.stdin)
    cfg = load(req.conf, req.args, strict=False)
    log.skipped("CHECK", cfg.skipped)
    req.require_prev_result(PREV_MISSING)
    sysctls = resolve_sysctls(cfg, req.ifname)  # IFNAME resolved here too (the reference forgot)
    wanted = plan.wanted_link(cfg)
    with netns.entered(req.netns):
        for s in sysctls:
            current = _read_sysctl(s.path)
            if not plan.same(current, s.value):
                raise plugin_error(
                    f"Error: Tuning configured value of {s.path} is {s.value}, current value is {current}"
                )
        if not wanted:
            if not _link_exists(req.ifname):  # existence only: no netlink needed
                raise plugin_error(f"Cannot find container link {req.ifname}")
            return None
        from cnichain.common import netlink

        with netlink.route_socket() as ipr:
            state = kernel.read(ipr, req.ifname)
    if state is None:
        raise plugin_error(f"Cannot find container link {req.ifname}")
    _compare(req.ifname, cfg, state)
    return None


def _link_exists(ifname: str) -> bool:
    """Whether the calling thread's namespace has ``ifname``, from /proc (what if_nametoindex(3)
    answers, without importing ``socket`` for it: ~3 ms per exec)."""
    try:
        with open("/proc/thread-self/net/dev", "rb") as fh:
            lines = fh.read().decode("utf-8", "replace").splitlines()[2:]
    except OSError:
        return False
    # "  eth0: 1234 ..." -- interface names never contain ':' (the kernel refuses them).
    return any(line.split(":", 1)[0].strip() == ifname for line in lines)


def _compare(ifname: str, cfg: TuningConfig, state: Any) -> None:
    if cfg.mac and cfg.mac != state.mac:
        raise plugin_error(f"Error: Tuning configured Ethernet of {ifname} is {cfg.mac}, current value is {state.mac}")
    if cfg.promisc and not state.promisc:
        raise plugin_error(f"Error: Tuning link {ifname} configured promisc is true, current value is 0")
    if cfg.mtu and cfg.mtu != state.mtu:
        raise plugin_error(f"Error: Tuning configured MTU of {ifname} is {cfg.mtu}, current value is {state.mtu}")
    if cfg.allmulti is not None and cfg.allmulti != state.allmulti:
        raise plugin_error(
            f"Error: Tuning configured all-multicast mode of {ifname} is {str(cfg.allmulti).lower()}, "
            f"current value is {str(state.allmulti).lower()}"
        )
    if cfg.txqlen is not None and cfg.txqlen != state.txqlen:
        raise plugin_error(
            f"Error: Tuning configured Transmit Queue Length of {ifname} is {cfg.txqlen}, "
            f"current value is {state.txqlen}"
        )


PLUGIN = Plugin(
    name="tuning",
    add=cmd_add,
    delete=cmd_del,
    check=cmd_check,
    about="CNI tuning plugin (cnichain)",
)
