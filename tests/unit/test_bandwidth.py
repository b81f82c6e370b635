"""bandwidth without a kernel: config precedence and validation, TBF arithmetic, no-op paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cnichain.common.errors import CniError, Code
from cnichain.plugins.bandwidth import plan as tbf
from cnichain.plugins.bandwidth.config import BandwidthConfig, Shape, ifb_name, load
from cnichain.plugins.bandwidth.plan import HostVeth, choose_layout, layout_in_result
from cnichain.plugins.bandwidth.plugin import PLUGIN
from tests.helpers import dispatch
from tests.specver import CHAINING_VERSIONS

SUPPORTED = list(CHAINING_VERSIONS)
# /proc/net/psched of every current kernel: 1000 64 1000000 ... -> 15.625 ticks per microsecond
TICK = tbf.tick_in_usec("000003e8 00000040 000f4240 3b9aca00\n")
PREV = {
    "interfaces": [
        {"name": "cni0", "mac": "02:00:00:00:00:01"},
        {"name": "veth1234", "mac": "02:00:00:00:00:02"},
        {"name": "eth0", "mac": "02:00:00:00:00:03", "sandbox": "/var/run/netns/x"},
    ],
    "ips": [{"interface": 2, "address": "10.1.0.5/16", "gateway": "10.1.0.1"}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {"nameservers": ["10.1.0.1"]},
}


def conf(version: str = "1.0.0", **extra) -> dict:
    out = {"cniVersion": version, "name": "net1", "type": "bandwidth"}
    out.update(extra)
    return out


def prev_at(version: str) -> dict:
    from cnichain.common.types import Result

    return Result.from_dict(dict(PREV, cniVersion="1.1.0"), "1.1.0").to_dict(version)


# -- config --------------------------------------------------------------------------------------

def test_top_level_keys():
    cfg = load(conf(ingressRate=8000, ingressBurst=800, egressRate=16000, egressBurst=1600))
    assert cfg == BandwidthConfig(Shape(8000, 800), Shape(16000, 1600), "config")


def test_runtime_config_used_without_top_level_keys():
    cfg = load(conf(runtimeConfig={"bandwidth": {"ingressRate": 1000, "ingressBurst": 100}}))
    assert cfg.ingress == Shape(1000, 100) and cfg.egress is None and cfg.source == "runtimeConfig"


def test_any_top_level_key_hides_runtime_config_entirely():
    # Even a zero at top level makes the reference ignore runtimeConfig.bandwidth.
    cfg = load(conf(egressRate=0, runtimeConfig={"bandwidth": {"ingressRate": 1000, "ingressBurst": 100}}))
    assert not cfg.shaped


def test_keys_match_case_insensitively_like_go():
    cfg = load(conf(IngressRate=1000, INGRESSBURST=100))
    assert cfg.ingress == Shape(1000, 100)


def test_null_and_absent_mean_zero():
    assert not load(conf()).shaped
    assert not load(conf(runtimeConfig={"bandwidth": None})).shaped
    assert not load(conf(runtimeConfig={"bandwidth": {}})).shaped
    assert not load(conf(ingressRate=None, ingressBurst=None)).shaped


@pytest.mark.parametrize(
    "keys, message",
    [
        ({"ingressRate": 100}, "if rate is set, burst must also be set"),
        ({"egressRate": 100}, "if rate is set, burst must also be set"),
        ({"ingressBurst": 100}, "if burst is set, rate must also be set"),
        ({"egressBurst": 100}, "if burst is set, rate must also be set"),
        ({"ingressRate": 100, "ingressBurst": (2**32 - 1) * 8}, "burst cannot be more than 4GB"),
        ({"egressRate": 100, "egressBurst": 2**40}, "burst cannot be more than 4GB"),
    ],
)
def test_validation_messages(keys, message):
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=prev_at("1.0.0"), **keys))
    assert code == 1 and out == {"code": 999, "msg": message}


def test_validation_applies_to_runtime_config_too():
    code, out = dispatch(PLUGIN, "ADD", conf(runtimeConfig={"bandwidth": {"egressBurst": 5}}))
    assert out["msg"] == "if burst is set, rate must also be set"
    assert out["code"] == 999


def test_largest_accepted_burst():
    # The cap is on burst/8: CRI-O sends 2^32*8 - 1 bits, which must pass.
    assert load(conf(ingressRate=10, ingressBurst=(2**32 - 1) * 8 - 1)).ingress is not None


@pytest.mark.parametrize(
    "value, fragment",
    [
        (-1, "cannot unmarshal number -1 into Go struct field PluginConf.ingressRate of type uint64"),
        (1.5, "cannot unmarshal number 1.5 into Go struct field PluginConf.ingressRate of type uint64"),
        ("100", "cannot unmarshal string into Go struct field PluginConf.ingressRate of type uint64"),
        (True, "cannot unmarshal bool into Go struct field PluginConf.ingressRate of type uint64"),
        (2**64, "cannot unmarshal number 18446744073709551616"),
    ],
)
def test_type_errors(value, fragment):
    code, out = dispatch(PLUGIN, "ADD", conf(ingressRate=value, ingressBurst=100))
    assert code == 1 and out["code"] == 999
    assert out["msg"].startswith("failed to parse network configuration: json: ")
    assert fragment in out["msg"]


def test_runtime_config_bandwidth_not_an_object():
    code, out = dispatch(PLUGIN, "ADD", conf(runtimeConfig={"bandwidth": [1, 2]}))
    assert code == 1 and "failed to parse network configuration" in out["msg"]
    assert out["code"] == 999


def test_ifb_name_matches_reference():
    # Observed from the reference plugin (v1.1.1) for network "bwnet", container "ctr1".
    assert ifb_name("bwnet", "ctr1") == "bwpea62040b30ca"
    assert len(ifb_name("n" * 100, "c" * 64)) == 15


# -- TBF arithmetic ------------------------------------------------------------------------------

def test_tick_parse():
    assert TICK == 15.625
    with pytest.raises(CniError, match="cannot parse /proc/net/psched") as info:
        tbf.tick_in_usec("garbage")
    assert info.value.code == 999


CONTAINERD = 2**32 - 1  # bits: the burst containerd's CRI sends with every bandwidth annotation
CRIO = (2**32 - 1) * 8 - 1  # bits: CRI-O's


def test_explicit_burst_within_the_bound_is_honoured():
    # 1 Mbit/s with a 1 Mbit burst (exactly the 1 s bound): 125000 B/s, 1 s of refill.  The queue:
    # 10 ms at the rate is 1250 B, under six frames; the bucket lets a whole TSO packet through, so
    # the queue holds one.
    p = tbf.tbf(Shape(1_000_000, 1_000_000), TICK, "ingress")
    assert p == tbf.TbfParams(rate=125_000, buffer=15_625_000, limit=tbf.TSO_PACKET)
    assert tbf.burst_bytes(p, TICK) == 125_000


def test_plan_of_the_readme_example():
    # 123 bit/s, 456 bit burst -> 15 B/s, 57 B: 3.8 s of refill (over the 1 s bound: derived).
    p = tbf.tbf(Shape(123, 456), TICK, "egress")
    assert p.rate == 15 and p.limit == 6 * 1518
    assert tbf.burst_bytes(p, TICK) == 2 * 1518


@pytest.mark.parametrize("burst", [CONTAINERD, CRIO])
@pytest.mark.parametrize("rate", [1_000_000, 10_000_000, 100_000_000, 10_000_000_000])
def test_runtime_sentinels_get_a_burst_derived_from_the_rate(rate, burst):
    p = tbf.tbf(Shape(rate, burst), TICK, "ingress")
    want = int(rate // 8 * tbf.DERIVED_BURST_MS / 1000) + 2 * 1518  # 4 ms of the rate + 2 frames
    # The refill time is whole microseconds (then ticks): up to ~2 us of the rate is rounded away.
    assert want - rate // 8 // 500_000 - 2 <= tbf.burst_bytes(p, TICK) <= want
    assert tbf.burst_bytes(p, TICK) < rate // 8 * 0.05  # nothing like the sentinel's 512 MiB


def test_derived_burst_follows_the_mtu():
    jumbo = tbf.tbf(Shape(1_000_000, CONTAINERD), TICK, "egress", mtu=9000)
    assert tbf.burst_bytes(jumbo, TICK) >= 2 * 9018 and jumbo.limit >= 3 * 9018


def test_burst_the_kernel_cannot_represent_means_none_given():
    # 8 Mbit/s with 512 MB: its refill time overflows the u32 tick count; and 2 s at the rate is
    # over the bound.  Both are taken as "no burst given".
    derived = tbf.tbf(Shape(8_000_000, CONTAINERD), TICK, "ingress")
    assert tbf.tbf(Shape(8_000_000, 4_000_000_000), TICK, "ingress") == derived
    assert tbf.tbf(Shape(8_000_000, 16_000_000), TICK, "ingress") == derived
    assert not tbf.burst_given(Shape(8_000_000, 16_000_000), TICK)
    assert tbf.burst_given(Shape(8_000_000, 8_000_000), TICK)


@pytest.mark.parametrize("rate, limit", [
    (1_000_000, 6 * 1518),  # 10 ms would be 1250 B: six frames
    (10_000_000, 12_500),  # 10 ms at the rate
    (100_000_000, 125_000),
    (10_000_000_000, 12_500_000),
])
def test_queue_is_bounded_in_time_with_its_floors(rate, limit):
    assert tbf.tbf(Shape(rate, CONTAINERD), TICK, "ingress").limit == limit


def test_queue_holds_a_tso_packet_only_when_the_bucket_passes_one():
    small = tbf.tbf(Shape(8_000_000, 80_000), TICK, "egress")  # 10 kB bucket: GSO gets segmented
    assert small.limit == 10_000  # 10 ms at 1 MB/s
    big = tbf.tbf(Shape(8_000_000, 8_000_000), TICK, "egress")  # 1 MB bucket (1 s at the rate)
    assert big.limit == tbf.TSO_PACKET


def test_check_accepts_the_legacy_parameters_of_live_pods():
    # What the reference (Go on amd64: the u32 conversions wrap) and our previous release
    # (saturated) wrote for containerd's burst at 1 Mbit/s; read back with tc, the reference's
    # is "burst 21474835b".
    shape = Shape(1_000_000, CONTAINERD)
    accepted = tbf.accepted(shape, TICK)
    assert accepted[0] == tbf.tbf(shape, TICK, "ingress")
    saturated, wrapped = accepted[1:]
    assert saturated.buffer == 2**32 - 1 and saturated.limit == 3125 + CONTAINERD // 8
    assert wrapped.buffer == 2684354435 and tbf.burst_bytes(wrapped, TICK) == 21474835
    # An explicit burst: the old release's queue was 25 ms on top of it.
    assert tbf.TbfParams(125_000, 15_625_000, 3125 + 125_000) in tbf.accepted(Shape(1_000_000, 1_000_000), TICK)


def test_legacy_limit_saturates_where_reference_wraps():
    # CRI-O's burst (just under 4 GB) plus 25 ms of queue does not fit in 32 bits.
    saturated, wrapped = tbf.legacy(Shape(8_000_000, CRIO), TICK)
    assert saturated.limit == 2**32 - 1
    assert wrapped.limit == (25_000 + 2**32 - 2) & (2**32 - 1)


def test_check_does_not_accept_arbitrary_parameters():
    accepted = tbf.accepted(Shape(10_000_000, CONTAINERD), TICK)
    assert tbf.TbfParams(1_250_000, 100_000, 10_000) not in accepted


def test_rate64():
    p = tbf.tbf(Shape(400_000_000_000, 8_000_000), TICK, "ingress")  # 400 Gbit/s
    assert p.rate == 50_000_000_000 > 2**32


@pytest.mark.parametrize("shape, fragment", [(Shape(7, 100), "rate 7"), (Shape(800, 7), "burst 7")])
def test_plan_refuses_what_the_kernel_cannot_represent(shape, fragment):
    with pytest.raises(CniError) as info:
        tbf.tbf(shape, TICK, "ingress")
    assert info.value.code == Code.INTERNAL and fragment in info.value.msg


# -- handlers without a kernel -------------------------------------------------------------------

def test_add_without_bandwidth_passes_prev_result_through(cni_version):
    prev = prev_at(cni_version)
    code, out = dispatch(PLUGIN, "ADD", conf(cni_version, prevResult=prev))
    if cni_version not in SUPPORTED:
        assert code == 1 and out["msg"] == "incompatible CNI versions"
        assert out["code"] == 1
        return
    assert code == 0 and out == prev


@pytest.mark.parametrize("version", SUPPORTED)
def test_add_with_all_zero_passes_through(version):
    prev = prev_at(version)
    keys = dict(ingressRate=0, ingressBurst=0, egressRate=0, egressBurst=0)
    code, out = dispatch(PLUGIN, "ADD", conf(version, prevResult=prev, **keys))
    assert code == 0 and out == prev


def test_add_prints_prev_result_at_config_version():
    code, out = dispatch(PLUGIN, "ADD", conf("0.4.0", prevResult=prev_at("1.0.0")))
    assert code == 0 and out["cniVersion"] == "0.4.0" and out["ips"][0]["version"] == "4"


def test_add_needs_prev_result():
    code, out = dispatch(PLUGIN, "ADD", conf(ingressRate=1000, ingressBurst=100))
    assert out == {"code": 999, "msg": "must be called as chained plugin"}


def test_add_without_interfaces():
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16"}]}
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=prev, ingressRate=1000, ingressBurst=100))
    assert out == {"code": 999, "msg": "no interfaces provided"}


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
def test_check_with_nothing_configured_succeeds(version):
    # The reference panics here (upstream #1221).
    code, out = dispatch(PLUGIN, "CHECK", conf(version, prevResult=prev_at(version)))
    assert code == 0 and out is None


def test_check_needs_prev_result():
    code, out = dispatch(PLUGIN, "CHECK", conf(ingressRate=1000, ingressBurst=100))
    assert out == {"code": 999, "msg": "must be called as a chained plugin"}


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0"])
def test_old_versions_refused(version):
    code, out = dispatch(PLUGIN, "ADD", conf(version))
    assert code == 1 and out["code"] == 1 and out["msg"] == "incompatible CNI versions"


def test_version_output():
    code, out = dispatch(PLUGIN, "VERSION")
    assert out["supportedVersions"] == ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def test_del_with_bad_config_cleans_up_anyway(capfd):
    """ADD refuses it; DEL needs no key of it (the IFB is named by network + container ID)."""
    assert dispatch(PLUGIN, "ADD", conf(ingressRate=5, prevResult=prev_at("1.0.0")))[0] == 1
    assert dispatch(PLUGIN, "DEL", conf(ingressRate=5)) == (0, None)
    assert "skipped what ADD would refuse: the bandwidth keys (if rate is set, burst must also be set)" in capfd.readouterr().err


def test_noop_paths_never_import_pyroute2():
    """VERSION, config errors and pass-through ADD must not pay for pyroute2 (or the CLI)."""
    prev = json.dumps(conf(prevResult=prev_at("1.0.0")))
    bad = json.dumps(conf(ingressRate=5))
    script = f"""
