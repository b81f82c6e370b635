"""bridge handlers in-process where no kernel is needed, and the import budget."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from cnichain.plugins.bridge.plugin import PLUGIN
from tests.helpers import dispatch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def conf(version, **keys):
    base = {"cniVersion": version, "name": "net", "type": "bridge"}
    base.update(keys)
    return base


def test_version():
    code, out = dispatch(PLUGIN, "VERSION")
    assert code == 0 and "1.0.0" in out["supportedVersions"]


def test_config_error_is_json_in_every_version(cni_version):
    code, out = dispatch(PLUGIN, "ADD", conf(cni_version, hairpinMode=True, promiscMode=True))
    assert code == 1
    assert out == {"code": 999, "msg": "cannot set hairpin mode and promiscuous mode at the same time"}


def test_add_with_missing_netns_fails_before_touching_anything(cni_version):
    code, out = dispatch(PLUGIN, "ADD", conf(cni_version), CNI_NETNS="/run/netns/cnichain-unit-none")
    assert code == 1 and "failed to open netns" in out["msg"]
    assert out["code"] == 8


def test_del_without_netns_ipam_or_rules_is_a_noop(cni_version):
    code, out = dispatch(PLUGIN, "DEL", conf(cni_version), CNI_NETNS="")
    assert (code, out) == (0, None)
    code, out = dispatch(PLUGIN, "DEL", conf(cni_version), CNI_NETNS="/run/netns/cnichain-unit-none")
    assert (code, out) == (0, None)


def test_check_requires_prev_result():
    code, out = dispatch(PLUGIN, "CHECK", conf("1.0.0"))
    assert code == 1 and out["msg"] == "Required prevResult missing"
    assert out["code"] == 999


def test_status_and_gc_without_ipam_are_silent():
    assert dispatch(PLUGIN, "STATUS", conf("1.1.0")) == (0, None)
    assert dispatch(PLUGIN, "GC", conf("1.1.0", **{"cni.dev/valid-attachments": []})) == (0, None)


def _fake_ipam(tmp_path, fail_status=False):
    """An IPAM plugin that records which commands it got."""
    log = tmp_path / "calls"
    script = tmp_path / "fake-ipam"
    body = f"""\
        #!{sys.executable}
        import os, sys, json
        sys.stdin.read()
        with open({str(log)!r}, "a") as fh:
            fh.write(os.environ["CNI_COMMAND"] + "\\n")
        if os.environ["CNI_COMMAND"] == "STATUS" and {fail_status!r}:
            print(json.dumps({{"code": 50, "msg": "pool exhausted"}}))
            sys.exit(1)
        """
    script.write_text(textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(tmp_path), log


def test_status_and_gc_delegate_to_ipam(tmp_path):
    path, log = _fake_ipam(tmp_path)
    c = conf("1.1.0", ipam={"type": "fake-ipam"}, **{"cni.dev/valid-attachments": []})
    assert dispatch(PLUGIN, "STATUS", c, CNI_PATH=path) == (0, None)
    assert dispatch(PLUGIN, "GC", c, CNI_PATH=path) == (0, None)
    assert log.read_text().split() == ["STATUS", "GC"]


def test_status_fails_when_the_ipam_plugin_is_missing(tmp_path):
    code, out = dispatch(PLUGIN, "STATUS", conf("1.1.0", ipam={"type": "host-local"}), CNI_PATH=str(tmp_path))
    assert code == 1 and out["code"] == 50, out
    assert out["msg"].startswith('bridge: failed to find plugin "host-local" in path') and "install" in out["msg"]


def test_status_ignores_keys_it_does_not_need(tmp_path):
    """A config ADD would refuse still passes STATUS: only ipam.type/ipMasq/macspoofchk are read."""
    path, log = _fake_ipam(tmp_path)
    c = conf("1.1.0", ipam={"type": "fake-ipam"}, mtu="big", vlan=99999, hairpinMode=True, promiscMode=True,
             ipMasq="yes")
    assert dispatch(PLUGIN, "STATUS", c, CNI_PATH=path) == (0, None)
    assert log.read_text().split() == ["STATUS"]


def test_status_failure_of_ipam_is_reported(tmp_path):
    path, _ = _fake_ipam(tmp_path, fail_status=True)
    code, out = dispatch(PLUGIN, "STATUS", conf("1.1.0", ipam={"type": "fake-ipam"}), CNI_PATH=path)
    assert code == 1 and out == {"code": 50, "msg": "pool exhausted"}


def test_del_delegates_ipam_even_without_netns(tmp_path):
    path, log = _fake_ipam(tmp_path)
    code, _ = dispatch(PLUGIN, "DEL", conf("1.0.0", ipam={"type": "fake-ipam"}), CNI_NETNS="", CNI_PATH=path)
    assert code == 0 and log.read_text().split() == ["DEL"]


@pytest.mark.parametrize(
    "command,extra_env",
    [("VERSION", {}), ("ADD", {"CNI_NETNS": "/run/netns/cnichain-unit-none"}), ("DEL", {"CNI_NETNS": ""})],
)
def test_hot_path_imports(command, extra_env):
    """VERSION, error paths and no-op DEL never load pyroute2, nftables, typer or logging."""
    probe = textwrap.dedent(
        f"""
        import io, json, sys
        from cnichain.common import skel
        from cnichain.plugins.bridge.plugin import PLUGIN
        env = {{"CNI_COMMAND": {command!r}, "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0",
               "CNI_PATH": "/nonexistent"}}
        env.update({extra_env!r})
        skel.dispatch(PLUGIN, env, json.dumps({{"cniVersion": "1.0.0", "name": "n"}}).encode(),
                      io.StringIO(), io.StringIO())
        bad = sorted(m for m in ("pyroute2", "nftables", "typer", "click", "logging", "cnichain.cli")
                     if m in sys.modules)
        print(",".join(bad))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT)  # the checkout: cnichain/ links to common/, plugins/, cli/
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("keys", [
    {"hairpinMode": True, "promiscMode": True},
    {"ipMasq": True, "ipMasqBackend": "pf"},
    {"vlan": 10, "isGateway": True},
    {"ipMasqBackend": "iptables"},
])
def test_configs_the_reference_accepts_never_fail_del_status_gc(keys):
    assert dispatch(PLUGIN, "DEL", conf("1.1.0", **keys), CNI_NETNS="") == (0, None)
    assert dispatch(PLUGIN, "STATUS", conf("1.1.0", **keys)) == (0, None)
    assert dispatch(PLUGIN, "GC", conf("1.1.0", **keys, **{"cni.dev/valid-attachments": []})) == (0, None)


def test_del_of_an_undecodable_config_removes_by_tag(capfd):
    code, out = dispatch(PLUGIN, "DEL", conf("1.0.0", mtu="1500"), CNI_NETNS="")
    assert (code, out) == (0, None)
    assert "removing every rule kind by tag" in capfd.readouterr().err
    assert dispatch(PLUGIN, "ADD", conf("1.0.0", mtu="1500"))[0] == 1
