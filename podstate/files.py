"""The plugins' on-disk state: host-local reservations and tuning backups.

Read with the plugins' own formats (``plugins/host_local/store.py``, ``plugins/tuning/backup.py``)
and never written here.  Directories come from the operator or from cached conflists, so every one
is checked to be absolute before it is listed, and nothing outside it is followed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.podstate.cache import valid_id

_MAX_FILES = 100_000


@dataclass
class Reservation:
    network: str
    ip: str
    container_id: str
    ifname: Optional[str]  # None: the reference's legacy id-only format
    path: str


@dataclass
class TuningBackup:
    container_id: str
    ifname: str
    path: str
    saved: dict = field(default_factory=dict)  # the original values tuning will restore


def safe_dir(path: str) -> bool:
    return bool(path) and os.path.isabs(path) and "\0" not in path


def read_reservations(data_dir: str) -> list[Reservation]:
    """Every ``<data_dir>/<network>/<ip>`` file: who holds which address."""
    from cnichain.common.goip import parse_ip
    from cnichain.plugins.host_local.kernel import Owner

    if not safe_dir(data_dir):
        return []
    out: list[Reservation] = []
    try:
        networks = sorted(os.listdir(data_dir))
    except OSError:
        return out
    for network in networks:
        folder = os.path.join(data_dir, network)
        if not valid_id(network) or os.path.islink(folder) or not os.path.isdir(folder):
            continue
        try:
            names = sorted(os.listdir(folder))[:_MAX_FILES]
        except OSError:
            continue
        for name in names:
            if parse_ip(name) is None:
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            try:
                with open(path, "rb") as fh:
                    owner = Owner.parse(fh.read(4096))
            except OSError:
                continue
            if owner is None or not valid_id(owner.container_id):
                continue
            out.append(Reservation(network, name, owner.container_id, owner.ifname, path))
    return out


def read_tuning_backups(data_dir: str) -> list[TuningBackup]:
    """Every backup file of tuning's naming (:func:`cnichain.plugins.tuning.backup.backup_path`)."""
    from cnichain.plugins.tuning import backup

    if not safe_dir(data_dir):
        return []
    try:
        names = sorted(os.listdir(data_dir))[:_MAX_FILES]
    except OSError:
        return []
    out = []
    for name in names:
        owner = backup.owner_of(name)
        if owner is None or not valid_id(owner[0]):
            continue
        cid, ifname = owner
        path = os.path.join(data_dir, name)
        if os.path.islink(path):
            continue
        saved: Any = backup.load(path)
        out.append(TuningBackup(cid, ifname, path, saved if isinstance(saved, dict) else {}))
    return out


@dataclass
class Pool:
    """One host-local range set of a network, as far as its store shows: the exhaustion report
    STATUS deliberately does not give (a full range fails the next ADD, not the node)."""

    network: str
    data_dir: str
    range_set: str
    capacity: int
    reserved: int

    @property
    def free(self) -> int:
        return max(self.capacity - self.reserved, 0)

    def to_dict(self) -> dict:
        return {"network": self.network, "data_dir": self.data_dir, "range_set": self.range_set,
                "capacity": self.capacity, "reserved": self.reserved, "free": self.free}


def read_pools(network: str, cni_version: str, ipam: dict) -> list[Pool]:
    """Capacity and reservations of each range set of a host-local ``ipam`` config (from a cached
    conflist); [] when the config does not parse (an ADD with it would have failed anyway)."""
    from cnichain.common.errors import CniError
    from cnichain.plugins.host_local.config import load
    from cnichain.plugins.host_local.kernel import DiskStore

    try:
        cfg = load({"cniVersion": cni_version, "name": network, "ipam": ipam})
        if not safe_dir(cfg.data_dir):
            return []
        store = DiskStore(cfg.data_dir, cfg.name)
        return [Pool(network, cfg.data_dir, str(rs), *store.usage(rs)) for rs in cfg.ranges]
    except (CniError, OSError, ValueError):
        return []
