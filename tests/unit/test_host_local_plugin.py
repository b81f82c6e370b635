"""host-local through the skeleton in-process: results per version, store format, DEL/CHECK/GC/STATUS."""

from __future__ import annotations

import os
import stat

import pytest

from cnichain.common.version import parse as parse_version
from cnichain.plugins.host_local.plugin import PLUGIN
from cnichain.plugins.host_local.kernel import TEMP_PREFIX
from tests import required
from tests.helpers import dispatch


def conf(data_dir, version="1.0.0", ranges=None, **ipam):
    ipam = {"type": "host-local", "dataDir": str(data_dir), **ipam}
    ipam.setdefault("ranges", ranges or [[{"subnet": "10.1.0.0/24"}]])
    return {"cniVersion": version, "name": "net1", "ipam": ipam}


def netdir(tmp_path):
    return tmp_path / "net1"


def test_add_result_in_every_version(tmp_path, cni_version):
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("# c\nnameserver 1.1.1.1\nsearch a b\noptions ndots:2\ndomain ex\n")
    ranges = [[{"subnet": "10.1.0.0/24"}]]
    if parse_version(cni_version) >= (0, 3, 0):
        ranges.append([{"subnet": "fd00::/64"}])
    c = conf(tmp_path, cni_version, ranges, routes=[{"dst": "0.0.0.0/0"}], resolvConf=str(resolv))
    code, out = dispatch(PLUGIN, "ADD", c)
    assert code == 0, out
    assert out["cniVersion"] == cni_version
    dns = {"nameservers": ["1.1.1.1"], "domain": "ex", "search": ["a", "b"], "options": ["ndots:2"]}
    if parse_version(cni_version) < (0, 3, 0):
        assert out["ip4"] == {"ip": "10.1.0.2/24", "gateway": "10.1.0.1", "routes": [{"dst": "0.0.0.0/0"}]}
        assert "ips" not in out
    else:
        ips = out["ips"]
        assert [i["address"] for i in ips] == ["10.1.0.2/24", "fd00::2/64"]
        assert all("interface" not in i for i in ips) and "interfaces" not in out
        if parse_version(cni_version) < (1, 0, 0):
            assert [i["version"] for i in ips] == ["4", "6"]
        else:
            assert all("version" not in i for i in ips)
        assert out["routes"] == [{"dst": "0.0.0.0/0"}]
    assert out["dns"] == dns


def test_pre_030_refuses_two_addresses_per_family(tmp_path):
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path, "0.2.0", [[{"subnet": "10.1.0.0/24"}], [{"subnet": "10.2.0.0/24"}]]))
    assert code == 1 and out == {"code": 999, "msg": "CNI version 0.2.0 does not support more than 1 address per family"}


def test_store_layout_and_modes(tmp_path):
    code, _ = dispatch(PLUGIN, "ADD", conf(tmp_path), CNI_CONTAINERID="abc")
    assert code == 0
    d = netdir(tmp_path)
    assert sorted(os.listdir(d)) == ["10.1.0.2", "last_reserved_ip.0", "lock"]
    assert (d / "10.1.0.2").read_bytes() == b"abc\r\neth0"
    assert (d / "last_reserved_ip.0").read_bytes() == b"10.1.0.2"
    for name in os.listdir(d):
        assert stat.S_IMODE(os.stat(d / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755


def test_requested_ip_from_cni_args(tmp_path):
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path), CNI_ARGS="IgnoreUnknown=1;IP=10.1.0.77")
    assert code == 0 and out["ips"][0]["address"] == "10.1.0.77/24"


def test_resolvconf_missing(tmp_path):
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path, resolvConf="/nonexistent/r"))
    assert code == 1 and out["msg"] == "open /nonexistent/r: no such file or directory"
    assert out["code"] == 999


def test_del_releases_and_is_idempotent(tmp_path):
    c = conf(tmp_path)
    dispatch(PLUGIN, "ADD", c, CNI_CONTAINERID="a")
    dispatch(PLUGIN, "ADD", c, CNI_CONTAINERID="b")
    assert dispatch(PLUGIN, "DEL", c, CNI_CONTAINERID="a") == (0, None)
    assert dispatch(PLUGIN, "DEL", c, CNI_CONTAINERID="a") == (0, None)
    assert sorted(os.listdir(netdir(tmp_path))) == ["10.1.0.3", "last_reserved_ip.0", "lock"]


