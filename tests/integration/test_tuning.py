"""tuning against a real kernel: every effect read back from the pod namespace after ADD, CHECK and
DEL, for every spec version; rollback of a failed ADD; backup files shared with the reference; the
corpus entries run unchanged behind bridge + host-local.

The plugin runs as a process inside the lab's node namespace, as a runtime would exec it.

As in the reference's tuning_test.go, each kernel case runs once per spec version
(``cni_version``; cases about what CHECK detects: ``check_version``; interop with Debian's
reference plugins: the versions they speak), checking the version's result and CHECK rule
(tests/specver.py).  Single on purpose: the import probe (it measures what the exec path loads, not
kernel behaviour) and the corpus entries (each file carries its own cniVersion).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfList
from cnichain.common.types import Result
from tests.specver import (
    CHAINING_VERSIONS,
    REFERENCE_PLUGIN_VERSIONS,
    assert_check_refused,
    assert_cni_error,
    assert_result_shape,
    check_as_runtime,
    expects_check,
    ips_carry_version,
    result_has_interfaces,
)

pytestmark = pytest.mark.integration

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "corpus")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSCTLS = {
    "net.core.somaxconn": "500",
    "net.ipv4.conf.IFNAME.arp_filter": "1",
    "net.ipv6.conf.IFNAME.accept_ra": "0",
}
ATTRS = {"mac": "02:12:34:56:78:9a", "mtu": 1400, "promisc": True, "allmulti": True, "txQLen": 321}


def exec_plugin(lab, plugin_dir, command, conf, netns, cid="ctr1", ifname="eth0", binary=None, python_probe=False):
    """Run tuning (or ``binary``) in the node namespace; return (rc, decoded stdout, stderr)."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_PATH": plugin_dir, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    argv = [binary or os.path.join(plugin_dir, "tuning")]
    if python_probe:
        env["PYTHONPATH"] = ROOT  # the checkout: cnichain/ links to the top-level packages
        argv = [os.path.join(ROOT, ".venv", "bin", "python"), "-c",
                "import sys\nfrom cnichain.plugins.tuning.__main__ import main\nrc = main()\n"
                "sys.stderr.write('PYROUTE2=%s' % ('pyroute2' in sys.modules))\nsys.exit(rc)\n"]
    proc = subprocess.run(["ip", "netns", "exec", os.path.basename(lab.node), *argv],
                          input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=60)
    out = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, out, proc.stderr.decode()


