"""The CNI contract every installed plugin keeps, run as real processes like a runtime runs them.

For each plugin and each supported spec version: VERSION output, the spec's error codes for bad
environment and bad config (as JSON on stdout, exit 1, never a traceback), and for the chained
meta-plugins with nothing to do: prevResult printed back unchanged in the config's version, and
DEL twice succeeding, also with the pod namespace gone.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cnichain.node.launchers import PLUGINS
from cnichain.common.types import Result
from cnichain.common.version import ALL, at_least

pytestmark = pytest.mark.integration

META = ["portmap", "bandwidth", "tuning", "route-override"]
MIN_VERSION = {"bandwidth": "0.3.0"}
PREV = {
    "cniVersion": "1.1.0",
    "interfaces": [
        {"name": "cni0", "mac": "02:00:00:00:00:01"},
        {"name": "vethdeadbeef", "mac": "02:00:00:00:00:02"},
        {"name": "eth0", "mac": "02:00:00:00:00:03", "sandbox": "SANDBOX"},
    ],
    "ips": [{"interface": 2, "address": "10.42.0.5/24", "gateway": "10.42.0.1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.42.0.1"}],
    "dns": {"nameservers": ["10.42.0.1"]},
}


def _run(plugin_dir: str, plugin: str, command: str, conf: object, lab=None, **env: str) -> tuple[int, str, str]:
    base = {"CNI_COMMAND": command, "CNI_CONTAINERID": "contract-1", "CNI_NETNS": env.pop("netns", "/run/netns/none"),
            "CNI_IFNAME": "eth0", "CNI_PATH": plugin_dir}
    base.update(env)
    stdin = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
    argv = [os.path.join(plugin_dir, plugin)]
    if lab is not None:
        argv = ["ip", "netns", "exec", os.path.basename(lab.node)] + argv
    proc = subprocess.run(argv, input=stdin, env=base, capture_output=True, timeout=60)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.parametrize("plugin", list(PLUGINS))
def test_version(plugin_dir, plugin):
    code, out, _ = _run(plugin_dir, plugin, "VERSION", b"")
    assert code == 0
    data = json.loads(out)
    assert data["cniVersion"] == "1.1.0"
    expected = [v for v in ALL if at_least(v, MIN_VERSION.get(plugin, "0.1.0"))]
    assert data["supportedVersions"] == expected


@pytest.mark.parametrize("plugin", list(PLUGINS))
@pytest.mark.parametrize(
    "case,env,stdin,code,msg",
    [
        ("missing-env", {"CNI_IFNAME": ""}, {"cniVersion": "1.0.0", "name": "n"}, 4, "required env variables [CNI_IFNAME] missing"),
        ("bad-cid", {"CNI_CONTAINERID": "../x"}, {"cniVersion": "1.0.0", "name": "n"}, 4, "invalid characters in containerID"),
        ("bad-json", {}, b"{not json", 6, "error unmarshall network config"),
        ("no-name", {}, {"cniVersion": "1.0.0"}, 7, "missing network name"),
        ("bad-version", {}, {"cniVersion": "7.0.0", "name": "n"}, 1, "incompatible CNI versions"),
        ("unknown-cmd", {"CNI_COMMAND": "FROB"}, {"cniVersion": "1.0.0", "name": "n"}, 4, "unknown CNI_COMMAND: FROB"),
    ],
)
def test_errors_are_cni_json(plugin_dir, plugin, case, env, stdin, code, msg):
    env = dict(env)  # the parameter dict is shared between runs
    command = env.pop("CNI_COMMAND", "ADD")
    rc, out, err = _run(plugin_dir, plugin, command, stdin, **env)
    assert rc == 1
    data = json.loads(out)
    assert data["code"] == code and data["msg"].startswith(msg)
    assert "Traceback" not in out + err


SUPPORTED = [(p, v) for p in META for v in ALL if at_least(v, MIN_VERSION.get(p, "0.1.0"))]
BELOW_MIN = [(p, v) for p in META for v in ALL if not at_least(v, MIN_VERSION.get(p, "0.1.0"))]


@pytest.mark.parametrize("plugin,cni_version", BELOW_MIN)
def test_meta_plugin_refuses_a_version_below_its_minimum(lab, plugin_dir, plugin, cni_version):
    conf = {"cniVersion": cni_version, "name": "contract", "type": plugin, "prevResult": PREV}
    code, out, err = _run(plugin_dir, plugin, "ADD", conf, lab=lab, netns=lab.netns("pod"))
    assert code == 1 and json.loads(out)["code"] == 1, out + err
    assert json.loads(out)["msg"].startswith("incompatible CNI versions"), out


@pytest.mark.parametrize("plugin,cni_version", SUPPORTED)
def test_meta_plugin_passes_prev_result_and_dels_twice(lab, plugin_dir, plugin, cni_version):
    pod = lab.netns("pod")
    # a real interface for the plugins that look at it
    lab.run(lab.node, "ip", "link", "add", "vethdeadbeef", "type", "veth", "peer", "name", "eth0", "netns", os.path.basename(pod))
    lab.run(pod, "ip", "addr", "add", "10.42.0.5/24", "dev", "eth0")
    lab.run(pod, "ip", "link", "set", "eth0", "up")
    lab.run(lab.node, "ip", "link", "set", "vethdeadbeef", "up")
    prev = json.loads(json.dumps(PREV).replace("SANDBOX", pod))
    prev_in_version = Result.from_dict(prev).to_dict(cni_version)
    conf = {"cniVersion": cni_version, "name": "contract", "type": plugin, "prevResult": prev_in_version}
    code, out, err = _run(plugin_dir, plugin, "ADD", conf, lab=lab, netns=pod)
    assert code == 0, out + err
    assert json.loads(out) == prev_in_version
    if at_least(cni_version, "0.4.0"):
        code, out, err = _run(plugin_dir, plugin, "CHECK", conf, lab=lab, netns=pod)
        assert code == 0, out + err
    for netns in (pod, pod, ""):
        code, out, err = _run(plugin_dir, plugin, "DEL", conf, lab=lab, netns=netns)
        assert code == 0, out + err
    lab.delete_netns(pod)
    code, out, err = _run(plugin_dir, plugin, "DEL", conf, lab=lab, netns=pod)
    assert code == 0, out + err