def test_del_without_any_state_succeeds_and_creates_nothing(tmp_path):
    assert dispatch(PLUGIN, "DEL", conf(tmp_path), CNI_NETNS="") == (0, None)
    assert not netdir(tmp_path).exists()


def test_del_with_broken_config_fails_like_reference(tmp_path):
    code, out = dispatch(PLUGIN, "DEL", {"cniVersion": "1.0.0", "name": "net1"})
    assert code == 1 and out["msg"] == "IPAM config missing 'ipam' key"
    assert out["code"] == 999


def test_del_legacy_id_only_file(tmp_path):
    d = netdir(tmp_path)
    d.mkdir()
    (d / "10.1.0.9").write_text("ctr1")
    (d / "10.1.0.10").write_text("other")
    assert dispatch(PLUGIN, "DEL", conf(tmp_path))[0] == 0
    assert sorted(os.listdir(d)) == ["10.1.0.10", "lock"]


def test_del_only_matching_ifname(tmp_path):
    c = conf(tmp_path)
    dispatch(PLUGIN, "ADD", c, CNI_IFNAME="eth0")
    dispatch(PLUGIN, "ADD", c, CNI_IFNAME="net1")
    dispatch(PLUGIN, "DEL", c, CNI_IFNAME="eth0")
    assert (netdir(tmp_path) / "10.1.0.3").read_bytes() == b"ctr1\r\nnet1"
    assert not (netdir(tmp_path) / "10.1.0.2").exists()


def test_check(tmp_path):
    c = conf(tmp_path)
    code, out = dispatch(PLUGIN, "CHECK", c)
    assert code == 1 and out["msg"] == "host-local: Failed to find address added by container ctr1"
    assert out["code"] == 999
    dispatch(PLUGIN, "ADD", c)
    assert dispatch(PLUGIN, "CHECK", c) == (0, None)


def test_stale_empty_reservation_is_reclaimed(tmp_path):
    """The reference, killed between O_EXCL create and write, leaves an empty file."""
    d = netdir(tmp_path)
    d.mkdir()
    (d / "10.1.0.2").write_bytes(b"")
    (d / f"{TEMP_PREFIX}999-deadbeef").write_bytes(b"ctr9\r\neth0")
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path))
    assert code == 0 and out["ips"][0]["address"] == "10.1.0.2/24"
    assert (d / "10.1.0.2").read_bytes() == b"ctr1\r\neth0"
    assert not any(n.startswith(TEMP_PREFIX) for n in os.listdir(d))


def test_garbled_reservation_is_not_stolen(tmp_path):
    d = netdir(tmp_path)
    d.mkdir()
    (d / "10.1.0.2").write_bytes(b"\xff\xfe junk")
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path))
    assert code == 0 and out["ips"][0]["address"] == "10.1.0.3/24"


def test_gc_keeps_valid_and_drops_the_rest(tmp_path):
    c = conf(tmp_path, "1.1.0")
    for cid, ifn in [("a", "eth0"), ("b", "eth0"), ("b", "net1")]:
        assert dispatch(PLUGIN, "ADD", c, CNI_CONTAINERID=cid, CNI_IFNAME=ifn)[0] == 0
    d = netdir(tmp_path)
    (d / "10.1.0.50").write_text("legacy")
    (d / "10.1.0.51").write_text("")
    gc = dict(c, **{"cni.dev/valid-attachments": [{"containerID": "b", "ifname": "net1"}, {"containerID": "legacy", "ifname": "eth0"}]})
    assert dispatch(PLUGIN, "GC", gc) == (0, None)
    assert sorted(os.listdir(d)) == ["10.1.0.4", "10.1.0.50", "last_reserved_ip.0", "lock"]


def test_gc_needs_110(tmp_path):
    code, out = dispatch(PLUGIN, "GC", conf(tmp_path, "1.0.0"))
    assert code == 1 and out["code"] == 1


