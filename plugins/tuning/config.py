"""tuning's configuration: parsing, precedence of the override sources, and every safety check.

All checks that can fail run here, before the plugin enters the pod namespace, so a bad config
never leaves a half-tuned interface behind.  Messages follow the reference plugin where it has one
(``failed to load netconf: ...``, ``duplicated sysctl keys are not allowed``, the allowlist text).

Stricter than the reference on purpose: a sysctl key must be dotted (``net.core.somaxconn``),
start with ``net``, and have no empty, ``.`` or ``..`` segment and no ``/``; the reference let
``net/../..`` style keys through its prefix check in some versions and accepted slash keys.
"""

from __future__ import annotations

import os
import posixpath

from cnichain.common import gojson, leanjson
from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import CniError, config_error, plugin_error
from cnichain.common.record import FrozenRecord
from cnichain.common.sysctl import PROC_SYS

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses were a third of a sysctl-only exec
    from typing import Any, Optional

DEFAULT_DATA_DIR = "/run/cni/tuning"
ALLOWLIST_FILE = "/etc/cni/tuning/allowlist.conf"
_LOAD = "failed to load netconf: "


class Sysctl(FrozenRecord):
    """One sysctl to set: the key as written, its resolved relative path and the value."""

    key: str
    rel: str  # "net/ipv4/conf/eth0/arp_filter"
    value: str

    @property
    def path(self) -> str:
        return os.path.join(PROC_SYS, self.rel)


class TuningConfig(FrozenRecord):
    """The validated tuning keys, overrides applied."""

    sysctl: tuple[tuple[str, str], ...] = ()  # (key as written, value), in config order
    mac: str = ""  # normalised: lower case, colon separated
    mtu: int = 0  # 0 = leave alone
    promisc: bool = False  # False = leave alone (reference semantics)
    allmulti: Optional[bool] = None
    txqlen: Optional[int] = None
    data_dir: str = DEFAULT_DATA_DIR  # "" when a lenient load found it unusable (relative)
    skipped: tuple[str, ...] = ()  # what a lenient load (every command but ADD) left out, for the log

    @property
    def changes_link(self) -> bool:
        """Whether any link attribute is set (the only case that needs netlink on ADD)."""
        return bool(self.mac or self.mtu or self.promisc or self.allmulti is not None or self.txqlen is not None)


# -- MAC addresses ----------------------------------------------------------------------------


def _hex_groups(text: str, sep: str, width: int) -> Optional[bytes]:
    groups = text.split(sep)
    if any(len(g) != width for g in groups):
        return None
    try:
        return bytes.fromhex("".join(groups))
    except ValueError:
        return None


def parse_mac(text: str) -> bytes:
    """Go's ``net.ParseMAC`` forms (6, 8 or 20 bytes; ``:``/``-`` pairs or ``.`` quads)."""
    raw: Optional[bytes] = None
    if len(text) >= 14:
        if text[2:3] in (":", "-"):
            raw = _hex_groups(text, text[2], 2)
        elif text[4:5] == ".":
            raw = _hex_groups(text, ".", 4)
    if raw is None or len(raw) not in (6, 8, 20):
        raise plugin_error(f"invalid args {text} for MAC addr: address {text}: invalid MAC address")
    if len(raw) == 6 and (raw[0] & 1 or raw == bytes(6)):
        raise plugin_error(f"invalid args {text} for MAC addr: {format_mac(raw)} is not a unicast address")
    return raw


def format_mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


# -- sysctl keys ------------------------------------------------------------------------------


def resolve_sysctl(key: str, value: str, ifname: str) -> Sysctl:
    """Resolve ``key`` below ``/proc/sys/net`` for interface ``ifname``, as the reference does.

    Dots become path separators first (so a slash-form key such as ``net/ipv4/conf/IFNAME/x``
    works too), then the first ``IFNAME`` becomes the interface name (names with dots,
    ``eth0.100``, stay one path segment), then the path is cleaned and must lie under
    ``/proc/sys/net/``.  Once the dots are gone no ``..`` is left to climb out; the interface
    name was validated by the skeleton.
    """
    if not key or "\0" in key or "\0" in value:
        raise config_error(f'invalid net sysctl key: "{key}"', "a sysctl key or value contains NUL")
    full = posixpath.normpath("/proc/sys/" + key.replace(".", "/").replace("IFNAME", ifname, 1))
    if not full.startswith("/proc/sys/net/"):
        raise config_error(
            f'invalid net sysctl key: "{key}"',
            "keys name a file under /proc/sys/net (e.g. net.ipv4.conf.IFNAME.arp_filter)",
        )
    return Sysctl(key=key, rel=full[len("/proc/sys/"):], value=value)


def resolve_sysctls(cfg: TuningConfig, ifname: str) -> list[Sysctl]:
    return [resolve_sysctl(k, v, ifname) for k, v in cfg.sysctl]


def valid_rel_path(rel: str) -> bool:
    """A relative sysctl path read back from a backup file is still below ``net/``."""
    parts = rel.split("/")
    return bool(rel) and "\0" not in rel and parts[0] == "net" and len(parts) >= 2 and all(
        p not in ("", ".", "..") for p in parts
    )


# -- duplicate keys and the allowlist ---------------------------------------------------------


class _Pairs(dict):
    """A decoded JSON object that remembers whether a key was repeated."""

    repeated = False


