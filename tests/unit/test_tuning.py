"""tuning without a kernel: config parsing and precedence, key safety, allowlist, backup files, and
the handlers' no-netns paths (missing prevResult, no-op configs, DEL without state)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from cnichain.common.errors import CniError, Code
from cnichain.common.types import Result
from cnichain.plugins.tuning import backup, config, kernel
from cnichain.plugins.tuning.config import (
    TuningConfig,
    check_allowlist,
    check_duplicate_sysctl_keys,
    load,
    parse_mac,
    read_allowlist,
    resolve_sysctl,
)
from cnichain.plugins.tuning.plugin import PLUGIN
from tests.helpers import dispatch
from tests.specver import ips_carry_version, result_has_interfaces

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def prev_for(version: str) -> dict:
    """A previous result in ``version``'s own shape."""
    if not result_has_interfaces(version):
        return {"cniVersion": version, "ip4": {"ip": "10.1.0.5/24", "gateway": "10.1.0.1"}}
    return {
        "cniVersion": version,
        "interfaces": [{"name": "cni0", "mac": "0a:00:00:00:00:01"}, {"name": "eth0", "mac": "0a:00:00:00:00:02", "sandbox": "/var/run/netns/x"}],
        "ips": [{"address": "10.1.0.5/24", "gateway": "10.1.0.1", "interface": 1, **({"version": "4"} if ips_carry_version(version) else {})}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.1.0.1"]},
    }


# -- config -----------------------------------------------------------------------------------


def test_defaults():
    cfg = load({"name": "n", "type": "tuning"})
    assert cfg == TuningConfig()
    assert cfg.data_dir == "/run/cni/tuning"
    assert not cfg.changes_link


def test_all_keys():
    cfg = load({"sysctl": {"net.core.somaxconn": "500"}, "mac": "C2:B0:57:49:47:F1", "mtu": 1454,
                "promisc": True, "allmulti": False, "txQLen": 200, "dataDir": "/tmp/t/"})
    assert cfg.sysctl == (("net.core.somaxconn", "500"),)
    assert cfg.mac == "c2:b0:57:49:47:f1"
    assert (cfg.mtu, cfg.promisc, cfg.allmulti, cfg.txqlen, cfg.data_dir) == (1454, True, False, 200, "/tmp/t")
    assert cfg.changes_link


def test_mac_precedence():
    conf = {"mac": "02:00:00:00:00:01"}
    assert load(conf).mac == "02:00:00:00:00:01"
    assert load(conf, "IgnoreUnknown=1;MAC=02:00:00:00:00:02;K8S_POD_NAME=x").mac == "02:00:00:00:00:02"
    conf["runtimeConfig"] = {"mac": "02:00:00:00:00:03"}
    assert load(conf, "MAC=02:00:00:00:00:02").mac == "02:00:00:00:00:03"
    conf["args"] = {"cni": {"mac": "02:00:00:00:00:04"}}
    assert load(conf, "MAC=02:00:00:00:00:02").mac == "02:00:00:00:00:04"


def test_args_cni_overrides_and_sysctl_merge():
    conf = {"sysctl": {"net.core.somaxconn": "500", "net.ipv4.ip_forward": "0"}, "promisc": True, "mtu": 1400,
            "args": {"cni": {"sysctl": {"net.core.somaxconn": "600", "net.ipv4.tcp_syncookies": "1"},
                             "promisc": False, "mtu": 9000, "allmulti": True, "txQLen": 10}}}
    cfg = load(conf)
    assert dict(cfg.sysctl) == {"net.core.somaxconn": "600", "net.ipv4.ip_forward": "0", "net.ipv4.tcp_syncookies": "1"}
    assert (cfg.promisc, cfg.mtu, cfg.allmulti, cfg.txqlen) == (False, 9000, True, 10)


def test_args_cni_sysctl_without_config_sysctl():
    # the reference panics here (assignment to a nil map)
    assert load({"args": {"cni": {"sysctl": {"net.core.somaxconn": "1"}}}}).sysctl == (("net.core.somaxconn", "1"),)


def test_args_without_cni_and_unknown_cni_args_keys():
    assert load({"args": {"other": 1}}) == TuningConfig()
    with pytest.raises(CniError) as info:
        load({}, "FOO=1")
    assert (info.value.code, info.value.msg) == (Code.INTERNAL, 'ARGS: unknown args ["FOO=1"]')


@pytest.mark.parametrize(
    "conf,msg,code",
    [
        ({"mtu": "1500"}, "failed to load netconf: json: cannot unmarshal string into Go struct field TuningConf.mtu of type int", Code.INTERNAL),
        ({"promisc": "yes"}, "cannot unmarshal string into Go struct field TuningConf.promisc of type bool", Code.INTERNAL),
        ({"sysctl": {"net.core.somaxconn": 500}}, "cannot unmarshal number into Go struct field TuningConf.sysctl of type string", Code.INTERNAL),
        ({"sysctl": ["a"]}, "cannot unmarshal array into Go struct field TuningConf.sysctl of type map", Code.INTERNAL),
        ({"mac": 5}, "cannot unmarshal number into Go struct field TuningConf.mac of type string", Code.INTERNAL),
        ({"args": {"cni": {"mtu": True}}}, "cannot unmarshal bool into Go struct field IPAMArgs.args.cni.mtu of type int", Code.INTERNAL),
        ({"mac": "zz:zz"}, "invalid args zz:zz for MAC addr: address zz:zz: invalid MAC address", Code.INTERNAL),
        ({"mac": "01:00:5e:00:00:01"}, "is not a unicast address", Code.INTERNAL),
        ({"mtu": -1}, "invalid mtu -1", Code.INVALID_NETWORK_CONFIG),
        ({"txQLen": -5}, "invalid txQLen -5", Code.INVALID_NETWORK_CONFIG),
        ({"dataDir": "relative/dir"}, 'invalid dataDir "relative/dir"', Code.INVALID_NETWORK_CONFIG),
    ],
)
def test_bad_values(conf, msg, code):
    """Go's decoding errors are code 999 (as the reference reports them); range checks are 7."""
    with pytest.raises(CniError) as info:
        load(conf)
    assert info.value.code == code and msg in info.value.msg


@pytest.mark.parametrize(
    "text,expected",
    [
        ("c2:b0:57:49:47:f1", "c2:b0:57:49:47:f1"),
        ("C2-B0-57-49-47-F1", "c2:b0:57:49:47:f1"),
        ("c2b0.5749.47f1", "c2:b0:57:49:47:f1"),
    ],
)
def test_mac_forms(text, expected):
    assert config.format_mac(parse_mac(text)) == expected


# -- sysctl keys --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key,ifname,rel",
    [
        ("net.core.somaxconn", "eth0", "net/core/somaxconn"),
        ("net.ipv4.conf.IFNAME.arp_filter", "eth0", "net/ipv4/conf/eth0/arp_filter"),
        # dots in the interface name stay inside one segment (VLAN names)
        ("net.ipv4.conf.IFNAME.rp_filter", "eth0.100", "net/ipv4/conf/eth0.100/rp_filter"),
        # only the first IFNAME is replaced, as the reference
        ("net.ipv6.conf.IFNAME.IFNAME", "net1", "net/ipv6/conf/net1/IFNAME"),
    ],
)
def test_resolve_sysctl(key, ifname, rel):
    s = resolve_sysctl(key, "1", ifname)
    assert s.rel == rel and s.path == "/proc/sys/" + rel


