"""The on-disk reservation store (host-local's only writer), byte-compatible with the reference's ``disk`` backend.

Layout of ``<dataDir>/<network>/`` (shared with the Go plugin, either may run against it):

* one file per reserved address, named by the address's text form, containing
  ``<containerID>\\r\\n<ifname>`` (old reference versions wrote just the ID; still understood);
* ``last_reserved_ip.<rangeSetIndex>``: where the round-robin continues;
* ``lock``: flock(2)ed for the whole allocation or release, by both implementations.

Beyond the reference, a reservation never exists half-written: it is written to a temporary file
and hard-linked into place (link(2) fails if the name exists, so it is as exclusive as O_EXCL).
A process killed mid-write leaves only a temporary file, which the next lock holder deletes.  An
*empty* reservation file — what the reference leaves when killed between create and write, or what
a power cut can leave — is treated as stale and reclaimed, but only while holding the lock, when no
writer can be in the middle of filling it.
"""

from __future__ import annotations

import fcntl
import os

from cnichain.common import atomic
from cnichain.common.errors import plugin_error
from cnichain.common.goip import parse_ip
from cnichain.common.kernel_errors import KernelError
from cnichain.common.record import FrozenRecord
from cnichain.common.skel import valid_name


TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds on every host-local exec
    from typing import Optional

    from .ranges import IP, RangeSet

LINE_BREAK = "\r\n"
LAST_IP_PREFIX = "last_reserved_ip."
LOCK_NAME = "lock"
TEMP_PREFIX = ".cnichain-tmp-"
_FILE_MODE = 0o600


class Owner(FrozenRecord):
    """Who holds a reservation, as read from its file."""

    container_id: str
    ifname: Optional[str]  # None for the legacy id-only format

    @classmethod
    def parse(cls, data: bytes) -> Optional["Owner"]:
        """None for an empty (stale) file; otherwise the owner, however odd the content."""
        text = data.decode("utf-8", "replace").strip()
        if not text:
            return None
        if LINE_BREAK in text:
            cid, ifname = text.split(LINE_BREAK, 1)
            return cls(cid, ifname)
        return cls(text, None)

    def matches(self, container_id: str, ifname: str) -> bool:
        return self.container_id == container_id.strip() and self.ifname == ifname

    def matches_legacy(self, container_id: str) -> bool:
        return self.ifname is None and self.container_id == container_id.strip()


class Entry(FrozenRecord):
    """One reservation file: its name, the address it reserves and who holds it (None: stale)."""

    name: str
    ip: IP
    owner: Optional[Owner]


