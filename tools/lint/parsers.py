"""Run each plugin's own pure config parser on a conflist entry, as the runtime would hand it over.

Rules are not re-implemented here: whatever a plugin would refuse at ADD before touching the kernel,
its parser refuses now, in its own words.  The entry gets the network name and cniVersion the
runtime injects and loses ``capabilities`` (libcni replaces them with ``runtimeConfig``); a static
``runtimeConfig`` written in the file is left as libcni leaves it.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from cnichain.common.errors import CniError

# "Go struct field PortMapEntry.runtimeConfig.portMappings.hostPort of type int" -> the json path.
_GO_FIELD = re.compile(r"Go struct field [A-Za-z0-9_]*\.(\S+) of type")
_SYSCTL_KEY = re.compile(r'invalid net sysctl key: "(.*)"')
_SYSCTL_DENIED = re.compile(r"^Sysctl (\S+) is not allowed")


class Problem:
    """One refusal: the plugin's message and, when it can be told, the key it is about."""

    __slots__ = ("message", "key")

    def __init__(self, message: str, key: str = "") -> None:
        self.message = message
        self.key = key

    def __repr__(self) -> str:
        return f"Problem({self.message!r}, key={self.key!r})"


def key_of(message: str) -> str:
    """The dotted key a parser message is about, read from Go's type errors and our sysctl texts."""
    for rx, fmt in ((_GO_FIELD, "{}"), (_SYSCTL_KEY, "sysctl.{}"), (_SYSCTL_DENIED, "sysctl.{}")):
        m = rx.search(message)
        if m:
            return fmt.format(m.group(1))
    return ""


def runtime_view(entry: dict, network: str, cni_version: str) -> dict:
    """The entry as a plugin receives it from libcni (before capability arguments are known)."""
    conf = dict(entry)
    conf.pop("capabilities", None)
    conf["name"] = network
    conf["cniVersion"] = cni_version
    return conf


def _run(fn: Callable[[], object]) -> Optional[Problem]:
    try:
        fn()
    except CniError as exc:
        msg = str(exc)
        return Problem(msg, key_of(msg))
    return None


def check_portmap(conf: dict) -> list[Problem]:
    from cnichain.plugins.portmap.config import load

    p = _run(lambda: load(conf))
    return [p] if p else []


def check_bandwidth(conf: dict) -> list[Problem]:
    from cnichain.plugins.bandwidth.config import load

    p = _run(lambda: load(conf))
    return [p] if p else []


def check_route_override(conf: dict) -> list[Problem]:
    from cnichain.plugins.route_override.config import load

    p = _run(lambda: load(conf))
    return [p] if p else []


def route_override_skipped(conf: dict) -> list[Problem]:
    """Routes route-override leaves out (as the original does after a netlink error)."""
    from cnichain.plugins.route_override.config import load

    try:
        return [Problem(f"{what}: this route is skipped at ADD (as the original route-override does)")
                for what in load(conf).skipped]
    except CniError:
        return []


def check_tuning(conf: dict, allowlist: Optional[list[str]], duplicated_sysctl: bool) -> list[Problem]:
    """tuning's load, its sysctl key rules (for a placeholder ifname) and, if given, the allowlist."""
    from cnichain.plugins.tuning import config as tuning_config

    if duplicated_sysctl:
        return [Problem("duplicated sysctl keys are not allowed", "sysctl")]
    cfg_box: list = []
    p = _run(lambda: cfg_box.append(tuning_config.load(conf, "")))
    if p:
        return [p]
    cfg = cfg_box[0]
    p = _run(lambda: tuning_config.resolve_sysctls(cfg, "eth0"))
    if p:
        return [p]
    if allowlist is not None:
        p = _run(lambda: tuning_config.check_allowlist(cfg, allowlist))
        if p:
            return [p]
    return []


def check_bridge(conf: dict) -> list[Problem]:
    from cnichain.plugins.bridge.config import add_refusals, load

    p = _run(lambda: add_refusals(load(conf, "")))
    return [p] if p else []


def compat_notes(ptype: str, conf: dict) -> list[Problem]:
    """Keys and values accepted only so that a conflist written for the reference keeps working,
    with what they mean here (nftables is always what gets programmed).  Call after the plugin's
    own parser accepted ``conf``."""
    out: list[Problem] = []
    if ptype == "portmap":
        from cnichain.plugins.portmap.config import load as portmap_load
        from cnichain.plugins.portmap.ipt_conditions import is_iptables_style
        from cnichain.plugins.portmap.names import FAMILY_TABLE

        cfg = portmap_load(conf)
        if cfg.backend == "iptables":
            out.append(Problem(f'backend "iptables" is accepted for compatibility: hostPorts are always '
                               f"programmed in nftables (table {FAMILY_TABLE})", "backend"))
        for key in ("conditionsV4", "conditionsV6"):
            raw = conf.get(key)
            if isinstance(raw, list) and is_iptables_style(tuple(str(t).strip() for t in raw if str(t).strip())):
                out.append(Problem(f"{key}: iptables-style conditions are translated to nftables matches "
                                   "(applied in front of each of this pod's DNAT rules)", key))
        for key in ("markMasqBit", "externalSetMarkChain"):
            if conf.get(key) is not None:
                out.append(Problem(f"{key} is accepted for compatibility and has no effect: hairpin and "
                                   "localhost traffic is masqueraded directly, no packet mark is set", key))
    elif ptype == "bridge":
        from cnichain.plugins.bridge.config import load as bridge_load

        if bridge_load(conf, "").ip_masq_backend == "iptables":
            out.append(Problem('ipMasqBackend "iptables" is accepted for compatibility: masquerade rules are '
                               "always programmed in nftables", "ipMasqBackend"))
    return out


def check_host_local(conf: dict, ranges_from_runtime: bool) -> list[Problem]:
    """host-local's loader on the whole network config (it reads ``ipam`` from it).

    With the ``ipRanges`` capability the ranges may come from the runtime, so "no IP ranges
    specified" is then not a problem of the file.
    """
    from cnichain.plugins.host_local.config import load

    p = _run(lambda: load(conf, ""))
    if p is None or (ranges_from_runtime and p.message == "no IP ranges specified"):
        return []
    if not p.key:
        p.key = "ipam"
    return [p]