@pytest.mark.parametrize(
    "key",
    ["", "net", "net.", "kernel.hostname", "net.core.somaxconn\0", "netfilter.x", "NET.core.x", "/kernel/x"],
)
def test_unsafe_keys_are_refused(key):
    with pytest.raises(CniError) as info:
        resolve_sysctl(key, "1", "eth0")
    assert info.value.code == Code.INVALID_NETWORK_CONFIG
    assert "invalid net sysctl key" in info.value.msg


@pytest.mark.parametrize(
    "key,rel",
    [
        # the reference turns dots into slashes and cleans the path: slash-form keys work there
        ("net/ipv4/conf/IFNAME/arp_filter", "net/ipv4/conf/eth0/arp_filter"),
        ("net/core/somaxconn", "net/core/somaxconn"),
        ("/net/core/somaxconn", "net/core/somaxconn"),
        ("net..core", "net/core"),
        # no ".." survives the dot replacement, so nothing climbs out of /proc/sys/net
        ("net.ipv4.conf.eth0/../../../kernel.x", "net/ipv4/conf/eth0/kernel/x"),
    ],
)
def test_keys_the_reference_accepts(key, rel):
    assert resolve_sysctl(key, "1", "eth0").rel == rel


def test_valid_rel_path():
    assert config.valid_rel_path("net/core/somaxconn")
    for bad in ("", "kernel/x", "net/../kernel", "net//x", "/net/x", "net"):
        assert not config.valid_rel_path(bad)


