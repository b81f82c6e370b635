"""``cnichain lint``: a catalogue of broken conflists, each with the finding it must produce, and
the real-world corpus, which must lint without errors."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Any, Optional

import pytest

from cnichain.tools import lint
from cnichain.tools.lint import ERROR, WARNING

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = sorted(glob.glob(os.path.join(ROOT, "tests", "data", "corpus", "*.conf*"))
                + glob.glob(os.path.join(ROOT, "conflists", "*.conflist")))

BRIDGE = {"type": "bridge", "bridge": "cni0", "isGateway": True,
          "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.1.0.0/24"}]]}}
PORTMAP = {"type": "portmap", "capabilities": {"portMappings": True}}


def chain(*plugins: dict, version: Any = "1.0.0", **top: Any) -> dict:
    doc: dict = {"cniVersion": version, "name": "net", "plugins": list(plugins)}
    if version is None:
        del doc["cniVersion"]
    doc.update(top)
    return doc


def run(doc: Any, **opts: Any) -> lint.FileReport:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    report = lint.FileReport("test.conflist")
    lint.lint_bytes(data, report, lint.Options(**opts))
    return report


# (id, document, severity, plugin index, key, substring of the message)
CATALOGUE: list[tuple[str, Any, str, Optional[int], str, str]] = [
    ("json-syntax", b'{"cniVersion": "1.0.0",\n  "name": "x", "plugins": [}', ERROR, None, "", "invalid JSON"),
    ("not-an-object", [1, 2], ERROR, None, "", "top level must be a JSON object"),
    ("no-plugins-no-type", {"cniVersion": "1.0.0", "name": "x"}, ERROR, None, "", "neither a config list"),
    ("empty-plugins", chain(), ERROR, None, "plugins", "non-empty list"),
    ("missing-name", {"cniVersion": "1.0.0", "plugins": [BRIDGE]}, ERROR, None, "name", "missing network name"),
    ("bad-name", {"cniVersion": "1.0.0", "name": "my net", "plugins": [BRIDGE]}, ERROR, None, "name",
     "invalid characters found in network name"),
    ("version-missing", chain(BRIDGE, version=None), WARNING, None, "cniVersion", "reads the config as 0.1.0"),
    ("version-number", chain(BRIDGE, version=1.0), ERROR, None, "cniVersion", "must be a string"),
    ("version-malformed", chain(BRIDGE, version="1.0.x"), ERROR, None, "cniVersion", 'malformed CNI version "1.0.x"'),
    ("version-unknown", chain(BRIDGE, version="2.0.0"), ERROR, None, "cniVersion", 'unknown CNI version "2.0.0"'),
    ("bandwidth-too-old", chain(BRIDGE, {"type": "bandwidth", "capabilities": {"bandwidth": True}}, version="0.2.0"),
     ERROR, 1, "cniVersion", 'incompatible CNI versions: config is "0.2.0", bandwidth supports ["0.3.0"'),
    ("route-override-1.1-reference", chain(BRIDGE, {"type": "route-override", "flushroutes": True}, version="1.1.0"),
     WARNING, 1, "cniVersion", "reference route-override supports up to 1.0.0"),
    ("plugin-no-type", chain(BRIDGE, {"capabilities": {}}), ERROR, 1, "type", "plugin has no 'type'"),
    ("unknown-key-typo", chain(BRIDGE, {"type": "portmap", "capabilities": {"portMappings": True}, "snatt": False}),
     ERROR, 1, "snatt", "unknown key snatt (did you mean snat?)"),
    ("unknown-key-plain", chain(BRIDGE, {**PORTMAP, "foo": 1}), WARNING, 1, "foo", "unknown key foo"),
    ("top-level-portmappings", chain(BRIDGE, {**PORTMAP, "portMappings": [{"hostPort": 80, "containerPort": 80}]}),
     WARNING, 1, "portMappings", "read only from runtimeConfig"),
    ("capability-typo", chain(BRIDGE, {"type": "portmap", "capabilities": {"portMapping": True}}), ERROR, 1,
     "capabilities.portMapping", "unknown capability portMapping (did you mean portMappings?)"),
    ("capability-case", chain(BRIDGE, {"type": "bandwidth", "capabilities": {"Bandwidth": True}}), ERROR, 1,
     "capabilities.Bandwidth", "did you mean bandwidth?"),
    ("capability-not-consumed", chain(BRIDGE, {"type": "portmap", "capabilities": {"portMappings": True, "bandwidth": True}}),
     WARNING, 1, "capabilities.bandwidth", "portmap does not consume capability bandwidth"),
    ("portmap-no-capability", chain(BRIDGE, {"type": "portmap"}), WARNING, 1, "capabilities",
     "never receives a pod's hostPorts"),
    ("capability-not-bool", chain(BRIDGE, {"type": "portmap", "capabilities": {"portMappings": "yes"}}), ERROR, 1,
     "capabilities.portMappings", "must be true or false"),
    ("portmap-snat-type", chain(BRIDGE, {**PORTMAP, "snat": "false"}), ERROR, 1, "snat",
     "json: cannot unmarshal string into Go struct field PortMapConf.snat of type bool"),
    ("portmap-iptables-conditions", chain(BRIDGE, {**PORTMAP, "conditionsV4": ["-s", "10.0.0.0/8"]}), WARNING, 1,
     "conditionsV4", "iptables-style conditions are translated to nftables matches"),
    ("portmap-iptables-conditions-outside", chain(BRIDGE, {**PORTMAP, "conditionsV4": ["-m", "mark"]}), ERROR, 1, "",
     "unsupported match module 'mark'"),
    ("portmap-backend-iptables", chain(BRIDGE, {**PORTMAP, "backend": "iptables"}), WARNING, 1, "backend",
     'backend "iptables" is accepted for compatibility'),
    ("portmap-mark-chain", chain(BRIDGE, {**PORTMAP, "externalSetMarkChain": "KUBE-MARK-MASQ"}), WARNING, 1,
     "externalSetMarkChain", "has no effect"),
    ("bridge-masq-iptables", chain({**BRIDGE, "ipMasq": True, "ipMasqBackend": "iptables"}), WARNING, 0,
     "ipMasqBackend", "always programmed in nftables"),
    ("portmap-mark-bit", chain(BRIDGE, {**PORTMAP, "markMasqBit": 40}), ERROR, 1, "",
     "MasqMarkBit must be between 0 and 31"),
    ("bandwidth-rate-without-burst", chain(BRIDGE, {"type": "bandwidth", "ingressRate": 1000000}), ERROR, 1, "",
     "if rate is set, burst must also be set"),
    ("bandwidth-burst-without-rate", chain(BRIDGE, {"type": "bandwidth", "egressBurst": 1000000}), ERROR, 1, "",
     "if burst is set, rate must also be set"),
    ("bandwidth-negative", chain(BRIDGE, {"type": "bandwidth", "ingressRate": -1, "ingressBurst": 10}), ERROR, 1,
     "ingressRate", "cannot unmarshal number -1 into Go struct field PluginConf.ingressRate of type uint64"),
    ("bandwidth-huge-burst", chain(BRIDGE, {"type": "bandwidth", "egressRate": 10, "egressBurst": 2**40}), ERROR, 1, "",
     "burst cannot be more than 4GB"),
    ("bandwidth-shapes-nothing", chain(BRIDGE, {"type": "bandwidth"}), WARNING, 1, "capabilities", "shapes nothing"),
    ("tuning-sysctl-not-net", chain(BRIDGE, {"type": "tuning", "sysctl": {"kernel.panic": "1"}}), ERROR, 1,
     "sysctl.kernel.panic", 'invalid net sysctl key: "kernel.panic"'),
    ("tuning-sysctl-outside-net", chain(BRIDGE, {"type": "tuning", "sysctl": {"netfilter.x": "1"}}), ERROR, 1,
     "sysctl.netfilter.x", "invalid net sysctl key"),
    ("tuning-sysctl-duplicate",
     b'{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"tuning",'
     b'"sysctl":{"net.core.somaxconn":"1","net.core.somaxconn":"2"}}]}',
     ERROR, 1, "sysctl", "duplicated sysctl keys are not allowed"),
    ("tuning-mtu-type", chain(BRIDGE, {"type": "tuning", "mtu": "1500"}), ERROR, 1, "mtu",
     "cannot unmarshal string into Go struct field TuningConf.mtu of type int"),
    ("tuning-bad-mac", chain(BRIDGE, {"type": "tuning", "mac": "not-a-mac"}), ERROR, 1, "",
     "invalid args not-a-mac for MAC addr"),
    ("route-override-no-dst", chain(BRIDGE, {"type": "route-override", "addroutes": [{"gw": "10.1.0.1"}]}), WARNING, 1,
     "", 'route is missing "dst": this route is skipped at ADD'),
    ("route-override-host-bits", chain(BRIDGE, {"type": "route-override", "addroutes": [{"dst": "192.0.2.1/24"}]}),
     WARNING, 1, "", "destination has host bits set"),
    ("route-override-type", chain(BRIDGE, {"type": "route-override", "flushroutes": "yes"}), ERROR, 1,
     "flushroutes", "cannot unmarshal string into Go struct field RouteOverrideConfig.flushroutes of type bool"),
    ("bridge-hairpin-promisc", chain({**BRIDGE, "hairpinMode": True, "promiscMode": True}), ERROR, 0, "",
     "cannot set hairpin mode and promiscuous mode at the same time"),
    ("bridge-vlan", chain({**BRIDGE, "isGateway": False, "vlan": 5000}), ERROR, 0, "", "invalid VLAN ID 5000"),
    ("bridge-typo", chain({**BRIDGE, "isGatway": True}), ERROR, 0, "isGatway", "did you mean isGateway?"),
    ("host-local-no-subnet", chain({**BRIDGE, "ipam": {"type": "host-local"}}), ERROR, 0, "ipam",
     "no IP ranges specified"),
    ("host-local-overlap", chain({**BRIDGE, "ipam": {"type": "host-local", "ranges": [
        [{"subnet": "10.1.0.0/24"}, {"subnet": "10.1.0.0/25"}]]}}), ERROR, 0, "ipam", "overlap"),
    ("host-local-sets-overlap", chain({**BRIDGE, "ipam": {"type": "host-local", "ranges": [
        [{"subnet": "10.1.0.0/24"}], [{"subnet": "10.1.0.0/16"}]]}}), ERROR, 0, "ipam", "range set 0 overlaps with 1"),
    ("host-local-range-without-subnet", chain({**BRIDGE, "ipam": {"type": "host-local", "ranges": [
        [{"rangeStart": "10.1.0.5"}]]}}), ERROR, 0, "ipam", "invalid range set 0: IP <nil> not v4 nor v6"),
    ("host-local-range-end-outside", chain({**BRIDGE, "ipam": {"type": "host-local", "subnet": "10.1.0.0/24",
                                                              "rangeEnd": "10.2.0.1"}}),
     ERROR, 0, "ipam", "RangeEnd 10.2.0.1 not in network 10.1.0.0/24"),
    ("host-local-two-sets-old-version", chain({**BRIDGE, "ipam": {"type": "host-local", "ranges": [
        [{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]}}, version="0.2.0"),
     ERROR, 0, "ipam", "CNI version 0.2.0 does not support more than 1 address per family"),
    ("bandwidth-top-level-capability-object", chain(BRIDGE, {"type": "bandwidth", "capabilities": {"bandwidth": True},
                                                             "bandwidth": {"ingressRate": 1}}),
     WARNING, 1, "bandwidth", "read only from runtimeConfig"),
    ("host-local-host-bits", chain({**BRIDGE, "ipam": {"type": "host-local", "subnet": "10.1.0.5/24"}}), ERROR, 0,
     "ipam", "Network has host bits set"),
    ("host-local-key-typo", chain({**BRIDGE, "ipam": {"type": "host-local", "subnet": "10.1.0.0/24",
                                                     "rangeStrat": "10.1.0.10"}}),
     ERROR, 0, "ipam.rangeStrat", "did you mean rangeStart?"),
    ("host-local-under-ptp", chain({"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.1.0.0/31"}}), ERROR, 0,
     "ipam", "too small to allocate from"),
    ("meta-first", chain(PORTMAP, BRIDGE), ERROR, 0, "type", "must be called as chained plugin"),
    ("meta-twice", chain(BRIDGE, PORTMAP, PORTMAP), ERROR, 2, "type", "portmap appears twice"),
    ("bandwidth-twice", chain(BRIDGE, {"type": "bandwidth", "capabilities": {"bandwidth": True}},
                              {"type": "bandwidth", "capabilities": {"bandwidth": True}}), ERROR, 2, "type",
     "same IFB"),
    ("duplicate-key", b'{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge","mtu":1400,"mtu":1500}]}',
     WARNING, 0, "mtu", "written more than once"),
    ("list-key-typo", chain(BRIDGE, disableChek=True), ERROR, None, "disableChek", "did you mean disableCheck?"),
    ("foreign-meta-first", chain({"type": "firewall"}, BRIDGE), WARNING, 0, "type", "needs a previous result"),
    ("foreign-capability-typo", chain({"type": "calico", "capabilities": {"portMapping": True}}), WARNING, 0,
     "capabilities.portMapping", "did you mean portMappings?"),
]


@pytest.mark.parametrize("doc,severity,index,key,text", [c[1:] for c in CATALOGUE], ids=[c[0] for c in CATALOGUE])
def test_catalogue(doc: Any, severity: str, index: Optional[int], key: str, text: str) -> None:
    report = run(doc)
    hits = [f for f in report.findings if text in f.message]
    assert hits, f"no finding containing {text!r}: {report.findings}"
    f = hits[0]
    assert (f.severity, f.plugin, f.key) == (severity, index, key), f
    if severity == ERROR:
        assert f.fix, f"an error without a fix: {f}"


def test_json_syntax_error_has_line_and_column() -> None:
    f = run(b'{"cniVersion": "1.0.0",\n  "name": "x", "plugins": [}').findings[0]
    assert (f.line, f.column) == (2, 28)


def test_unknown_plugin_types_never_fail_the_lint() -> None:
    report = run(chain({"type": "calico", "whatever": {"a": 1}, "ipam": {"type": "calico-ipam"}},
                       {"type": "flannel", "delegate": {"hairpinMode": True}},
                       {"type": "cilium-cni", "anything": True}))
    assert not report.errors, report.findings


def test_host_local_under_a_foreign_plugin_is_left_to_it() -> None:
    """antrea fills host-local's ranges itself: an empty ipam there is not an error."""
    report = run(chain({"type": "antrea", "ipam": {"type": "host-local"}}, PORTMAP))
    assert not report.errors, report.findings


