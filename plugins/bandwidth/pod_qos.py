"""QoS a pod asks for in its annotations: burst, peak rate and minimum burst per direction.

The kubelet turns only ``kubernetes.io/ingress-bandwidth`` and ``egress-bandwidth`` into the
``bandwidth`` capability, and the runtimes fill its bursts with a sentinel (there is no burst
annotation in Kubernetes and none will be added).  containerd and CRI-O both pass *every* pod
annotation when a plugin asks for the ``io.kubernetes.cri.pod-annotations`` capability, so the rest
of a pod's wishes can be read here.  The names are Calico's (``qos.projectcalico.org/...``), so a
pod spec moves between Calico's dataplane and this plugin unchanged; their units are Calico's too:
rates and bursts in bits (per second), the minimum burst in bytes, all as Kubernetes quantities
(``10M``, ``512Ki``, ``1e6``).  Calico's ``*Bandwidth`` rate counts only where the Kubernetes
annotation of that direction is absent: the rate keeps coming through the ``bandwidth``
capability whenever the kubelet has one.

A value that cannot be used is an error naming the annotation, never a pod shaped by half of what
it asked for.  Pure: no kernel access.
"""

from __future__ import annotations

from collections import namedtuple

from cnichain.common.errors import plugin_error

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Any, Mapping, Optional

CAPABILITY = "io.kubernetes.cri.pod-annotations"
DIRECTIONS = ("ingress", "egress")
KUBERNETES_RATE = {d: f"kubernetes.io/{d}-bandwidth" for d in DIRECTIONS}
CALICO_PREFIX = "qos.projectcalico.org/"
_CALICO_SUFFIX = {"rate": "Bandwidth", "burst": "Burst", "peakrate": "Peakrate", "minburst": "Minburst"}

# Bounds: the kubelet's own for a bandwidth annotation (1k to 1P bits/s); a bucket the kernel can
# hold (under 2^32 bytes, as the ``bandwidth`` keys); a minimum burst of at least one byte.
MIN_RATE, MAX_RATE = 1_000, 10**15
MAX_BURST_BITS = (2**32 - 1) * 8 - 1
MAX_MINBURST_BYTES = 2**32 - 1

_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXP = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def annotation(direction: str, field: str) -> str:
    """The annotation that carries ``field`` for ``direction``, e.g. qos.projectcalico.org/egressBurst."""
    return f"{CALICO_PREFIX}{direction}{_CALICO_SUFFIX[field]}"


class PodQos(namedtuple("PodQos", "rate burst peakrate minburst", defaults=(0, 0, 0, 0))):
    """One direction's wishes from the annotations; 0 where the pod says nothing.

    ``rate`` and ``peakrate`` in bits/s, ``burst`` in bits, ``minburst`` in bytes."""

    __slots__ = ()


def _exponent(suffix: str) -> Optional[int]:
    """The power of ten of an exponent suffix (``e6``, ``E-3``, ``e+2``), or None if it is not one."""
    if suffix[:1] not in ("e", "E"):
        return None
    digits = suffix[2:] if suffix[1:2] in ("+", "-") else suffix[1:]
    if not digits or len(digits) > 3 or not all(c in "0123456789" for c in digits):
        return None
    return int(suffix[1:])