class DiskStore:
    """Reservations of one network.  Methods other than :meth:`locked` expect the lock held."""

    def __init__(self, data_dir: str, network: str) -> None:
        if not valid_name(network):
            raise plugin_error(f"invalid network name {network!r}")
        self.dir = os.path.join(data_dir, network)

    # -- locking ------------------------------------------------------------------------------
    def locked(self, create: bool = True) -> _Locked:
        """Hold the network's flock; ``with`` gives False (unlocked) if the dir is absent and not
        created, True once the lock is held."""
        return _Locked(self, create)

    # -- allocation ---------------------------------------------------------------------------
    def reserve(self, container_id: str, ifname: str, ip: IP, range_id: str) -> bool:
        if not valid_name(container_id.strip()) or LINE_BREAK in ifname:
            raise plugin_error("invalid characters in containerID or ifname")
        target = self._path(str(ip))
        tmp = self._write_temp((container_id.strip() + LINE_BREAK + ifname).encode())
        try:
            if not self._link_exclusive(tmp, target):
                return False
        finally:
            _unlink_quiet(tmp)
        self._replace(LAST_IP_PREFIX + range_id, str(ip).encode())
        return True

    def _link_exclusive(self, tmp: str, target: str) -> bool:
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            pass
        if not self._is_stale(target):
            return False
        _unlink_quiet(target)
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False

    def _is_stale(self, path: str) -> bool:
        try:
            with open(path, "rb") as f:
                return Owner.parse(f.read(4096)) is None
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def last_reserved_ip(self, range_id: str) -> Optional[IP]:
        try:
            with open(self._path(LAST_IP_PREFIX + range_id), "rb") as f:
                return parse_ip(f.read(64).decode("ascii", "replace").strip())
        except OSError:
            return None

    def get_by_id(self, container_id: str, ifname: str) -> list[IP]:
        return [
            e.ip
            for e in self.entries()
            if e.owner and (e.owner.matches(container_id, ifname) or e.owner.matches_legacy(container_id))
        ]

    def release_ip(self, ip: IP, container_id: str, ifname: str) -> None:
        path = self._path(str(ip))
        owner = self._read_owner(path)
        if owner is not None and owner.matches(container_id, ifname):
            _unlink_quiet(path)

    # -- release / check / gc ------------------------------------------------------------------
    def release_by_id(self, container_id: str, ifname: str) -> list[str]:
        """The reference's ``ReleaseByID``: id+ifname matches, else legacy id-only ones.

        Returns error texts (a file that could not be removed); missing files are fine.
        """
        entries = self.entries()
        targets = [e for e in entries if e.owner and e.owner.matches(container_id, ifname)]
        if not targets:
            targets = [e for e in entries if e.owner and e.owner.matches_legacy(container_id)]
        errors: list[str] = []
        for e in targets:
            self._remove(e, errors)
        return errors

    def find_by_id(self, container_id: str, ifname: str) -> bool:
        entries = self.entries()
        if any(e.owner and e.owner.matches(container_id, ifname) for e in entries):
            return True
        return any(e.owner and e.owner.matches_legacy(container_id) for e in entries)

    def gc(self, valid: set[tuple[str, str]]) -> list[str]:
        """Delete every reservation not owned by a valid attachment; return error texts."""
        valid_ids = {cid for cid, _ in valid}
        errors: list[str] = []
        for e in self.entries():
            o = e.owner
            if o is not None and (
                (o.ifname is not None and (o.container_id, o.ifname) in valid)
                or (o.ifname is None and o.container_id in valid_ids)
            ):
                continue
            self._remove(e, errors)
        return errors

    def _remove(self, entry: Entry, errors: list[str]) -> None:
        """Delete a reservation file; a failure other than "already gone" is added to ``errors``."""
        path = self._path(entry.name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            errors.append(KernelError.of(exc, f"remove {path}").msg)

    def usage(self, rangeset: RangeSet) -> tuple[int, int]:
        """``(capacity, reserved)`` of the set: addresses ADD may hand out, and how many are held
        (stale empty files count as free, the gateway as neither).  Read-only; no lock needed
        for a report (``cnichain inspect``)."""
        capacity = 0
        for r in rangeset.ranges:
            capacity += int(r.end) - int(r.start) + 1
            if r.gateway.version == r.family and r.contains(r.gateway):
                capacity -= 1
        used = 0
        for e in self.entries():
            owning = rangeset.range_for(e.ip)
            if owning is not None and e.ip != owning.gateway and e.owner is not None:
                used += 1
        return capacity, used

    # -- file helpers --------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Reservation files: regular files whose name is an address."""
        out: list[Entry] = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            ip = parse_ip(name)
            if ip is None:
                continue
            path = self._path(name)
            try:
                with open(path, "rb") as f:
                    data = f.read(4096)
            except (IsADirectoryError, FileNotFoundError, PermissionError):
                continue
            out.append(Entry(name, ip, Owner.parse(data)))
        return out

    def _read_owner(self, path: str) -> Optional[Owner]:
        try:
            with open(path, "rb") as f:
                return Owner.parse(f.read(4096))
        except OSError:
            return None

    def _path(self, name: str) -> str:
        """Join a file name to the network dir, refusing anything that could leave it."""
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            raise plugin_error(f"refusing unsafe file name {name!r}")
        return os.path.join(self.dir, name)

    def _write_temp(self, data: bytes) -> str:
        """A new temporary file holding ``data``, named so the next lock holder sweeps it."""
        for _ in range(16):
            path = atomic.temp_sibling(self._path(TEMP_PREFIX), TEMP_PREFIX)
            try:
                atomic.write_new(path, data, _FILE_MODE)  # the reference's mode whatever the umask
            except FileExistsError:
                continue
            return path
        raise plugin_error(f"could not create a temporary file in {self.dir}")

    def _replace(self, name: str, data: bytes) -> None:
        atomic.write_file(self._path(name), data, _FILE_MODE, temp_prefix=TEMP_PREFIX)

    def _remove_temp_files(self) -> None:
        """Leftovers of writers killed mid-write; only safe to call with the lock held."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(TEMP_PREFIX):
                _unlink_quiet(self._path(name))


def store_unwritable(data_dir: str, network: str) -> Optional[str]:
    """Why ADD could not reserve in ``<data_dir>/<network>`` (None: it can); creates nothing that
    stays (the probe file has the temporary prefix the next lock holder sweeps anyway)."""
    from cnichain.common.health import unwritable_reason

    directory = os.path.join(data_dir, network) if valid_name(network) else data_dir
    return unwritable_reason(directory, f"{TEMP_PREFIX}status-{os.getpid()}")


class _Locked:
    """The context of :meth:`DiskStore.locked`.

    A small class rather than a ``contextlib`` generator, which costs an import on every exec
    (see :mod:`cnichain.common.netns` for the same choice).
    """

    __slots__ = ("store", "create", "fd")

    def __init__(self, store: DiskStore, create: bool) -> None:
        self.store = store
        self.create = create
        self.fd = -1

    def __enter__(self) -> bool:
        store = self.store
        if self.create:
            os.makedirs(store.dir, 0o755, exist_ok=True)
        elif not os.path.isdir(store.dir):
            return False
        fd = os.open(store._path(LOCK_NAME), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            store._remove_temp_files()
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return True

    def __exit__(self, *exc_info: object) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)  # closing drops the flock


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