def test_full_range_keeps_status_ok_and_fails_the_next_add(tmp_path):
    """Exhaustion is one pod's failure, not the node's: STATUS stays 0 (containerd 2.1+ would
    otherwise mark the node NotReady and evict every pod), the next ADD carries the error."""
    c = conf(tmp_path, "1.1.0", [[{"subnet": "10.1.0.0/30"}], [{"subnet": "fd00::/64"}]])
    assert dispatch(PLUGIN, "ADD", c)[0] == 0
    assert dispatch(PLUGIN, "STATUS", c) == (0, None)
    code, out = dispatch(PLUGIN, "ADD", c, CNI_CONTAINERID="second")
    assert code == 1 and "no IP addresses available in range set: 10.1.0.1-10.1.0.2" in out["msg"], out
    assert dispatch(PLUGIN, "STATUS", c) == (0, None)
    assert sorted(os.listdir(netdir(tmp_path))) == sorted(["10.1.0.2", "fd00::2", "last_reserved_ip.0",
                                                             "last_reserved_ip.1", "lock"])  # probe left nothing


def test_status_ok_on_a_fresh_node_creates_nothing(tmp_path):
    c = conf(tmp_path / "not-yet", "1.1.0")
    assert dispatch(PLUGIN, "STATUS", c) == (0, None)
    assert not (tmp_path / "not-yet").exists()


def test_status_reads_only_the_data_dir(tmp_path, monkeypatch):
    """Keys STATUS does not need never fail it, however wrong (ADD reports those)."""
    c = conf(tmp_path, "1.1.0", [[{"subnet": "not-a-subnet"}]], routes="bad", resolvConf=7)
    assert dispatch(PLUGIN, "STATUS", c) == (0, None)
    c["ipam"] = "nonsense"  # not even an object: the default dataDir is probed
    from cnichain.plugins.host_local import config as hl_config

    monkeypatch.setattr(hl_config, "DEFAULT_DATA_DIR", str(tmp_path / "default"))
    assert dispatch(PLUGIN, "STATUS", c) == (0, None)  # creatable: its parent is a writable dir
    (tmp_path / "default").write_text("x")  # now the default is a file: the probe must find it
    code, out = dispatch(PLUGIN, "STATUS", c)
    assert code == 1 and out["code"] == 50 and f"{tmp_path / 'default'} is not a directory" in out["msg"], out


def test_status_fails_on_an_unwritable_store(tmp_path):
    """A store of mode 0500, probed by the plugin as a process.  Root writes through any mode with
    CAP_DAC_OVERRIDE, so as root the plugin runs without it (setpriv), as an owner like any other."""
    import json
    import subprocess
    import sys

    netdir(tmp_path).mkdir()
    netdir(tmp_path).chmod(0o500)
    argv = [sys.executable, "-m", "cnichain.plugins.host_local"]
    if os.geteuid() == 0:
        caps = "-dac_override,-dac_read_search"
        argv = [required.command("setpriv", "util-linux"), f"--bounding-set={caps}", f"--inh-caps={caps}", *argv]
    try:
        proc = subprocess.run(argv, input=json.dumps(conf(tmp_path, "1.1.0")).encode(), capture_output=True,
                              env={**os.environ, "CNI_COMMAND": "STATUS", "CNI_PATH": "/nonexistent"}, timeout=60)
    finally:
        netdir(tmp_path).chmod(0o700)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["code"] == 50 and "not writable (Permission denied)" in out["msg"], out
    assert os.listdir(netdir(tmp_path)) == []  # the probe left nothing


def test_status_fails_when_the_store_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out = dispatch(PLUGIN, "STATUS", conf(blocker / "dir", "1.1.0"))
    assert code == 1 and out["code"] == 50, out
    assert out["msg"].startswith("host-local: cannot store IP reservations: ") and "is not a directory" in out["msg"]
    assert "ipam.dataDir" in out["msg"]  # what to fix


@pytest.mark.parametrize("cid", ["../x", "a/b", ".hidden"])
def test_bad_container_ids_rejected_by_skel(tmp_path, cid):
    code, out = dispatch(PLUGIN, "ADD", conf(tmp_path), CNI_CONTAINERID=cid)
    assert code == 1 and out["code"] == 4
    assert not netdir(tmp_path).exists()