# -- duplicates and allowlist -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,dup",
    [
        ('{"sysctl": {"a": "1", "b": "2"}}', False),
        ('{"sysctl": {"a": "1", "a": "2"}}', True),
        ('{"sysctl": {"a": "1"}, "sysctl": {"a": "2"}}', True),
        ('{"sysctl": {"a": "1"}, "args": {"cni": {"sysctl": {"a": "2"}}}}', False),
        ('{"other": {"a": "1", "a": "2"}}', False),
    ],
)
def test_duplicate_keys(text, dup):
    if dup:
        with pytest.raises(CniError) as info:
            check_duplicate_sysctl_keys(text.encode())
        assert (info.value.code, info.value.msg) == (Code.INTERNAL, "duplicated sysctl keys are not allowed")
    else:
        check_duplicate_sysctl_keys(text.encode())


def test_allowlist(tmp_path):
    path = tmp_path / "allowlist.conf"
    assert read_allowlist(str(path)) is None
    path.write_text("^net\\.core\\.somaxconn$\n\n  ^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]+$  \n")
    allow = read_allowlist(str(path))
    assert allow == ["^net\\.core\\.somaxconn$", "^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]+$"]
    check_allowlist(load({"sysctl": {"net.core.somaxconn": "1", "net.ipv4.conf.IFNAME.arp_filter": "1"}}), allow)
    with pytest.raises(CniError) as info:
        check_allowlist(load({"sysctl": {"net.ipv4.ip_forward": "1"}}), allow)
    assert info.value.code == Code.INTERNAL and info.value.msg == (
        "Sysctl net.ipv4.ip_forward is not allowed. Only the following sysctls are allowed: "
        "[^net\\.core\\.somaxconn$ ^net\\.ipv4\\.conf\\.IFNAME\\.[a-z_]+$]"
    )
    # unanchored match, as the reference's regexp.MatchString
    check_allowlist(load({"sysctl": {"net.core.somaxconn": "1"}}), ["somaxconn"])
    with pytest.raises(CniError) as info:
        check_allowlist(load({"sysctl": {"net.core.somaxconn": "1"}}), ["(unclosed"])
    assert info.value.code == Code.INTERNAL and info.value.msg.startswith("error parsing regexp")
    check_allowlist(load({}), [])  # an empty allowlist allows a config without sysctls


# -- backup files -------------------------------------------------------------------------------


def test_backup_save_is_root_only_and_atomic(tmp_path):
    path = backup.backup_path(str(tmp_path / "d"), "ctr1", "eth0")
    assert path.endswith("/d/ctr1_eth0.json")
    kernel.save_backup(path, {"mtu": 1500})
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert backup.load(path) == {"mtu": 1500}
    assert os.listdir(tmp_path / "d") == ["ctr1_eth0.json"]
    (tmp_path / "d" / "bad.json").write_text("{not json")
    assert backup.load(str(tmp_path / "d" / "bad.json")) == {}
    assert backup.load(str(tmp_path / "nope.json")) is None


