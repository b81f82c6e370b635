"""bandwidth's QoS from pod annotations, without a kernel: quantities, names, precedence, errors."""

from __future__ import annotations

import pytest

from cnichain.common.errors import CniError
from cnichain.plugins.bandwidth import pod_qos
from cnichain.plugins.bandwidth.config import Shape, load

CONTAINERD_BURST = 2**32 - 1  # what containerd's CRI sends as every burst


def conf(annotations: dict | None = None, bandwidth: dict | None = None, **top) -> dict:
    runtime: dict = {}
    if annotations is not None:
        runtime[pod_qos.CAPABILITY] = annotations
    if bandwidth is not None:
        runtime["bandwidth"] = bandwidth
    return {"cniVersion": "1.0.0", "name": "net1", "type": "bandwidth", "runtimeConfig": runtime, **top}


@pytest.mark.parametrize("text,value", [
    ("10M", 10_000_000), ("1.5k", 1500), ("512Ki", 524_288), ("1Gi", 2**30), ("1e6", 1_000_000),
    ("2E3", 2000), ("1e+2", 100), ("+7", 7), ("2.0000001", 3), ("0.5m", 1), (" 100 ", 100), ("1500", 1500),
])
def test_quantities_are_read_as_kubernetes_reads_them(text, value):
    assert pod_qos.quantity(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1x", "e6", "1e", "1..2", "1.2.3", "1e1234", "\u0661", "10 M", "1mi", "."])
def test_what_is_not_a_quantity_is_refused(text):
    with pytest.raises(ValueError):
        pod_qos.quantity(text)


def test_the_names_are_calicos():
    assert pod_qos.annotation("ingress", "burst") == "qos.projectcalico.org/ingressBurst"
    assert pod_qos.annotation("egress", "peakrate") == "qos.projectcalico.org/egressPeakrate"
    assert pod_qos.annotation("egress", "minburst") == "qos.projectcalico.org/egressMinburst"
    assert pod_qos.annotation("ingress", "rate") == "qos.projectcalico.org/ingressBandwidth"


def test_a_pods_burst_replaces_the_runtimes_sentinel_per_direction():
    cfg = load(conf(
        {"kubernetes.io/ingress-bandwidth": "10M", "kubernetes.io/egress-bandwidth": "6M",
         "qos.projectcalico.org/egressBurst": "200k"},
        {"ingressRate": 10_000_000, "ingressBurst": CONTAINERD_BURST,
         "egressRate": 6_000_000, "egressBurst": CONTAINERD_BURST}))
    assert cfg.ingress == Shape(10_000_000, CONTAINERD_BURST)
    assert cfg.egress == Shape(6_000_000, 200_000)
    assert cfg.source == "runtimeConfig"


def test_peakrate_and_minburst_reach_the_shape():
    cfg = load(conf(
        {"qos.projectcalico.org/ingressPeakrate": "20M", "qos.projectcalico.org/ingressMinburst": "3000"},
        {"ingressRate": 10_000_000, "ingressBurst": CONTAINERD_BURST}))
    assert cfg.ingress == Shape(10_000_000, CONTAINERD_BURST, 20_000_000, 3000)
    assert cfg.egress is None


def test_calicos_rate_counts_only_where_the_kubernetes_annotation_is_absent():
    only_calico = load(conf({"qos.projectcalico.org/egressBandwidth": "5M"}))
    assert only_calico.egress == Shape(5_000_000, 0) and only_calico.ingress is None
    assert only_calico.source == "annotations"
    both = load(conf({"kubernetes.io/egress-bandwidth": "8M", "qos.projectcalico.org/egressBandwidth": "5M"},
                     {"egressRate": 8_000_000, "egressBurst": CONTAINERD_BURST}))
    assert both.egress == Shape(8_000_000, CONTAINERD_BURST)


def test_a_conflists_own_keys_win_over_the_pods_annotations():
    cfg = load(conf({"qos.projectcalico.org/ingressBurst": "1M"}, None, ingressRate=1_000_000, ingressBurst=80_000))
    assert cfg.ingress == Shape(1_000_000, 80_000) and cfg.source == "config"


def test_no_annotations_or_unrelated_ones_change_nothing():
    runtime = {"ingressRate": 10_000_000, "ingressBurst": CONTAINERD_BURST}
    assert load(conf(None, runtime)) == load(conf({"io.kubernetes.pod.name": "web"}, runtime))
    assert not load(conf({"io.kubernetes.pod.name": "web"})).shaped
    assert not load(conf(["not", "a", "map"])).shaped  # type: ignore[arg-type]


@pytest.mark.parametrize("annotations,named", [
    ({"qos.projectcalico.org/ingressBurst": "lots"}, "qos.projectcalico.org/ingressBurst"),
    ({"qos.projectcalico.org/egressBurst": "-5k"}, "qos.projectcalico.org/egressBurst"),
    ({"qos.projectcalico.org/egressBurst": "40Gi"}, "qos.projectcalico.org/egressBurst"),
    ({"qos.projectcalico.org/ingressBandwidth": "10"}, "qos.projectcalico.org/ingressBandwidth"),
    ({"qos.projectcalico.org/ingressMinburst": "1500"}, "qos.projectcalico.org/ingressMinburst"),
    ({"qos.projectcalico.org/egressPeakrate": "5M"}, "qos.projectcalico.org/egressPeakrate"),  # not above 6M
    ({"qos.projectcalico.org/ingressBurst": "100k"}, "qos.projectcalico.org/ingressBurst"),  # no ingress rate
])
def test_an_unusable_annotation_is_an_error_that_names_it(annotations, named):
    with pytest.raises(CniError) as exc:
        load(conf({"kubernetes.io/egress-bandwidth": "6M", **annotations},
                  {"egressRate": 6_000_000, "egressBurst": CONTAINERD_BURST}))
    assert named in exc.value.msg
