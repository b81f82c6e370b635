"""Token-bucket numbers: from a configured rate and burst to the kernel's TBF parameters.

The reference turns bits into bytes (integer division by 8), expresses the burst as the time the
bucket needs to refill (``buffer``, in psched ticks from /proc/net/psched) and sizes the queue for
a fixed 25 ms of backlog on top of the burst (``limit``).  The arithmetic below follows the same
float64 steps so the kernel ends up with bit-identical parameters, which is what lets CHECK accept
qdiscs the reference created and vice versa.

One deliberate difference: where the reference's uint32 conversions overflow, it gets whatever the
CPU makes of an out-of-range float-to-uint32 conversion (amd64 wraps, arm64 saturates).  That
happens with the bursts container runtimes actually send (containerd: 2^32-1 bits, CRI-O: just
under 4 GB) at any rate below ~15 Gbit/s, so a pod can get a random-looking burst.  We saturate
(the largest burst/queue the kernel can represent) and CHECK accepts the wrapped amd64 values too.

Pure: no kernel access.
"""

from __future__ import annotations

from collections import namedtuple

from cnichain.common.errors import plugin_error

from .config import AUTO, HOST, POD, SPLIT, Shape

UINT32_MAX = 2**32 - 1
TIME_UNITS_PER_SEC = 1_000_000
LATENCY_MS = 25.0
FULL_FRAME = 1500 + 18  # bytes the qdisc counts for a full packet at MTU 1500 (Ethernet + VLAN header)


class TbfParams(namedtuple("TbfParams", "rate buffer limit peakrate mtu", defaults=(0, 0))):
    """What goes into TCA_TBF_PARMS (+ TCA_TBF_RATE64/PRATE64): rate in bytes/s, its bucket in
    psched ticks, the queue in bytes; a peak rate in bytes/s (0: none) and its bucket in ticks."""

    __slots__ = ()


def tick_in_usec(psched: str) -> float:
    """Psched ticks per microsecond from the text of /proc/net/psched (as iproute2/netlink do)."""
    try:
        t2us, us2t, clock_res = (int(x, 16) for x in psched.split()[:3])
        clock_factor = float(clock_res) / TIME_UNITS_PER_SEC
        return float(t2us) / float(us2t) * clock_factor
    except (ValueError, ZeroDivisionError):
        raise plugin_error(f"cannot parse /proc/net/psched: {psched.strip()!r}") from None


def _sat32(value: float) -> int:
    """float -> uint32, saturating (what arm64 does, and what we do everywhere)."""
    if value != value or value <= 0:  # NaN or negative
        return 0
    return UINT32_MAX if value >= UINT32_MAX else int(value)


def _wrap32(value: float) -> int:
    """float -> uint32 the way Go on amd64 does it: truncate to int64, keep the low 32 bits."""
    if value != value or value <= 0:
        return 0
    if value >= 2.0**63:
        return 0
    return int(value) & UINT32_MAX


def _compute(rate_bits: int, burst_bits: int, tick: float, conv) -> TbfParams:
    rate = rate_bits // 8
    burst = burst_bits // 8
    latency_us = float(TIME_UNITS_PER_SEC) * (LATENCY_MS / 1000.0)
    buffer_us = conv(float(burst) * float(TIME_UNITS_PER_SEC) / float(rate))
    buffer = conv(float(buffer_us) * tick)
    limit = conv(float(rate) * latency_us / float(TIME_UNITS_PER_SEC))
    if conv is _wrap32:
        limit = (limit + burst) & UINT32_MAX
    else:
        limit = min(limit + burst, UINT32_MAX)
    return TbfParams(rate=rate, buffer=buffer, limit=limit)


def tbf(shape: Shape, tick: float, direction: str) -> TbfParams:
    """The TBF parameters for one direction; refuses limits the kernel cannot represent."""
    if shape.rate < 8:
        raise plugin_error(f"invalid {direction} rate {shape.rate}: must be at least 8 bits per second")
    if shape.burst < 8:
        raise plugin_error(f"invalid {direction} burst {shape.burst}: must be at least 8 bits")
    params = _compute(shape.rate, shape.burst, tick, _sat32)
    if params.buffer == 0:
        # The refill time rounds down to zero ticks: the kernel would reject the qdisc.
        raise plugin_error(f"invalid {direction} burst {shape.burst}: too small for rate {shape.rate}")
    return with_peak(params, shape, tick, FULL_FRAME, direction)