def test_backup_file_names_name_their_attachment():
    assert backup.owner_of(os.path.basename(backup.backup_path("/d", "abc_123", "net1"))) == ("abc_123", "net1")
    assert [backup.owner_of(n) for n in ("noowner.json", "_eth0.json", "c_.json", "c_eth0.json.tmp")] == [None] * 4


def test_backup_reads_reference_files(tmp_path):
    # the reference writes MarshalIndent(configToRestore) with these keys
    ref = {"mac": "6a:34:ab:56:a3:46", "promisc": False, "mtu": 1500, "allmulti": False, "txQLen": 1000}
    path = tmp_path / "c_eth0.json"
    path.write_text(json.dumps(ref, indent=" "))
    assert backup.link_part(backup.load(str(path))) == ref


def test_backup_merge_keeps_first_originals():
    first = {"mtu": 1500, "sysctl": {"net/core/somaxconn": {"old": "4096", "new": "500"}}}
    second = {"mtu": 1454, "mac": "02:00:00:00:00:09", "sysctl": {"net/core/somaxconn": {"old": "500", "new": "600"},
                                                                  "net/ipv4/ip_forward": {"old": "0", "new": "1"}}}
    merged = backup.merge(first, second)
    assert merged["mtu"] == 1500 and merged["mac"] == "02:00:00:00:00:09"
    assert merged["sysctl"] == {"net/core/somaxconn": {"old": "4096", "new": "600"},
                                "net/ipv4/ip_forward": {"old": "0", "new": "1"}}
    assert backup.merge(first, {})["sysctl"] == first["sysctl"]


# -- handlers without a kernel --------------------------------------------------------------------


def conf_for(version, **keys):
    conf = {"cniVersion": version, "name": "tnet", "type": "tuning"}
    conf.update(keys)
    return conf


def test_add_requires_prev_result(cni_version):
    code, out = dispatch(PLUGIN, "ADD", conf_for(cni_version, sysctl={"net.core.somaxconn": "500"}))
    assert code == 1 and out["msg"] == "Required prevResult missing"
    assert out["code"] == 7


def test_add_without_keys_passes_prev_result_through(cni_version, tmp_path):
    prev = prev_for(cni_version)
    code, out = dispatch(PLUGIN, "ADD", conf_for(cni_version, prevResult=prev, dataDir=str(tmp_path)),
                         CNI_NETNS="/nonexistent/netns")
    assert code == 0
    assert out == Result.from_dict(prev, cni_version).to_dict(cni_version)
    assert os.listdir(tmp_path) == []


def test_bad_key_fails_before_entering_the_namespace(cni_version, tmp_path):
    conf = conf_for(cni_version, prevResult=prev_for(cni_version), dataDir=str(tmp_path / "d"), mtu=1400,
                    sysctl={"net.core.somaxconn": "500", "kernel.hostname": "x"})
    code, out = dispatch(PLUGIN, "ADD", conf, CNI_NETNS="/nonexistent/netns")
    assert code == 1 and out["code"] == Code.INVALID_NETWORK_CONFIG
    assert out["msg"].startswith('invalid net sysctl key: "kernel.hostname"')
    assert not (tmp_path / "d").exists()


def test_allowlist_is_enforced_on_add(monkeypatch, tmp_path):
    allow = tmp_path / "allowlist.conf"
    allow.write_text("^net\\.core\\.somaxconn$\n")
    monkeypatch.setattr(config, "ALLOWLIST_FILE", str(allow))
    conf = conf_for("1.0.0", prevResult=prev_for("1.0.0"), sysctl={"net.ipv4.ip_forward": "1"})
    code, out = dispatch(PLUGIN, "ADD", conf, CNI_NETNS="/nonexistent/netns")
    assert code == 1 and out["msg"].startswith("Sysctl net.ipv4.ip_forward is not allowed.")
    assert out["code"] == 999


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
def test_duplicate_keys_fail_add_and_check(command):
    raw = '{"cniVersion": "1.0.0", "name": "n", "type": "tuning", "sysctl": {"net.core.somaxconn": "1", "net.core.somaxconn": "2"}}'
    import io

    from cnichain.common import skel

    out = io.StringIO()
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    assert skel.dispatch(PLUGIN, env, raw.encode(), out, io.StringIO()) == 1
    assert json.loads(out.getvalue())["msg"] == "duplicated sysctl keys are not allowed"
    assert json.loads(out.getvalue())["code"] == 999


