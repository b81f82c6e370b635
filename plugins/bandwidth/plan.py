"""Token-bucket numbers: from a configured rate and burst to the kernel's TBF parameters.

What a pod asked for is a rate.  Container runtimes cannot pass a burst (the kubelet has none), so
they send a sentinel: containerd 2^32-1 bits (512 MiB), CRI-O (2^32-1)*8-1 bits (4 GiB).  Taken
literally, as the reference takes it, a pod runs at line rate until hundreds of megabytes have
gone by, and the queue (the reference sizes it as 25 ms at the rate *plus the burst*) holds
seconds of backlog, so every other packet of the pod waits behind a bulk flow.  Here:

* **No burst given** means one of the runtimes' sentinels, a burst the kernel cannot represent
  for that rate (its refill time in psched ticks overflows u32), or one longer than
  :data:`MAX_BURST_SECONDS` at the rate.  Then the bucket is the smallest that still reaches the
  rate: :data:`DERIVED_BURST_MS` of the rate (what the TBF watchdog's late wake-ups on a loaded
  node cost it, measured in docs/plugins.md) plus :data:`DERIVED_BURST_FRAMES` full frames.
  An explicit burst within the bound is honoured as given.
* **The queue is bounded in time**: :data:`QUEUE_MS` of the rate, never less than
  :data:`QUEUE_MIN_FRAMES` full frames, and never less than one whole TSO packet when the
  bucket is big enough to let such a packet through unsegmented (the TBF only segments GSO
  packets larger than its burst; a packet larger than the queue would always be dropped).

* **Flow isolation and AQM where the kernel has them**: fq_codel with ECN as the TBF's child
  (:func:`aqm`), so a ping or an RPC never waits behind a bulk flow's queue and the bulk flow is
  told to slow down by a mark instead of a drop.  A kernel without fq_codel keeps the TBF's own
  time-bounded FIFO; its absence never fails an ADD.

A rate with burst 0 in a conflist or the ``bandwidth`` capability stays an error, as in the
reference (config.py): a conflist that works here works there too, and runtimes always send a
burst.  Burst 0 reaches the plan only for a rate from a pod's annotations alone (pod_qos.py), and
means "none given".  A peak rate from the annotations adds TBF's second bucket
(:func:`with_peak`).  The conversions to the kernel's units follow
the reference's float64 steps (bytes = bits // 8, refill time in psched ticks from
/proc/net/psched) so CHECK can still recognise, by :func:`legacy`, the parameters the reference
and this plugin's previous release wrote: live pods keep passing CHECK across an upgrade and get
the new numbers at their next ADD.

Pure: no kernel access.
"""

from __future__ import annotations

from collections import namedtuple

from cnichain.common.errors import plugin_error

from .config import AUTO, HOST, POD, SPLIT, Shape

UINT32_MAX = 2**32 - 1
TIME_UNITS_PER_SEC = 1_000_000

CONTAINERD_BURST = 2**32 - 1  # bits: containerd's CRI fills every burst with math.MaxUint32
CRIO_BURST = (2**32 - 1) * 8 - 1  # bits: CRI-O's "no burst" (just under 4 GiB)
RUNTIME_SENTINELS = frozenset((CONTAINERD_BURST, CRIO_BURST))
MAX_BURST_SECONDS = 1.0  # an explicit burst longer than this at the rate is taken as "none given"
DERIVED_BURST_MS = 4.0
DERIVED_BURST_FRAMES = 2
QUEUE_MS = 10.0
QUEUE_MIN_FRAMES = 6
FRAME_OVERHEAD = 18  # Ethernet header + one VLAN tag on top of the MTU: what the qdisc counts
TSO_PACKET = 96 * 1024  # bytes: a 64 KiB GSO packet plus the headers the qdisc counts per segment
DEFAULT_MTU = 1500
LEGACY_LATENCY_MS = 25.0  # the reference's (and our previous release's) queue on top of the burst
AQM_TARGET_MS = 5.0  # CoDel's acceptable standing queue (RFC 8289's default) ...
AQM_TARGET_FRAMES = 1.5  # ... but never under the time 1.5 full frames take at the rate
AQM_INTERVAL_MS = 100.0  # RFC 8289's default; the target stays within 5-20% of it up to 1.5 frames at 1 Mbit/s
AQM_LIMIT_PACKETS = 1024  # a memory bound only: CoDel's sojourn time bounds the queue first


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


def _buffer(burst_bytes: int, rate_bytes: int, tick: float, conv=_sat32) -> int:
    """The bucket's refill time in psched ticks, by the reference's float64 steps."""
    buffer_us = conv(float(burst_bytes) * float(TIME_UNITS_PER_SEC) / float(rate_bytes))
    return conv(float(buffer_us) * tick)


def frame(mtu: int) -> int:
    """The bytes the qdisc counts for one full-sized packet on a link of ``mtu``."""
    return (mtu or DEFAULT_MTU) + FRAME_OVERHEAD


def burst_given(shape: Shape, tick: float) -> bool:
    """Whether ``shape.burst`` is the pod's own burst rather than "none given" (module docstring)."""
    if shape.burst == 0 or shape.burst in RUNTIME_SENTINELS:  # 0: a rate from annotations alone
        return False
    rate = shape.rate // 8
    if rate <= 0:
        return True  # refused by tbf() with the rate's own message
    burst = shape.burst // 8
    if float(burst) > MAX_BURST_SECONDS * float(rate):
        return False
    return float(burst) * float(TIME_UNITS_PER_SEC) / float(rate) * tick < UINT32_MAX