def with_peak(params: TbfParams, shape: Shape, tick: float, frame_bytes: int, direction: str) -> TbfParams:
    """``params`` with the pod's peak rate and its bucket (the minimum burst, at least one frame:
    a packet larger than the peak bucket could never leave), or unchanged without a peak rate."""
    if not shape.peakrate:
        return params
    peak = shape.peakrate // 8
    if peak <= params.rate:
        raise plugin_error(f"invalid {direction} peakrate {shape.peakrate}: must be above the rate")
    bucket = max(shape.minburst, frame_bytes)
    ticks = _sat32(float(_sat32(float(bucket) * float(TIME_UNITS_PER_SEC) / float(peak))) * tick)
    if ticks == 0:
        raise plugin_error(f"invalid {direction} minburst {shape.minburst}: too small for peakrate {shape.peakrate}")
    return params._replace(peakrate=peak, mtu=ticks)


def accepted(shape: Shape, tick: float) -> tuple[TbfParams, ...]:
    """Parameter sets CHECK accepts: ours, and the reference's amd64 overflow variant."""
    ours = with_peak(_compute(shape.rate, shape.burst, tick, _sat32), shape, tick, FULL_FRAME, "")
    theirs = with_peak(_compute(shape.rate, shape.burst, tick, _wrap32), shape, tick, FULL_FRAME, "")
    return (ours,) if theirs == ours else (ours, theirs)


def burst_bytes(params: TbfParams, tick: float) -> int:
    """The burst the kernel will actually allow, in bytes (for reports and the benchmark)."""
    if params.rate == 0 or tick == 0:
        return 0
    return int(params.buffer / tick * params.rate / TIME_UNITS_PER_SEC)


# -- where the buckets live ------------------------------------------------------------------------

class Layout(namedtuple("Layout", "name ingress egress")):
    """Which side of the pod's link shapes each direction: "host" or "pod".

    ``ingress`` (traffic into the pod): "host" = root TBF of the host veth; "pod" = a clsact
    ingress hook on the pod's interface redirecting to an IFB in the pod's namespace.
    ``egress`` (traffic out of the pod): "host" = the reference's redirect from the host veth's
    ingress hook to an IFB in the host namespace; "pod" = root TBF of the pod's interface.
    """

    __slots__ = ()


LAYOUT_OF = {
    HOST: Layout(HOST, "host", "host"),
    SPLIT: Layout(SPLIT, "host", "pod"),
    POD: Layout(POD, "pod", "pod"),
}


class HostVeth(namedtuple("HostVeth", "exists hooks_owned root_owned why", defaults=(False, False, ""))):
    """What ADD found on the host side: is there a host veth of the pod's interface, does
    another tool use its tc hooks (an ``ingress``/``clsact`` qdisc, tcx programs), does another
    tool own its root qdisc; ``why`` says it in words for errors and the log."""

    __slots__ = ()


def choose_layout(wanted: str, host: HostVeth, ingress: bool = True, egress: bool = True) -> Layout:
    """The layout ADD builds (pure); ``ingress``/``egress``: which directions are shaped.

    ``auto``: with no host veth (macvlan, ipvlan, host-device, SR-IOV) everything goes into the
    pod; a host veth whose hooks or root another tool uses (eBPF dataplanes) is left alone, since
    such a dataplane may deliver to the pod with ``bpf_redirect_peer`` and skip its root qdisc;
    otherwise ``split``: the host veth's root TBF for traffic into the pod and the pod's root TBF
    for traffic out of it -- no IFB, neither tc hook of the host veth used, so an eBPF tool can
    attach there later.  A forced layout that cannot be built is refused with the reason.
    """
    if wanted == AUTO:
        if not host.exists or host.hooks_owned or host.root_owned:
            return LAYOUT_OF[POD]
        return LAYOUT_OF[SPLIT]
    layout = LAYOUT_OF[wanted]
    needs_root = ingress and layout.ingress == "host"
    needs_hook = egress and layout.egress == "host"
    if (needs_root or needs_hook) and not host.exists:
        raise plugin_error(f"layout {wanted}: {host.why}")
    if (needs_root and host.root_owned) or (needs_hook and host.hooks_owned):
        raise plugin_error(f"layout {wanted}: {host.why}")
    return layout


def layout_in_result(interfaces: list[tuple[str, str]], ifb: str) -> Layout:
    """The layout an ADD built, read back from its result's (name, sandbox) interfaces (pure).

    ADD lists the IFB it made: without a sandbox when it is in the host namespace (the reference's
    egress, which the reference lists the same way), with the pod's netns when it is in the pod
    (layout ``pod``'s ingress); no IFB listed means the root TBFs of the other two layouts.
    """
    in_pod = any(name == ifb and sandbox for name, sandbox in interfaces)
    in_host = any(name == ifb and not sandbox for name, sandbox in interfaces)
    ingress, egress = ("pod" if in_pod else "host"), ("host" if in_host else "pod")
    for layout in LAYOUT_OF.values():
        if (layout.ingress, layout.egress) == (ingress, egress):
            return layout
    return Layout("mixed", ingress, egress)
