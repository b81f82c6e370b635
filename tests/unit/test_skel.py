"""The skeleton's spec behaviour, driven in-process with injected env and streams."""

from __future__ import annotations

import io
import json

import pytest

from cnichain.common import skel
from cnichain.common.errors import CniError, Code
from cnichain.common.types import Result
from cnichain.common.version import ALL
from tests.helpers import dispatch

CALLS: list[str] = []


def _add(req: skel.Request):
    CALLS.append(req.command)
    prev = req.prev_result
    return prev if prev is not None else Result(ips=[])


def _del(req: skel.Request):
    CALLS.append(req.command)
    return None


def _boom(req: skel.Request):
    raise RuntimeError("kaboom")


PLUGIN = skel.Plugin(name="fake", add=_add, delete=_del, check=_del)
CONF = {"cniVersion": "1.0.0", "name": "net1", "type": "fake"}
PREV = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}]}


def test_version_output_is_compact_and_lists_all_versions():
    out = io.StringIO()
    code = skel.dispatch(PLUGIN, {"CNI_COMMAND": "VERSION"}, b"garbage", out, io.StringIO())
    assert code == 0
    assert out.getvalue() == json.dumps({"cniVersion": "1.1.0", "supportedVersions": list(ALL)}, separators=(",", ":")) + "\n"


def test_no_command_prints_about_to_stderr():
    out, err = io.StringIO(), io.StringIO()
    assert skel.dispatch(PLUGIN, {}, b"", out, err) == 0
    assert out.getvalue() == ""
    assert "CNI protocol versions supported: 0.1.0" in err.getvalue()


def test_unknown_command_is_code_4():
    code, out = dispatch(PLUGIN, "FROB", CONF)
    assert code == 1 and out == {"code": 4, "msg": "unknown CNI_COMMAND: FROB"}


@pytest.mark.parametrize("missing", ["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"])
def test_missing_env_named(missing):
    code, out = dispatch(PLUGIN, "ADD", CONF, **{missing: ""})
    assert code == 1
    assert out["code"] == 4 and out["msg"] == f"required env variables [{missing}] missing"


def test_del_does_not_need_netns():
    CALLS.clear()
    code, out = dispatch(PLUGIN, "DEL", CONF, CNI_NETNS="")
    assert code == 0 and out is None and CALLS == ["DEL"]


@pytest.mark.parametrize("cid", ["-bad", "a/b", "x y", "ä"])
def test_invalid_container_id(cid):
    code, out = dispatch(PLUGIN, "ADD", CONF, CNI_CONTAINERID=cid)
    assert out == {"code": 4, "msg": "invalid characters in containerID", "details": cid}


@pytest.mark.parametrize(
    "ifname,msg",
    [
        ("a" * 16, "interface name is too long"),
        ("..", "interface name is . or .."),
        ("a/b", "interface name contains / or : or whitespace characters"),
        ("a:b", "interface name contains / or : or whitespace characters"),
        ("a b", "interface name contains / or : or whitespace characters"),
    ],
)
def test_invalid_ifname(ifname, msg):
    code, out = dispatch(PLUGIN, "ADD", CONF, CNI_IFNAME=ifname)
    assert code == 1 and out["code"] == 4 and out["msg"] == msg


def test_bad_json_is_code_6():
    out = io.StringIO()
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    assert skel.dispatch(PLUGIN, env, b"{nope", out, io.StringIO()) == 1
    err = json.loads(out.getvalue())
    assert err["code"] == 6 and err["msg"].startswith("error unmarshall network config:")


@pytest.mark.parametrize("name,msg", [("", "missing network name"), ("bad name", "invalid characters found in network name")])
def test_network_name_checks(name, msg):
    code, out = dispatch(PLUGIN, "ADD", dict(CONF, name=name))
    assert out["code"] == 7 and out["msg"] == msg