def quantity(text: str) -> int:
    """The integer value of a Kubernetes quantity, rounded up as ``Quantity.Value()`` rounds.

    Raises ValueError for anything that is not one: a number (digits, an optional fraction)
    followed by a decimal suffix (``k``, ``M``, ``G``...), a binary one (``Ki``, ``Mi``...) or an
    exponent (``e6``).  Negative values are refused here: no QoS field can be negative.  Integer
    arithmetic only (``fractions`` would cost every exec its import)."""
    s = text.strip()
    if s.startswith("+"):
        s = s[1:]
    end = 0
    while end < len(s) and (s[end] in "0123456789."):
        end += 1
    number, suffix = s[:end], s[end:]
    whole, _, frac = number.partition(".")
    if not (whole + frac) or "." in frac:
        raise ValueError("not a quantity")
    mantissa, exp10, exp2 = int(whole + frac), -len(frac), 0
    if suffix in _BINARY_EXP:
        exp2 = _BINARY_EXP[suffix]
    elif suffix in _DECIMAL_EXP:
        exp10 += _DECIMAL_EXP[suffix]
    elif _exponent(suffix) is not None:
        exp10 += int(suffix[1:])
    else:
        raise ValueError("not a quantity")
    numerator = mantissa << exp2
    if exp10 >= 0:
        return numerator * 10**exp10
    denominator = 10**-exp10
    return -(-numerator // denominator)  # rounded up


def pod_annotations(runtime_config: Any) -> dict[str, str]:
    """The pod's annotations from a plugin's ``runtimeConfig``; {} when the runtime sent none.

    containerd and CRI-O send a map of strings; anything else (another runtime, a hand-written
    runtimeConfig) carries no annotation this plugin can read."""
    if not isinstance(runtime_config, dict):
        return {}
    found = runtime_config.get(CAPABILITY)
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}


def _value(annotations: Mapping[str, str], name: str, low: int, high: int, unit: str) -> int:
    text = annotations.get(name)
    if text is None:
        return 0
    try:
        value = quantity(text)
    except ValueError:
        raise plugin_error(f"invalid pod annotation {name}={text!r}: not a Kubernetes quantity "
                           f"(for example 10M, 512Ki or 1e6)") from None
    if not low <= value <= high:
        raise plugin_error(f"invalid pod annotation {name}={text!r}: {value} {unit} is outside "
                           f"{low} to {high} {unit}")
    return value


def read(annotations: Mapping[str, str]) -> dict[str, PodQos]:
    """Each direction's wishes, validated together: a burst or peak rate needs a rate to shape
    (from the ``bandwidth`` capability or Calico's ``*Bandwidth``; checked by the caller, who
    knows the capability's rate), a peak rate must exceed the rate it is given with, and a
    minimum burst needs a peak rate (it is the peak bucket's size)."""
    out = {}
    for d in DIRECTIONS:
        rate = 0
        if KUBERNETES_RATE[d] not in annotations:
            rate = _value(annotations, annotation(d, "rate"), MIN_RATE, MAX_RATE, "bits/s")
        burst = _value(annotations, annotation(d, "burst"), 8, MAX_BURST_BITS, "bits")
        peakrate = _value(annotations, annotation(d, "peakrate"), MIN_RATE, MAX_RATE, "bits/s")
        minburst = _value(annotations, annotation(d, "minburst"), 1, MAX_MINBURST_BYTES, "bytes")
        if minburst and not peakrate:
            raise plugin_error(f"invalid pod annotation {annotation(d, 'minburst')}: it sizes the peak "
                               f"bucket, so {annotation(d, 'peakrate')} must be set too")
        out[d] = PodQos(rate=rate, burst=burst, peakrate=peakrate, minburst=minburst)
    return out


def apply(direction: str, rate: int, qos: PodQos) -> PodQos:
    """``qos`` for a direction shaped at ``rate`` bits/s (0: not shaped by the capability),
    with the checks that need the rate; the returned ``rate`` is the one to shape at."""
    rate = rate or qos.rate
    for field in ("burst", "peakrate"):
        if getattr(qos, field) and not rate:
            raise plugin_error(f"invalid pod annotation {annotation(direction, field)}: the pod has no "
                               f"{direction} rate ({KUBERNETES_RATE[direction]} or "
                               f"{annotation(direction, 'rate')})")
    if qos.peakrate and qos.peakrate <= rate:
        raise plugin_error(f"invalid pod annotation {annotation(direction, 'peakrate')}: "
                           f"{qos.peakrate} bits/s must be above the {direction} rate {rate} bits/s")
    return qos._replace(rate=rate)