def test_ip_ranges_capability_lets_the_runtime_give_ranges() -> None:
    report = run(chain({**BRIDGE, "ipam": {"type": "host-local"}, "capabilities": {"ipRanges": True}}))
    assert not report.errors, report.findings


def test_case_variants_are_what_go_decodes() -> None:
    """Go matches keys case-insensitively: SNAT fills snat, so it is neither unknown nor a typo."""
    report = run(chain(BRIDGE, {**PORTMAP, "SNAT": False}))
    assert not report.findings, report.findings


def test_tuning_allowlist() -> None:
    doc = chain(BRIDGE, {"type": "tuning", "sysctl": {"net.core.somaxconn": "1", "net.ipv4.ip_forward": "1"}})
    assert not run(doc).errors
    report = run(doc, tuning_allowlist=[r"^net\.core\.somaxconn$"])
    [f] = report.errors
    assert f.message.startswith("Sysctl net.ipv4.ip_forward is not allowed. Only the following sysctls are allowed")
    assert f.key == "sysctl.net.ipv4.ip_forward"


def test_bin_dir_reports_missing_plugins(tmp_path) -> None:
    exe = tmp_path / "bridge"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    report = run(chain(BRIDGE, PORTMAP), bin_dirs=[str(tmp_path)])
    missing = sorted((f.plugin, f.key) for f in report.errors)
    assert missing == [(0, "ipam.type"), (1, "type")], report.findings
    assert any('failed to find plugin "portmap"' in f.message for f in report.errors)