def test_version_gate():
    code, out = dispatch(PLUGIN, "ADD", dict(CONF, cniVersion="9.9.9"))
    assert out["code"] == 1 and out["msg"] == "incompatible CNI versions"
    assert out["details"].startswith('config is "9.9.9", plugin supports ["0.1.0"')


@pytest.mark.parametrize("command,minimum", [("CHECK", "0.4.0"), ("GC", "1.1.0"), ("STATUS", "1.1.0")])
def test_command_minimum_version(command, minimum):
    code, out = dispatch(PLUGIN, command, dict(CONF, cniVersion="0.3.1"))
    assert out == {"code": 1, "msg": f"config version does not allow {command}"}
    code, out = dispatch(PLUGIN, command, dict(CONF, cniVersion="1.1.0"))
    assert code == 0 and out is None  # no GC/STATUS handler: silent success


def test_unexpected_exception_becomes_999_without_traceback():
    plugin = skel.Plugin(name="boom", add=_boom, delete=_boom)
    out = io.StringIO()
    env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c", "CNI_NETNS": "/x", "CNI_IFNAME": "eth0", "CNI_PATH": "/x"}
    assert skel.dispatch(plugin, env, json.dumps(CONF).encode(), out, io.StringIO()) == 1
    text = out.getvalue()
    assert "Traceback" not in text
    assert json.loads(text) == {"code": 999, "msg": "boom: unexpected error: kaboom", "details": "RuntimeError"}


def test_cni_error_printed_with_details():
    def fail(req):
        raise CniError(Code.TRY_AGAIN_LATER, "busy", "come back")

    code, out = dispatch(skel.Plugin(name="x", add=fail, delete=fail), "ADD", CONF)
    assert code == 1 and out == {"code": 11, "msg": "busy", "details": "come back"}


def test_prev_result_passthrough_in_each_version(cni_version):
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.1.0.5/16", "gateway": "10.1.0.1"}]}
    conf = dict(CONF, cniVersion=cni_version, prevResult=Result.from_dict(prev).to_dict(cni_version))
    code, out = dispatch(PLUGIN, "ADD", conf)
    assert code == 0
    assert out == Result.from_dict(prev).to_dict(cni_version)


def test_prev_result_without_version_takes_config_version():
    conf = dict(CONF, cniVersion="0.4.0", prevResult={"ips": [{"version": "4", "address": "10.0.0.2/24"}]})
    code, out = dispatch(PLUGIN, "ADD", conf)
    assert out["cniVersion"] == "0.4.0" and out["ips"][0]["address"] == "10.0.0.2/24"


def test_log_file_records_invocation(tmp_path):
    logfile = tmp_path / "cni.log"
    code, _ = dispatch(PLUGIN, "DEL", dict(CONF, log={"file": str(logfile), "level": "info"}))
    assert code == 0
    line = logfile.read_text()
    assert "DEL container=ctr1" in line and "elapsed_ms=" in line
    assert (logfile.stat().st_mode & 0o777) == 0o600


# A prevResult needs a config version: libcni looks up a result type for the config's version, and
# a config without cniVersion has the empty one.  The chained plugins must refuse such a config
# instead of answering with a 0.1.0 result.
CHAINED = ("portmap", "tuning", "route_override")


@pytest.mark.parametrize("module", CHAINED)
def test_prev_result_without_config_version_is_refused_on_add(module):
    import importlib

    plugin = importlib.import_module(f"cnichain.plugins.{module}.plugin").PLUGIN
    conf = {"name": "net", "type": module, "prevResult": {"ips": [{"address": "10.1.0.5/24"}]},
            "sysctl": {"net.core.somaxconn": "1024"}, "addroutes": [{"dst": "192.0.2.0/24"}],
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80}]}}
    code, out = dispatch(plugin, "ADD", conf)
    assert code == 1 and out["msg"].endswith('could not parse prevResult: unsupported CNI result version ""'), out
    assert out["code"] == 6