def make_pod(lab, role="pod"):
    pod = lab.netns(role)
    lab.run(pod, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer0")
    lab.run(pod, "ip", "link", "set", "eth0", "up")
    return pod


def link_state(lab, pod, ifname="eth0") -> dict:
    info = json.loads(lab.run(pod, "ip", "-j", "link", "show", ifname).stdout)[0]
    return {"mac": info["address"], "mtu": info["mtu"], "promisc": "PROMISC" in info["flags"],
            "allmulti": "ALLMULTI" in info["flags"], "txQLen": info.get("txqlen")}


def sysctl(lab, pod, key, ifname="eth0") -> str:
    path = "/proc/sys/" + key.replace(".", "/").replace("IFNAME", ifname, 1)
    return lab.run(pod, "cat", path).stdout.strip()


def prev_result(version, mac, netns) -> dict:
    if not result_has_interfaces(version):
        return {"cniVersion": version, "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1"}}
    ip = {"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1}
    if ips_carry_version(version):
        ip["version"] = "4"
    return {"cniVersion": version,
            "interfaces": [{"name": "cni0", "mac": "0a:58:0a:01:00:01"}, {"name": "eth0", "mac": mac, "sandbox": netns}],
            "ips": [ip], "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}


def tuning_conf(lab, version, netns, prev=True, **keys) -> dict:
    conf = {"cniVersion": version, "name": "tunenet", "type": "tuning", "dataDir": lab.path("tuning")}
    conf.update(keys)
    if prev:
        conf["prevResult"] = prev_result(version, "0a:58:0a:01:00:05", netns)
    return conf


def backups(lab) -> list[str]:
    d = lab.path("tuning")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_add_check_del_in_every_version(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    before = link_state(lab, pod)
    before_sysctl = {k: sysctl(lab, pod, k) for k in SYSCTLS}
    conf = tuning_conf(lab, cni_version, pod, sysctl=SYSCTLS, **ATTRS)

    rc, out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0, (out, err)
    expected = Result.from_dict(conf["prevResult"], cni_version)
    for iface in expected.interfaces:
        if iface.name == "eth0":
            iface.mac = ATTRS["mac"]
    assert out == expected.to_dict(cni_version)  # passed through, only eth0's MAC rewritten
    assert_result_shape(out, cni_version)
    applied = {"mac": ATTRS["mac"], "mtu": 1400, "promisc": True, "allmulti": True, "txQLen": 321}
    assert link_state(lab, pod) == applied
    assert {k: sysctl(lab, pod, k) for k in SYSCTLS} == SYSCTLS
    assert backups(lab) == ["ctr1_eth0.json"]
    assert oct(os.stat(os.path.join(lab.path("tuning"), "ctr1_eth0.json")).st_mode & 0o777) == "0o600"
    assert oct(os.stat(lab.path("tuning")).st_mode & 0o777) == "0o700"

    rc, out_check, err = exec_plugin(lab, plugin_dir, "CHECK", dict(conf, prevResult=out), pod)
    if expects_check(cni_version):
        assert (rc, out_check) == (0, None), err
    else:
        assert_check_refused(rc, out_check)
    assert link_state(lab, pod) == applied

    for _ in range(2):  # DEL twice
        rc, out_del, err = exec_plugin(lab, plugin_dir, "DEL", dict(conf, prevResult=out), pod)
        assert (rc, out_del) == (0, None), err
        assert link_state(lab, pod) == before
        assert {k: sysctl(lab, pod, k) for k in SYSCTLS} == before_sysctl
        assert backups(lab) == []


def test_sysctl_only_config_never_loads_pyroute2(lab, plugin_dir):
    """Single version: an import probe of the exec path, not a kernel case."""
    pod = make_pod(lab)
    conf = tuning_conf(lab, "1.0.0", pod, sysctl=SYSCTLS)
    for command in ("ADD", "CHECK", "DEL", "DEL"):
        rc, _, err = exec_plugin(lab, plugin_dir, command, conf, pod, python_probe=True)
        assert rc == 0 and "PYROUTE2=False" in err, (command, err)
    assert sysctl(lab, pod, "net.core.somaxconn") != "500"  # restored by DEL


def test_check_reads_the_ifname_sysctl_and_detects_drift(lab, plugin_dir, check_version):
    pod = make_pod(lab)
    conf = tuning_conf(lab, check_version, pod, sysctl={"net.ipv4.conf.IFNAME.arp_filter": "1"}, mtu=1400, txQLen=50)
    assert exec_plugin(lab, plugin_dir, "ADD", conf, pod)[0] == 0
    assert exec_plugin(lab, plugin_dir, "CHECK", conf, pod)[0] == 0  # the reference fails here
    lab.run(pod, "ip", "link", "set", "eth0", "mtu", "1300")
    rc, out, _ = exec_plugin(lab, plugin_dir, "CHECK", conf, pod)
    assert rc == 1
    assert_cni_error(out, 999, "Error: Tuning configured MTU of eth0 is 1400, current value is 1300")
    lab.run(pod, "ip", "link", "set", "eth0", "mtu", "1400")
    lab.run(pod, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/eth0/arp_filter")
    rc, out, _ = exec_plugin(lab, plugin_dir, "CHECK", conf, pod)
    assert rc == 1
    assert_cni_error(out, 999, "Error: Tuning configured value of /proc/sys/net/ipv4/conf/eth0/arp_filter is 1, current value is 0")
    lab.run(pod, "ip", "link", "del", "eth0")
    rc, out, _ = exec_plugin(lab, plugin_dir, "CHECK", dict(conf, sysctl={}), pod)
    assert rc == 1
    assert_cni_error(out, 999, "Cannot find container link eth0")
    # DEL with the link gone succeeds and drops the useless backup
    assert exec_plugin(lab, plugin_dir, "DEL", conf, pod)[0] == 0
    assert backups(lab) == []


def test_failed_add_puts_everything_back(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    before = link_state(lab, pod)
    somaxconn = sysctl(lab, pod, "net.core.somaxconn")
    # MAC and promisc are applied before the MTU, which the kernel refuses for a veth
    conf = tuning_conf(lab, cni_version, pod, sysctl={"net.core.somaxconn": "501"},
                       mac="02:aa:bb:cc:dd:ee", promisc=True, mtu=70000)
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 1
    assert_cni_error(out, 999, 'failed to set MTU of "eth0"', prefix=True)
    assert link_state(lab, pod) == before
    assert sysctl(lab, pod, "net.core.somaxconn") == somaxconn
    assert backups(lab) == []


def test_slash_form_keys_work_as_in_the_reference(lab, plugin_dir, cni_version):
    """The reference turns dots into slashes, so ``net/ipv4/conf/IFNAME/x`` names the same file."""
    pod = make_pod(lab)
    conf = tuning_conf(lab, cni_version, pod, sysctl={"net/ipv4/conf/IFNAME/arp_filter": "1",
                                                       "net/core/somaxconn": "503"})
    rc, out, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0, (out, err)
    assert sysctl(lab, pod, "net.ipv4.conf.eth0.arp_filter") == "1"
    assert sysctl(lab, pod, "net.core.somaxconn") == "503"
    assert exec_plugin(lab, plugin_dir, "DEL", conf, pod)[0] == 0


def test_invalid_key_writes_nothing(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    somaxconn = sysctl(lab, pod, "net.core.somaxconn")
    for bad in ("kernel.hostname", "/kernel/hostname", "net."):
        conf = tuning_conf(lab, cni_version, pod, sysctl={"net.core.somaxconn": "502", bad: "1"}, mtu=1300)
        rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
        assert rc == 1
        assert_cni_error(out, 7, f'invalid net sysctl key: "{bad}"')
    # a key that is well-formed but names no sysctl fails before anything is written, too
    conf = tuning_conf(lab, cni_version, pod, sysctl={"net.core.somaxconn": "502", "net.core.nonexistent": "1"})
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 1
    assert_cni_error(out, 999, "open /proc/sys/net/core/nonexistent: no such file or directory")
    assert sysctl(lab, pod, "net.core.somaxconn") == somaxconn
    assert link_state(lab, pod)["mtu"] == 1500
    assert backups(lab) == []


def test_del_keeps_a_sysctl_someone_else_changed(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = tuning_conf(lab, cni_version, pod, sysctl={"net.core.somaxconn": "500", "net.ipv4.conf.IFNAME.arp_filter": "1"})
    assert exec_plugin(lab, plugin_dir, "ADD", conf, pod)[0] == 0
    lab.run(pod, "sh", "-c", "echo 777 > /proc/sys/net/core/somaxconn")
    assert exec_plugin(lab, plugin_dir, "DEL", conf, pod)[0] == 0
    assert sysctl(lab, pod, "net.core.somaxconn") == "777"
    assert sysctl(lab, pod, "net.ipv4.conf.IFNAME.arp_filter") == "0"


def test_repeated_add_keeps_the_original_values(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    before = link_state(lab, pod)
    conf = tuning_conf(lab, cni_version, pod, mtu=1400)
    assert exec_plugin(lab, plugin_dir, "ADD", conf, pod)[0] == 0
    assert exec_plugin(lab, plugin_dir, "ADD", dict(conf, mtu=1300), pod)[0] == 0
    assert link_state(lab, pod)["mtu"] == 1300
    assert exec_plugin(lab, plugin_dir, "DEL", conf, pod)[0] == 0
    assert link_state(lab, pod) == before


def test_del_with_netns_gone_or_empty(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = tuning_conf(lab, cni_version, pod, mtu=1400)
    assert exec_plugin(lab, plugin_dir, "ADD", conf, pod)[0] == 0
    lab.delete_netns(pod)
    for netns in (pod, ""):
        rc, out, err = exec_plugin(lab, plugin_dir, "DEL", conf, netns)
        assert (rc, out) == (0, None), err
    assert backups(lab) == []


def test_mac_capability_and_args(lab, plugin_dir, cni_version):
    pod = make_pod(lab)
    conf = tuning_conf(lab, cni_version, pod, mac="02:00:00:00:00:01", runtimeConfig={"mac": "02:00:00:00:00:02"})
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod)
    assert rc == 0
    assert_result_shape(out, cni_version)
    if result_has_interfaces(cni_version):
        assert out["interfaces"][1]["mac"] == "02:00:00:00:00:02"
    assert link_state(lab, pod)["mac"] == "02:00:00:00:00:02"
    conf["args"] = {"cni": {"mac": "02:00:00:00:00:03", "allmulti": True}}
    rc, out, _ = exec_plugin(lab, plugin_dir, "ADD", conf, pod, cid="ctr2")
    assert rc == 0 and link_state(lab, pod)["mac"] == "02:00:00:00:00:03" and link_state(lab, pod)["allmulti"]


@pytest.mark.parametrize("cni_version", REFERENCE_PLUGIN_VERSIONS)
def test_reference_backup_is_restored_by_ours(lab, plugin_dir, any_reference, cni_version):
    """State compatibility: a node can switch plugins with attachments in flight."""
    reference_dir = any_reference[1]
    pod = make_pod(lab)
    before = link_state(lab, pod)
    conf = tuning_conf(lab, cni_version, pod, mac="02:00:00:00:00:0b", mtu=1450, promisc=True)
    rc, _, err = exec_plugin(lab, plugin_dir, "ADD", conf, pod, binary=os.path.join(reference_dir, "tuning"))
    assert rc == 0, err
    assert backups(lab) == ["ctr1_eth0.json"]
    assert link_state(lab, pod)["mtu"] == 1450
    assert exec_plugin(lab, plugin_dir, "DEL", conf, pod)[0] == 0
    assert link_state(lab, pod) == before
    assert backups(lab) == []


# -- corpus entries, unchanged, behind bridge + host-local --------------------------------------


def bridge_entry(lab, subnet="10.77.0.0/24"):
    return {"type": "bridge", "bridge": "cni0", "isGateway": True,
            "ipam": {"type": "host-local", "subnet": subnet, "routes": [{"dst": "0.0.0.0/0"}], "dataDir": lab.path("ipam")}}


@pytest.mark.parametrize("corpus_file", ["cnidev-tuning-sysctl.conf", "cnidev-tuning-attributes.conf"])
def test_corpus_tuning_conf_behind_bridge(lab, make_runtime, plugin_dir, reference_dir, corpus_file):
    """Single per file: each corpus entry carries its own cniVersion (the chain is written at 1.0.0)."""
    with open(os.path.join(CORPUS, corpus_file)) as fh:
        entry = json.load(fh)
    tuning = isolate_conflist(entry, lab.workdir)  # adds a private dataDir, nothing else
    tuning.pop("name")
    conf = ConfList.from_dict({"cniVersion": "1.0.0", "name": entry["name"], "plugins": [bridge_entry(lab), tuning]})
    runtime = make_runtime([plugin_dir, reference_dir])
    pod = lab.netns("pod")
    before_somaxconn = sysctl(lab, pod, "net.core.somaxconn")
    att = Attachment("corpus-tuning", pod, "eth0")
    res = runtime.add(conf, att)
    state = link_state(lab, pod)
    if "sysctl" in entry:
        assert sysctl(lab, pod, "net.core.somaxconn") == "500"
        assert sysctl(lab, pod, "net.ipv4.conf.IFNAME.arp_filter") == "1"
    else:
        assert state == {"mac": "c2:b0:57:49:47:f1", "mtu": 1454, "promisc": True, "allmulti": True, "txQLen": state["txQLen"]}
        eth0 = next(i for i in res["interfaces"] if i["name"] == "eth0")
        assert eth0["mac"] == "c2:b0:57:49:47:f1"
    gw = res["ips"][0]["gateway"]
    assert lab.run(pod, "ping", "-c1", "-W2", gw, check=False).returncode == 0
    runtime.check(conf, att)
    runtime.delete(conf, att)
    runtime.delete(conf, att)
    assert "eth0" not in lab.run(pod, "ip", "-o", "link").stdout
    assert sysctl(lab, pod, "net.core.somaxconn") == before_somaxconn
    assert backups(lab) == []


def test_corpus_podman_bare_tuning(lab, make_runtime, plugin_dir, reference_dir):
    """podman's conflist ends with ``{"type": "tuning"}``: a pure pass-through (single: the file
    carries its own cniVersion)."""
    with open(os.path.join(CORPUS, "podman-87-podman-bridge.conflist")) as fh:
        data = isolate_conflist(json.load(fh), lab.workdir)
    data["plugins"] = [p for p in data["plugins"] if p["type"] != "firewall"]
    data["plugins"][-1].pop("dataDir")  # keep the entry exactly as written: it has no keys
    assert data["plugins"][-1] == {"type": "tuning"}
    conf = ConfList.from_dict(data)
    runtime = make_runtime([plugin_dir, reference_dir])
    pod = lab.netns("pod")
    att = Attachment("corpus-podman", pod, "eth0", capability_args={"portMappings": []})
    res = runtime.add(conf, att)
    assert res["cniVersion"] == "0.4.0" and res["ips"][0]["address"].startswith("10.88.")
    tuned = runtime.exec_plugin("tuning", "ADD", att, runtime.plugin_config(conf, conf.plugins[-1], att, res))
    assert json.loads(tuned) == res
    assert lab.run(pod, "ping", "-c1", "-W2", "10.88.0.1", check=False).returncode == 0
    runtime.exec_plugin("tuning", "CHECK", att, runtime.plugin_config(conf, conf.plugins[-1], att, res))
    runtime.delete(conf, att)
    runtime.delete(conf, att)


@pytest.mark.parametrize("cni_version", [v for v in CHAINING_VERSIONS if v in REFERENCE_PLUGIN_VERSIONS])
def test_host_device_gets_its_attributes_back(lab, make_runtime, plugin_dir, reference_dir, cni_version):
    """The case the backup exists for (upstream #493): a device that outlives the pod.  From 0.3.0
    (an address-less attachment has no 0.1/0.2 result) to 1.0.0 (Debian's host-device stops there)."""
    # no dummy module on every kernel: one end of a veth pair plays the physical device
    lab.run(lab.node, "ip", "link", "add", "hd0", "address", "02:00:00:00:0d:01", "type", "veth", "peer", "name", "hd0p")
    original = link_state(lab, lab.node, "hd0")
    tuning = {"type": "tuning", "mac": "02:00:00:00:0d:99", "mtu": 1400, "promisc": True, "allmulti": True,
              "txQLen": 77, "sysctl": {"net.ipv4.conf.IFNAME.arp_filter": "1"}, "dataDir": lab.path("tuning")}
    conf = ConfList.from_dict({"cniVersion": cni_version, "name": "hdnet",
                               "plugins": [{"type": "host-device", "device": "hd0"}, tuning]})
    runtime = make_runtime([plugin_dir, reference_dir])
    pod = lab.netns("pod")
    att = Attachment("hd-ctr", pod, "eth0")
    res = runtime.add(conf, att)
    assert res["interfaces"][0]["mac"] == "02:00:00:00:0d:99"
    assert link_state(lab, pod) == {"mac": "02:00:00:00:0d:99", "mtu": 1400, "promisc": True, "allmulti": True, "txQLen": 77}
    check_as_runtime(runtime, conf, att)
    runtime.delete(conf, att)
    assert link_state(lab, lab.node, "hd0") == original
    assert backups(lab) == []
    # a second DEL of tuning alone (the reference host-device 1.1.1 fails a repeated DEL itself)
    runtime.exec_plugin("tuning", "DEL", att, runtime.plugin_config(conf, conf.plugins[1], att, res))