def test_single_plugin_conf_is_wrapped() -> None:
    report = run({"cniVersion": "1.0.0", "name": "n", **BRIDGE})
    assert not report.findings, report.findings


def test_cni_versions_list_picks_the_highest() -> None:
    doc = chain(BRIDGE, {"type": "bandwidth", "capabilities": {"bandwidth": True}}, version="0.2.0",
                cniVersions=["0.2.0", "1.0.0"])
    assert not run(doc).errors


@pytest.mark.parametrize("path", CORPUS, ids=[os.path.basename(p) for p in CORPUS])
def test_corpus_lints_without_errors(path: str) -> None:
    report = lint.lint_file(path)
    assert not report.errors, report.findings


def test_renderers_name_file_plugin_key_and_fix() -> None:
    report = run(chain(BRIDGE, {"type": "bandwidth", "ingressRate": 10}))
    text = lint.render_text([report])
    assert "test.conflist: error: plugins[1] (bandwidth): if rate is set, burst must also be set" in text
    assert "fix: give the matching *Burst" in text
    doc = json.loads(lint.render_json([report]))
    assert doc["errors"] == 1
    assert doc["files"][0]["findings"][0]["plugin_type"] == "bandwidth"


def test_cli_exit_codes(tmp_path) -> None:
    good = tmp_path / "good.conflist"
    good.write_text(json.dumps(chain(BRIDGE, {"type": "portmap"})))  # a warning only
    bad = tmp_path / "bad.conflist"
    bad.write_text(json.dumps(chain(BRIDGE, {"type": "bandwidth", "ingressRate": 10})))
    cli = [sys.executable, "-m", "cnichain.cli.app", "lint"]
    ok = subprocess.run(cli + [str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 warning(s)" in ok.stdout
    failed = subprocess.run(cli + ["--json", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert json.loads(failed.stdout)["errors"] == 1

