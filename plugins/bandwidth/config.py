"""Parsing and validating the bandwidth plugin's network config.

The four limits (``ingressRate``/``ingressBurst``/``egressRate``/``egressBurst``, bits per second
and bits) come either from the plugin's own entry or from ``runtimeConfig.bandwidth`` (capability
``bandwidth``, which kubelet/containerd/CRI-O fill from the pod's bandwidth annotations).  The
reference decodes the four top-level keys into one embedded struct, so the mere presence of any of
them makes the top-level set win and the runtime's values are ignored entirely; Go's decoder also
matches field names case-insensitively, and rejects negatives, fractions and non-numbers for a
uint64.  All of that is reproduced here because it decides which limits a pod gets.

Pure: no kernel access, nothing imported beyond the standard library and common.errors.
"""

from __future__ import annotations

from collections import namedtuple

from cnichain.common.errors import CniError, plugin_error

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing/dataclasses cost milliseconds on every exec
    from typing import Any

KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")
_FOLDED = {k.lower(): k for k in KEYS}
UINT64_MAX = 2**64 - 1
UINT32_MAX = 2**32 - 1

IFB_PREFIX = "bwp"
IFB_NAME_LEN = 15


class Shape(namedtuple("Shape", "rate burst")):
    """One direction's token bucket: rate in bits/s, burst in bits (both > 0).

    Records here are namedtuples (immutable, ``==``, ``repr``) rather than frozen dataclasses:
    ``import dataclasses`` alone costs ~5 ms per plugin exec.
    """

    __slots__ = ()


class BandwidthConfig(namedtuple("BandwidthConfig", "ingress egress source", defaults=(None, None, ""))):
    """The effective limits; a direction is None when it is not shaped.

    ``source`` is "config", "runtimeConfig", or "" when nothing is configured.
    """

    __slots__ = ()

    @property
    def shaped(self) -> bool:
        return self.ingress is not None or self.egress is not None


def _uint64(value: Any, field: str) -> int:
    """A JSON number as Go's decoder accepts it for a uint64 field (null counts as 0)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        kind = "bool" if isinstance(value, bool) else ("array" if isinstance(value, list) else "object")
        raise _decode_error(f"cannot unmarshal {kind} into Go struct field {field} of type uint64")
    if isinstance(value, str):
        raise _decode_error(f"cannot unmarshal string into Go struct field {field} of type uint64")
    if isinstance(value, float) or not 0 <= value <= UINT64_MAX:
        raise _decode_error(f"cannot unmarshal number {_num(value)} into Go struct field {field} of type uint64")
    return int(value)


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return repr(value)
    return str(value)


def _decode_error(msg: str) -> CniError:
    return plugin_error(f"failed to parse network configuration: json: {msg}")


def _entry(obj: dict, where: str) -> dict[str, int]:
    """The four keys of one JSON object; later duplicates (in any letter case) win, as in Go."""
    out: dict[str, int] = {}
    for key, value in obj.items():
        canonical = _FOLDED.get(key.lower()) if isinstance(key, str) else None
        if canonical is not None:
            out[canonical] = _uint64(value, f"{where}{canonical}")
    return out


def _validate(rate: int, burst: int) -> None:
    if burst == 0 and rate != 0:
        raise plugin_error("if rate is set, burst must also be set")
    if rate == 0 and burst != 0:
        raise plugin_error("if burst is set, rate must also be set")
    if burst // 8 >= UINT32_MAX:
        raise plugin_error("burst cannot be more than 4GB")


def parse_config(conf: dict) -> BandwidthConfig:
    """The effective limits of a network config, validated with the reference's messages."""
    top = _entry(conf, "PluginConf.")
    if top:
        values, source = top, "config"
    else:
        values, source = {}, ""
        runtime = conf.get("runtimeConfig")
        if runtime is not None and not isinstance(runtime, dict):
            raise _decode_error("cannot unmarshal runtimeConfig into Go struct field PluginConf.runtimeConfig")
        raw = (runtime or {}).get("bandwidth")
        if raw is not None:
            if not isinstance(raw, dict):
                raise _decode_error(
                    "cannot unmarshal runtimeConfig.bandwidth into Go struct field "
                    ".runtimeConfig.bandwidth of type main.BandwidthEntry"
                )
            values, source = _entry(raw, "BandwidthEntry."), "runtimeConfig"
    ingress_rate, ingress_burst = values.get("ingressRate", 0), values.get("ingressBurst", 0)
    egress_rate, egress_burst = values.get("egressRate", 0), values.get("egressBurst", 0)
    _validate(ingress_rate, ingress_burst)
    _validate(egress_rate, egress_burst)
    return BandwidthConfig(
        ingress=Shape(ingress_rate, ingress_burst) if ingress_rate and ingress_burst else None,
        egress=Shape(egress_rate, egress_burst) if egress_rate and egress_burst else None,
        source=source if (ingress_rate or egress_rate) else "",
    )


def ifb_name(network: str, container_id: str) -> str:
    """``bwp`` + the first 12 hex digits of SHA-512(network + containerID), as the reference names it.

    Keeping the name identical is what lets a node that switched from the reference plugin still
    tear down IFBs of pods the reference set up.
    """
    import hashlib  # not at module level: only ADD/DEL/CHECK with a kernel to touch need it

    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return (IFB_PREFIX + digest)[:IFB_NAME_LEN]