def test_check_requires_prev_result():
    code, out = dispatch(PLUGIN, "CHECK", conf_for("1.0.0", mtu=1400))
    assert code == 1 and out["msg"] == "Required prevResult missing"
    assert out["code"] == 7


def test_del_without_backup_is_a_noop(cni_version, tmp_path):
    for netns in ("/nonexistent/netns", ""):
        code, out = dispatch(PLUGIN, "DEL", conf_for(cni_version, dataDir=str(tmp_path), mtu=1400), CNI_NETNS=netns)
        assert (code, out) == (0, None)


def test_del_with_netns_gone_drops_the_backup(tmp_path):
    path = backup.backup_path(str(tmp_path), "ctr1", "eth0")
    kernel.save_backup(path, {"mtu": 1500})
    code, _ = dispatch(PLUGIN, "DEL", conf_for("1.0.0", dataDir=str(tmp_path)), CNI_NETNS="/nonexistent/netns")
    assert code == 0 and not os.path.exists(path)
    code, _ = dispatch(PLUGIN, "DEL", conf_for("1.0.0", dataDir=str(tmp_path)), CNI_NETNS="/nonexistent/netns")
    assert code == 0


def test_del_of_an_undecodable_config_still_looks_for_the_backup(tmp_path, capfd):
    code, out = dispatch(PLUGIN, "DEL", conf_for("1.0.0", mtu="x", dataDir=str(tmp_path)))
    assert (code, out) == (0, None)
    assert f"restoring from {tmp_path}" in capfd.readouterr().err


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_gc_and_status_are_silent(command):
    assert dispatch(PLUGIN, command, conf_for("1.1.0")) == (0, None)


def test_version_lists_all():
    code, out = dispatch(PLUGIN, "VERSION")
    assert out["supportedVersions"] == ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


@pytest.mark.parametrize(
    "command,keys",
    [("DEL", {"mtu": 1400}), ("ADD", {"sysctl": {"kernel.x": "1"}}), ("ADD", {}), ("VERSION", {})],
)
def test_cheap_paths_never_import_pyroute2(command, keys, tmp_path):
    """DEL without a backup, error paths and no-op ADDs run without loading pyroute2."""
    conf = conf_for("1.0.0", prevResult=prev_for("1.0.0"), dataDir=str(tmp_path), **keys)
    code = (
        "import sys\n"
        "from cnichain.plugins.tuning.__main__ import main\n"
        "rc = main()\n"
        "sys.stderr.write('LOADED=%s' % sorted(m for m in ('pyroute2', 'nftables', 'typer', 'logging') if m in sys.modules))\n"
    )
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/netns", "CNI_IFNAME": "eth0",
           "CNI_PATH": "/x", "PYTHONPATH": ROOT}  # the checkout (cnichain/ links)
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(conf).encode(), env=env,
                          capture_output=True, timeout=60)
    assert b"LOADED=[]" in proc.stderr, proc.stderr


@pytest.mark.parametrize("keys,skipped", [
    ({"dataDir": "relative/dir"}, "dataDir (no backup restored)"),
    ({"mtu": -1}, "mtu"),
    ({"mac": "not-a-mac"}, "mac"),
    ({"txQLen": -1}, "txQLen"),
])
def test_refused_at_add_only(keys, skipped, capfd):
    with pytest.raises(CniError):
        config.load(conf_for("1.0.0", **keys))
    cfg = config.load(conf_for("1.0.0", **keys), strict=False)
    assert cfg.skipped and cfg.skipped[0].startswith(skipped)
    assert dispatch(PLUGIN, "DEL", conf_for("1.0.0", **keys), CNI_NETNS="") == (0, None)
    assert "skipped what ADD would refuse" in capfd.readouterr().err