def _pairs_hook(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs()
    for k, v in pairs:
        if k in obj:
            obj.repeated = True
        obj[k] = v
    obj.top_pairs = pairs  # type: ignore[attr-defined]
    return obj


def check_duplicate_sysctl_keys(stdin: bytes) -> None:
    """The reference rejects a ``sysctl`` object that names a key twice (a plain dict hides it)."""
    try:
        top = leanjson.loads(stdin, object_pairs_hook=_pairs_hook)
    except (ValueError, UnicodeDecodeError):
        return  # the skeleton already reported undecodable input
    if not isinstance(top, _Pairs):
        return
    seen: set[str] = set()
    for k, v in top.top_pairs:  # type: ignore[attr-defined]
        if not (isinstance(k, str) and k.lower() == "sysctl" and isinstance(v, _Pairs)):
            continue
        if v.repeated or seen & v.keys():
            raise plugin_error("duplicated sysctl keys are not allowed")
        seen.update(v.keys())


def read_allowlist(path: str = "") -> Optional[list[str]]:
    """The allowlist's regexes, or None when the file does not exist (no restriction)."""
    path = path or ALLOWLIST_FILE
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise plugin_error(f"failed to read sysctl allowlist {path}: {exc.strerror}") from None
    return [line.strip() for line in text.split("\n") if line.strip()]


def check_allowlist(cfg: TuningConfig, allowlist: Optional[list[str]]) -> None:
    """Every key as written must match (unanchored) one of the allowlist's regexes."""
    if allowlist is None:
        return
    import re

    compiled = []
    for pattern in allowlist:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise plugin_error(f"error parsing regexp: {exc}: `{pattern}`") from None
    for key, _ in cfg.sysctl:
        if not any(rx.search(key) for rx in compiled):
            raise plugin_error(
                f"Sysctl {key} is not allowed. Only the following sysctls are allowed: [{' '.join(allowlist)}]"
            )


# -- the loader -------------------------------------------------------------------------------


# The reference's TuningConf and its args.cni overrides (IPAMArgs), as Go decodes them.
ARGS_CNI = gojson.Struct("main.IPAMArgs", [
    gojson.Field("sysctl", gojson.Ptr(gojson.Map(gojson.STRING)), "SysCtl"),
    ("mac", gojson.Ptr(gojson.STRING)),
    ("promisc", gojson.Ptr(gojson.BOOL)),
    ("mtu", gojson.Ptr(gojson.INT)),
    ("allmulti", gojson.Ptr(gojson.BOOL)),
    gojson.Field("txQLen", gojson.Ptr(gojson.INT), "TxQLen"),
])
SCHEMA = gojson.Struct("main.TuningConf", [
    ("dataDir", gojson.STRING),
    gojson.Field("sysctl", gojson.Map(gojson.STRING), "SysCtl"),
    ("mac", gojson.STRING),
    ("promisc", gojson.BOOL),
    ("mtu", gojson.INT),
    ("allmulti", gojson.Ptr(gojson.BOOL)),
    gojson.Field("txQLen", gojson.Ptr(gojson.INT), "TxQLen"),
    ("runtimeConfig", gojson.Struct("", [("mac", gojson.STRING)])),
    ("args", gojson.Ptr(gojson.Struct("", [("cni", gojson.Ptr(ARGS_CNI))]))),
])


def load(conf: dict, cni_args: str = "", *, strict: bool = True) -> TuningConfig:
    """The reference's ``parseConf``: config keys < CNI_ARGS MAC < runtimeConfig.mac < args.cni.

    ``strict`` is for ADD; see :class:`TuningConfig` ``skipped`` for the other commands."""
    d = gojson.decode(conf, SCHEMA, _LOAD)
    sysctl: dict[str, str] = dict(d["sysctl"] or {})
    mac: str = d["mac"]
    promisc: bool = d["promisc"]
    mtu: int = d["mtu"]
    allmulti: Optional[bool] = d["allmulti"]
    txqlen: Optional[int] = d["txQLen"]
    data_dir: str = d["dataDir"] or DEFAULT_DATA_DIR

    if cni_args:
        env = parse_cni_args(cni_args, known={"MAC"})
        if env.get("MAC"):
            mac = env["MAC"]
    if d["runtimeConfig"]["mac"]:
        mac = d["runtimeConfig"]["mac"]
    cni = d["args"]["cni"] if d["args"] is not None else None
    if cni is not None:
        sysctl.update(cni["sysctl"] or {})
        over = gojson.overlay
        mac = over(mac, cni["mac"])
        promisc = over(promisc, cni["promisc"])
        mtu = over(mtu, cni["mtu"])
        allmulti = over(allmulti, cni["allmulti"])
        txqlen = over(txqlen, cni["txQLen"])

    skipped: list[str] = []

    def refuse(err: CniError, what: str) -> None:
        """ADD refuses; other commands carry on without the value (the reference checks none of
        these before it touches the pod, and its DEL never fails on them)."""
        if strict:
            raise err
        skipped.append(f"{what} ({err.msg})")

    if mtu < 0 or mtu > 0xFFFFFFF:
        refuse(config_error(f"invalid mtu {mtu}: must be a positive number (0 leaves the MTU alone)"), "mtu")
        mtu = 0
    if txqlen is not None and not 0 <= txqlen <= 0xFFFFFFFF:
        refuse(config_error(f"invalid txQLen {txqlen}: must be between 0 and 4294967295"), "txQLen")
        txqlen = None
    if not data_dir.startswith("/") or "\0" in data_dir:
        refuse(config_error(f'invalid dataDir "{data_dir}": must be an absolute path'), "dataDir (no backup restored)")
        data_dir = ""
    norm_mac = ""
    if mac:
        try:
            norm_mac = format_mac(parse_mac(mac))
        except CniError as exc:
            refuse(exc, "mac")
    return TuningConfig(
        sysctl=tuple(sysctl.items()),
        mac=norm_mac,
        mtu=mtu,
        promisc=promisc,
        allmulti=allmulti,
        txqlen=txqlen,
        data_dir=os.path.normpath(data_dir) if data_dir else "",
        skipped=tuple(skipped),
    )