import io, sys
from cnichain.common import skel
from cnichain.plugins.bandwidth.plugin import PLUGIN
env = dict(CNI_COMMAND="ADD", CNI_CONTAINERID="c1", CNI_NETNS="/nonexistent", CNI_IFNAME="eth0", CNI_PATH="/x")
for stdin in ({prev!r}, {bad!r}):
    skel.dispatch(PLUGIN, env, stdin.encode(), io.StringIO(), io.StringIO())
skel.dispatch(PLUGIN, dict(CNI_COMMAND="VERSION"), b"", io.StringIO(), io.StringIO())
heavy = [m for m in sys.modules if m.split(".")[0] in ("pyroute2", "nftables", "typer", "click", "logging")
         or m.startswith("cnichain.cli")]
print(",".join(heavy))
"""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root  # the checkout (cnichain/ links)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


# -- layouts (pure) --------------------------------------------------------------------------------

FREE = HostVeth(True)
HOOKED = HostVeth(True, hooks_owned=True, why="the ingress hook of veth1 is held by a clsact qdisc")
ROOTED = HostVeth(True, root_owned=True, why="the root of veth1 is held by a htb qdisc")
NONE = HostVeth(False, why="container interface eth0 has no veth peer: interface \"eth0\" was not a veth interface")


@pytest.mark.parametrize("host, want", [(FREE, "split"), (HOOKED, "pod"), (ROOTED, "pod"), (NONE, "pod")])
def test_auto_layout(host, want):
    assert choose_layout("auto", host).name == want


def test_forced_layouts():
    assert choose_layout("host", FREE) == ("host", "host", "host")
    assert choose_layout("split", FREE) == ("split", "host", "pod")
    assert choose_layout("pod", FREE) == ("pod", "pod", "pod")
    assert choose_layout("pod", NONE).name == "pod"
    # Only the directions shaped decide: ingress-only needs the root, not the hook.
    assert choose_layout("host", HOOKED, ingress=True, egress=False).name == "host"


@pytest.mark.parametrize("wanted, host", [("host", NONE), ("host", HOOKED), ("host", ROOTED), ("split", NONE),
                                          ("split", ROOTED)])
def test_forced_layout_refused_with_the_reason(wanted, host):
    with pytest.raises(CniError) as info:
        choose_layout(wanted, host)
    assert info.value.msg == f"layout {wanted}: {host.why}" and info.value.code == Code.INTERNAL


def test_layout_read_back_from_the_result():
    ifb = ifb_name("net1", "c1")
    assert layout_in_result([("veth1", ""), ("eth0", "/ns"), (ifb, "")], ifb).name == "host"  # and the reference's
    assert layout_in_result([("veth1", ""), ("eth0", "/ns")], ifb).name == "split"
    assert layout_in_result([("eth0", "/ns"), (ifb, "/ns")], ifb).name == "pod"
    assert layout_in_result([("veth1", ""), ("eth0", "/ns"), (ifb_name("other", "c1"), "")], ifb).name == "split"


def test_layout_key():
    assert load(conf()).layout == "auto"
    assert load(conf(layout="pod", ingressRate=8, ingressBurst=8)).layout == "pod"
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=prev_at("1.0.0"), layout="side", ingressRate=8, ingressBurst=8))
    assert code == 1 and out == {"code": 999, "msg": "invalid layout 'side': expected one of auto, host, split, pod"}
    code, out = dispatch(PLUGIN, "ADD", conf(prevResult=prev_at("1.0.0"), layout=3, ingressRate=8, ingressBurst=8))
    assert code == 1 and "cannot unmarshal number into Go struct field PluginConf.layout of type string" in out["msg"]


def test_aqm_target_is_5_ms_or_one_and_a_half_frames_at_the_rate():
    from cnichain.plugins.bandwidth.plan import AqmParams, TbfParams, aqm

    def at(mbit: float, mtu: int = 1500) -> AqmParams:
        return aqm(TbfParams(rate=int(mbit * 1e6) // 8, buffer=1, limit=1), mtu)

    assert at(10) == AqmParams(target_us=5000, interval_us=100_000, limit=1024, ecn=True)
    assert at(100).target_us == 5000
    assert at(1).target_us == 18_216  # 1.5 x 1518 bytes at 125,000 bytes/s
    assert at(1, mtu=9000).target_us > at(1).target_us  # jumbo frames take longer


def test_check_accepts_the_tbfs_own_fifo_or_exactly_our_fq_codel_under_it():
    from types import SimpleNamespace

    from cnichain.common.errors import CniError
    from cnichain.plugins.bandwidth.kernel import AQM_HANDLE, TBF_CLASS, Qdisc
    from cnichain.plugins.bandwidth.plan import TbfParams, aqm, aqm_as_read_back
    from cnichain.plugins.bandwidth.verify import check_child as _check_child

    link = SimpleNamespace(name="veth0", mtu=1500)
    tbf = TbfParams(rate=1_250_000, buffer=1, limit=1)
    _check_child(link, None, tbf)  # a kernel without fq_codel, or a pod shaped by an older release
    _check_child(link, Qdisc("fq_codel", AQM_HANDLE, TBF_CLASS, aqm=aqm(tbf, 1500)), tbf)
    # as a kernel reports it: CoDel's 1,024 ns units turn 5,000 us into 4,999 and 100 ms into 99,999 us
    read_back = aqm(tbf, 1500)._replace(target_us=4999, interval_us=99_999)
    assert aqm_as_read_back(aqm(tbf, 1500)) == read_back
    _check_child(link, Qdisc("fq_codel", AQM_HANDLE, TBF_CLASS, aqm=read_back), tbf)
    for other in (Qdisc("fq_codel", AQM_HANDLE, TBF_CLASS, aqm=aqm(tbf, 1500)._replace(ecn=False)),
                  Qdisc("pfifo", AQM_HANDLE, TBF_CLASS)):
        with pytest.raises(CniError, match="Child qdisc doesn't match"):
            _check_child(link, other, tbf)
