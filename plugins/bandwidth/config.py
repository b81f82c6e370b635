"""Parsing and validating the bandwidth plugin's network config.

The four limits (``ingressRate``/``ingressBurst``/``egressRate``/``egressBurst``, bits per second
and bits) come either from the plugin's own entry or from ``runtimeConfig.bandwidth`` (capability
``bandwidth``, which kubelet/containerd/CRI-O fill from the pod's bandwidth annotations).  The
reference decodes the four top-level keys into one embedded struct, so the mere presence of any of
them makes the top-level set win and the runtime's values are ignored entirely; Go's decoder also
matches field names case-insensitively, and rejects negatives, fractions and non-numbers for a
uint64.  All of that is reproduced here because it decides which limits a pod gets.

Where the limits come from the runtime, the pod's annotations (capability
``io.kubernetes.cri.pod-annotations``, pod_qos.py) add what the kubelet cannot pass: a burst,
a peak rate and its bucket per direction, and Calico's rate annotations where the Kubernetes one is
absent.  A conflist's own keys are the operator's and win over both, as they win over the runtime.

Pure: no kernel access, nothing imported beyond the standard library and common.errors.
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs milliseconds per exec
    from typing import Optional

from cnichain.common import gojson
from cnichain.common.errors import plugin_error

from . import pod_qos

KEYS = ("ingressRate", "ingressBurst", "egressRate", "egressBurst")
UINT32_MAX = 2**32 - 1

IFB_PREFIX = "bwp"
IFB_NAME_LEN = 15

# ``layout``: where the token buckets live (plan.choose_layout; docs/plugins.md says why).
AUTO, HOST, SPLIT, POD = "auto", "host", "split", "pod"
LAYOUTS = (AUTO, HOST, SPLIT, POD)


class Shape(namedtuple("Shape", "rate burst peakrate minburst", defaults=(0, 0))):
    """One direction's token bucket: rate in bits/s (> 0), burst in bits (0: none given, the
    plan derives one), and an optional peak rate (bits/s, 0: none) with its bucket (bytes).

    Records here are namedtuples (immutable, ``==``, ``repr``) rather than frozen dataclasses:
    ``import dataclasses`` alone costs ~5 ms per plugin exec.
    """

    __slots__ = ()


class BandwidthConfig(namedtuple("BandwidthConfig", "ingress egress source layout",
                                 defaults=(None, None, "", AUTO))):
    """The effective limits; a direction is None when it is not shaped.

    ``source`` is "config", "runtimeConfig", "annotations" (a rate from Calico's annotations
    alone), or "" when nothing is configured; ``layout`` is one
    of :data:`LAYOUTS` (cnichain's own key; the reference ignores it, as any unknown key).
    """

    __slots__ = ()

    @property
    def shaped(self) -> bool:
        return self.ingress is not None or self.egress is not None


_PREFIX = "failed to parse network configuration: "

# The reference's BandwidthEntry, embedded in PluginConf and also the ``bandwidth`` capability
# (containerd's go-cni sends it as {"IngressRate": ..., "IngressBurst": ...}).
BANDWIDTH_ENTRY = gojson.Struct("main.BandwidthEntry", [(key, gojson.UINT64) for key in KEYS])
SCHEMA = gojson.Struct("main.PluginConf", [
    *((key, gojson.UINT64) for key in KEYS),
    ("layout", gojson.STRING),
    ("runtimeConfig", gojson.Struct("", [("bandwidth", gojson.Ptr(BANDWIDTH_ENTRY))])),
])


def _validate(rate: int, burst: int) -> None:
    if burst == 0 and rate != 0:
        raise plugin_error("if rate is set, burst must also be set")
    if rate == 0 and burst != 0:
        raise plugin_error("if burst is set, rate must also be set")
    if burst // 8 >= UINT32_MAX:
        raise plugin_error("burst cannot be more than 4GB")


def load(conf: dict) -> BandwidthConfig:
    """The effective limits of a network config, validated with the reference's messages."""
    d = gojson.decode(conf, SCHEMA, _PREFIX)
    # The four top-level keys fill an embedded *BandwidthEntry, which Go allocates as soon as one
    # of them appears (in any letter case, even as null): then the runtime's values are ignored.
    if any(BANDWIDTH_ENTRY.field(key) is not None for key in conf if isinstance(key, str)):
        values, source = d, "config"
    elif d["runtimeConfig"]["bandwidth"] is not None:
        values, source = d["runtimeConfig"]["bandwidth"], "runtimeConfig"
    else:
        values, source = BANDWIDTH_ENTRY.zero_value(), ""
    ingress_rate, ingress_burst = values["ingressRate"], values["ingressBurst"]
    egress_rate, egress_burst = values["egressRate"], values["egressBurst"]
    _validate(ingress_rate, ingress_burst)
    _validate(egress_rate, egress_burst)
    layout = d["layout"] or AUTO
    if layout not in LAYOUTS:
        raise plugin_error(f"invalid layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    ingress = Shape(ingress_rate, ingress_burst) if ingress_rate and ingress_burst else None
    egress = Shape(egress_rate, egress_burst) if egress_rate and egress_burst else None
    if source != "config":
        wishes = pod_qos.read(pod_qos.pod_annotations(conf.get("runtimeConfig")))
        ingress = _with_pod_qos("ingress", ingress, wishes["ingress"])
        egress = _with_pod_qos("egress", egress, wishes["egress"])
        if source == "" and (ingress or egress):
            source = "annotations"
    return BandwidthConfig(
        ingress=ingress,
        egress=egress,
        source=source if (ingress or egress) else "",
        layout=layout,
    )


def _with_pod_qos(direction: str, shape: Optional[Shape], qos: pod_qos.PodQos) -> Optional[Shape]:
    """``shape`` (from the runtime, or None) with the pod's own wishes for ``direction``."""
    if qos == pod_qos.PodQos():
        return shape
    qos = pod_qos.apply(direction, shape.rate if shape else 0, qos)
    if not qos.rate:
        return None
    burst = qos.burst or (shape.burst if shape else 0)
    return Shape(qos.rate, burst, qos.peakrate, qos.minburst)


def ifb_name(network: str, container_id: str) -> str:
    """``bwp`` + the first 12 hex digits of SHA-512(network + containerID), as the reference names it.

    Keeping the name identical is what lets a node that switched from the reference plugin still
    tear down IFBs of pods the reference set up.
    """
    import hashlib  # not at module level: only ADD/DEL/CHECK with a kernel to touch need it

    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return (IFB_PREFIX + digest)[:IFB_NAME_LEN]