def derived_burst(rate_bits: int, mtu: int) -> int:
    """The default bucket, in bytes: :data:`DERIVED_BURST_MS` of the rate plus a few frames."""
    rate = rate_bits // 8
    return int(rate * DERIVED_BURST_MS / 1000.0) + DERIVED_BURST_FRAMES * frame(mtu)


def queue_limit(rate_bytes: int, burst_bytes: int, mtu: int) -> int:
    """The queue in bytes: :data:`QUEUE_MS` at the rate, at least a few frames, and room for one
    whole TSO packet when the bucket lets one through unsegmented."""
    by_time = int(rate_bytes * QUEUE_MS / 1000.0)
    return min(max(by_time, QUEUE_MIN_FRAMES * frame(mtu), min(burst_bytes, TSO_PACKET)), UINT32_MAX)


def tbf(shape: Shape, tick: float, direction: str, mtu: int = DEFAULT_MTU) -> TbfParams:
    """The TBF parameters for one direction on a link of ``mtu``; refuses what the kernel cannot
    represent (a rate under a byte per second, an explicit burst that refills in no tick)."""
    if shape.rate < 8:
        raise plugin_error(f"invalid {direction} rate {shape.rate}: must be at least 8 bits per second")
    if 0 < shape.burst < 8:
        raise plugin_error(f"invalid {direction} burst {shape.burst}: must be at least 8 bits")
    rate = shape.rate // 8
    burst = shape.burst // 8 if burst_given(shape, tick) else derived_burst(shape.rate, mtu)
    buffer = _buffer(burst, rate, tick)
    if buffer == 0:
        # The refill time rounds down to zero ticks: the kernel would reject the qdisc.
        raise plugin_error(f"invalid {direction} burst {shape.burst}: too small for rate {shape.rate}")
    params = TbfParams(rate=rate, buffer=buffer, limit=queue_limit(rate, burst, mtu))
    return with_peak(params, shape, tick, frame(mtu), direction)


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


class AqmParams(namedtuple("AqmParams", "target_us interval_us limit ecn", defaults=(True,))):
    """fq_codel as the TBF's child: CoDel's target and interval in microseconds, the packet
    limit, ECN marking (TCA_FQ_CODEL_TARGET, _INTERVAL, _LIMIT, _ECN)."""

    __slots__ = ()


def aqm(params: TbfParams, mtu: int = DEFAULT_MTU) -> AqmParams:
    """The fq_codel child for a TBF of ``params`` on a link of ``mtu``: :data:`AQM_TARGET_MS`, or
    the time :data:`AQM_TARGET_FRAMES` frames take at the rate when that is longer (at 1 Mbit/s one
    full frame takes 12 ms: a shorter target would drop whatever waits behind a single packet)."""
    frames_us = AQM_TARGET_FRAMES * frame(mtu) * TIME_UNITS_PER_SEC / max(params.rate, 1)
    target = int(max(AQM_TARGET_MS * 1000.0, frames_us))
    return AqmParams(target_us=target, interval_us=int(AQM_INTERVAL_MS * 1000.0), limit=AQM_LIMIT_PACKETS)


def aqm_as_read_back(params: AqmParams) -> AqmParams:
    """``params`` as the kernel reports them: CoDel keeps its times in 1,024 ns units, so 5,000 us
    comes back as 4,999 (``us * 1000 >> 10``, then back to us, rounding down)."""
    def back(us: int) -> int:
        return (((us * 1000) >> 10) << 10) // 1000

    return params._replace(target_us=back(params.target_us), interval_us=back(params.interval_us))


def legacy(shape: Shape, tick: float) -> tuple[TbfParams, ...]:
    """What the reference and this plugin's previous release wrote for ``shape``: the burst taken
    literally, 25 ms of queue on top of it; saturated (ours, arm64) and wrapped (Go on amd64)."""
    out = []
    rate, burst = shape.rate // 8, shape.burst // 8
    if rate <= 0:
        return ()
    by_time = float(rate) * LEGACY_LATENCY_MS / 1000.0
    for conv in (_sat32, _wrap32):
        buffer = _buffer(burst, rate, tick, conv)
        limit = conv(by_time)
        limit = (limit + burst) & UINT32_MAX if conv is _wrap32 else min(limit + burst, UINT32_MAX)
        params = TbfParams(rate=rate, buffer=buffer, limit=limit)
        if params not in out:
            out.append(params)
    return tuple(out)


def accepted(shape: Shape, tick: float, mtu: int = DEFAULT_MTU) -> tuple[TbfParams, ...]:
    """Parameter sets CHECK accepts: ours first, then :func:`legacy` (the reference's and our
    previous release's, which a live pod keeps until its next ADD)."""
    ours = tbf(shape, tick, "", mtu) if shape.rate >= 8 and (shape.burst == 0 or shape.burst >= 8) else None
    older = tuple(p for p in legacy(shape, tick) if p != ours)
    return ((ours,) if ours is not None else ()) + older


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
