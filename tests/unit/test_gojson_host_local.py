"""host-local's input decoded as Go's encoding/json decodes it into the reference's allocator.Net.

Tables over every key host-local reads (top level, ``ipam`` with the legacy single range,
``ranges``, ``routes``, ``runtimeConfig`` and ``args.cni``): Go field casing and camelCase parse to
the same record, ``null`` is the same as absent (except for a ``types.IPNet``, whose own
UnmarshalJSON refuses it), a wrong JSON type fails with Go's text, and the capability arguments
in the shapes containerd's go-cni, CRI-O's ocicni and podman marshal them allocate correctly.
"""

from __future__ import annotations

import pytest

from cnichain.common import gojson
from cnichain.plugins.host_local.config import SCHEMA
from cnichain.plugins.host_local.config import load as load_ipam_config
from cnichain.plugins.host_local.plugin import PLUGIN
from tests.gocase import go_casing, keys, outcome, path_id, recase_all, remove, rename, replace, upper_casing
from tests.helpers import dispatch

# One config using every key host-local decodes, in the camelCase of the reference's json tags.
BASE = {
    "cniVersion": "1.0.0",
    "name": "net1",
    "type": "bridge",
    "ipam": {
        "type": "host-local",
        "subnet": "10.1.0.0/24",
        "rangeStart": "10.1.0.10",
        "rangeEnd": "10.1.0.20",
        "gateway": "10.1.0.254",
        "ranges": [[{"subnet": "10.2.0.0/24", "rangeStart": "10.2.0.10", "rangeEnd": "10.2.0.20", "gateway": "10.2.0.1"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.1.0.254", "mtu": 1400, "advmss": 1360, "priority": 5, "table": 100, "scope": 0}],
        "dataDir": "/tmp/cnichain-test-unused",
        "resolvConf": "/etc/resolv.conf",
    },
    "runtimeConfig": {
        "ipRanges": [[{"subnet": "10.3.0.0/24", "rangeStart": "10.3.0.10", "rangeEnd": "10.3.0.20", "gateway": "10.3.0.1"}]],
        "ips": ["10.3.0.15"],
    },
    "args": {"cni": {"ips": ["10.1.0.12/24"]}},
}
PATHS = list(keys(BASE, SCHEMA))


def load(conf: dict, cni_args: str = ""):
    return outcome(lambda: load_ipam_config(conf, cni_args))


def test_base_config_uses_every_key():
    reference = load(BASE)
    assert not isinstance(reference, tuple), reference
    seen = {path[-1] for path, _ in PATHS}
    assert seen >= {"name", "cniVersion", "ipam", "type", "subnet", "rangeStart", "rangeEnd", "gateway", "ranges",
                    "routes", "dst", "gw", "mtu", "advmss", "priority", "table", "scope", "dataDir", "resolvConf",
                    "runtimeConfig", "ipRanges", "ips", "args", "cni"}
    assert [str(rs.ranges[0].subnet) for rs in reference.ranges] == ["10.3.0.0/24", "10.1.0.0/24", "10.2.0.0/24"]
    assert [str(ip) for ip in reference.requested_ips] == ["10.1.0.12", "10.3.0.15"]
    assert reference.routes[0].table == 100 and reference.routes[0].scope == 0 and reference.routes[0].mtu == 1400


@pytest.mark.parametrize("casing", [go_casing, upper_casing], ids=["GoCase", "UPPER"])
@pytest.mark.parametrize("path,field", PATHS, ids=[path_id(p) for p, _ in PATHS])
def test_each_key_in_another_casing_reads_the_same(path, field, casing):
    respelled = rename(BASE, path, casing(field))
    assert respelled != BASE
    assert load(respelled) == load(BASE)


def test_whole_config_in_go_casing_reads_the_same():
    go = recase_all(BASE, SCHEMA, go_casing)
    assert go["IPAM"]["RangeStart"] == "10.1.0.10" and go["RuntimeConfig"]["IPRanges"][0][0]["Subnet"] == "10.3.0.0/24"
    assert go["IPAM"]["DataDir"] and go["Args"]["Cni"]["IPs"] and go["IPAM"]["Routes"][0]["GW"]
    assert load(go) == load(BASE)


def test_later_spelling_of_a_key_wins_as_in_go():
    conf = replace(BASE, ("ipam", "dataDir"), "/first")
    conf["ipam"]["DataDir"] = "/second"
    assert load(conf).data_dir == "/second"


# null leaves the zero value, i.e. is read exactly as an absent key; a types.IPNet is the exception.
def _is_cidr(field) -> bool:
    return field.type is gojson.CIDR


NULLABLE = [p for p, f in PATHS if not _is_cidr(f)]
CIDRS = [p for p, f in PATHS if _is_cidr(f)]


@pytest.mark.parametrize("path", NULLABLE, ids=[path_id(p) for p in NULLABLE])
def test_null_is_the_same_as_absent(path):
    assert load(replace(BASE, path, None)) == load(remove(BASE, path))


@pytest.mark.parametrize("path", CIDRS, ids=[path_id(p) for p in CIDRS])
def test_null_subnet_or_dst_is_refused_as_by_types_ipnet(path):
    # types.IPNet's UnmarshalJSON receives the null, decodes "" and fails to parse it.
    assert load(replace(BASE, path, None)) == ("error", 999, "invalid CIDR address: ")


def test_empty_ip_strings_are_unset_like_go_cni_sends_them():
    conf = replace(BASE, ("ipam", "rangeStart"), "")
    conf = replace(conf, ("ipam", "gateway"), "")
    r = load(conf).ranges[1].ranges[0]
    assert (str(r.start), str(r.end), str(r.gateway)) == ("10.1.0.1", "10.1.0.20", "10.1.0.1")


UNMARSHAL = "json: cannot unmarshal"
RT_TYPE = 'struct { IPRanges []allocator.RangeSet "json:\\"ipRanges,omitempty\\""; IPs []*ip.IP "json:\\"ips,omitempty\\"" }'
ARGS_TYPE = 'struct { A *allocator.IPAMArgs "json:\\"cni\\"" }'
WRONG_TYPES = [
    (("name",), 5, f"{UNMARSHAL} number into Go struct field Net.name of type string"),
    (("cniVersion",), True, f"{UNMARSHAL} bool into Go struct field Net.cniVersion of type string"),
    (("ipam",), "x", f"{UNMARSHAL} string into Go struct field Net.ipam of type allocator.IPAMConfig"),
    (("ipam", "type"), 1, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.type of type string"),
    (("ipam", "subnet"), 24, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.subnet of type string"),
    (("ipam", "rangeStart"), 5, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.rangeStart of type net.IP"),
    (("ipam", "rangeEnd"), True, f"{UNMARSHAL} bool into Go struct field IPAMConfig.ipam.rangeEnd of type net.IP"),
    (("ipam", "gateway"), ["10.1.0.1"], f"{UNMARSHAL} array into Go struct field IPAMConfig.ipam.gateway of type net.IP"),
    (("ipam", "dataDir"), 5, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.dataDir of type string"),
    (("ipam", "resolvConf"), {}, f"{UNMARSHAL} object into Go struct field IPAMConfig.ipam.resolvConf of type string"),
    (("ipam", "ranges"), "x", f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.ranges of type []allocator.RangeSet"),
    (("ipam", "ranges"), ["x"], f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.ranges of type allocator.RangeSet"),
    (("ipam", "ranges"), [["x"]], f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.ranges of type allocator.Range"),
    (("ipam", "ranges", 0, 0, "subnet"), 5, f"{UNMARSHAL} number into Go struct field Range.ipam.ranges.subnet of type string"),
    (("ipam", "ranges", 0, 0, "rangeStart"), 5, f"{UNMARSHAL} number into Go struct field Range.ipam.ranges.rangeStart of type net.IP"),
    (("ipam", "ranges", 0, 0, "rangeEnd"), {}, f"{UNMARSHAL} object into Go struct field Range.ipam.ranges.rangeEnd of type net.IP"),
    (("ipam", "ranges", 0, 0, "gateway"), False, f"{UNMARSHAL} bool into Go struct field Range.ipam.ranges.gateway of type net.IP"),
    (("ipam", "routes"), {}, f"{UNMARSHAL} object into Go struct field IPAMConfig.ipam.routes of type []*types.Route"),
    # types.Route has its own UnmarshalJSON: Go labels errors inside a route with the routes field.
    (("ipam", "routes", 0), "x", f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.routes of type types.route"),
    (("ipam", "routes", 0, "dst"), 0, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.routes of type string"),
    (("ipam", "routes", 0, "gw"), 1, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.routes of type net.IP"),
    (("ipam", "routes", 0, "mtu"), "1400", f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.routes of type int"),
    (("ipam", "routes", 0, "advmss"), 1.5, f"{UNMARSHAL} number 1.5 into Go struct field IPAMConfig.ipam.routes of type int"),
    (("ipam", "routes", 0, "priority"), True, f"{UNMARSHAL} bool into Go struct field IPAMConfig.ipam.routes of type int"),
    (("ipam", "routes", 0, "table"), "main", f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.routes of type int"),
    (("ipam", "routes", 0, "scope"), [], f"{UNMARSHAL} array into Go struct field IPAMConfig.ipam.routes of type int"),
    (("runtimeConfig",), "x", f"{UNMARSHAL} string into Go struct field Net.runtimeConfig of type {RT_TYPE}"),
    (("runtimeConfig", "ipRanges"), {}, f"{UNMARSHAL} object into Go struct field .runtimeConfig.ipRanges of type []allocator.RangeSet"),
    (("runtimeConfig", "ipRanges", 0, 0, "subnet"), 5, f"{UNMARSHAL} number into Go struct field Range.runtimeConfig.ipRanges.subnet of type string"),
    (("runtimeConfig", "ipRanges", 0, 0, "rangeStart"), 5, f"{UNMARSHAL} number into Go struct field Range.runtimeConfig.ipRanges.rangeStart of type net.IP"),
    (("runtimeConfig", "ips"), "10.3.0.15", f"{UNMARSHAL} string into Go struct field .runtimeConfig.ips of type []*ip.IP"),
    (("runtimeConfig", "ips", 0), 5, f"{UNMARSHAL} number into Go struct field .runtimeConfig.ips of type *ip.IP"),
    (("args",), "x", f"{UNMARSHAL} string into Go struct field Net.args of type {ARGS_TYPE}"),
    (("args", "cni"), [], f"{UNMARSHAL} array into Go struct field .args.cni of type allocator.IPAMArgs"),
    (("args", "cni", "ips"), {}, f"{UNMARSHAL} object into Go struct field IPAMArgs.args.cni.ips of type []*ip.IP"),
    (("args", "cni", "ips", 0), True, f"{UNMARSHAL} bool into Go struct field IPAMArgs.args.cni.ips of type *ip.IP"),
]


@pytest.mark.parametrize("path,value,message", WRONG_TYPES, ids=[path_id(p) + "=" + repr(v) for p, v, _ in WRONG_TYPES])
def test_wrong_json_type_fails_with_gos_text(path, value, message):
    assert load(replace(BASE, path, value)) == ("error", 999, message)


def test_wrong_type_in_go_casing_is_named_by_its_json_tag():
    conf = rename(BASE, ("ipam", "dataDir"), "DataDir")
    conf["ipam"]["DataDir"] = 5
    assert load(conf) == ("error", 999, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.dataDir of type string")


# Go saves the first type error and decodes on; an error that aborts decoding (a text that does not
# parse, or anything a type's own UnmarshalJSON returns) is reported instead of the saved one.
PRECEDENCE = [
    ({"dataDir": 5, "resolvConf": True}, f"{UNMARSHAL} number into Go struct field IPAMConfig.ipam.dataDir of type string"),
    ({"resolvConf": True, "dataDir": 5}, f"{UNMARSHAL} bool into Go struct field IPAMConfig.ipam.resolvConf of type string"),
    ({"dataDir": 5, "subnet": "10.1.0.0"}, "invalid CIDR address: 10.1.0.0"),
    ({"rangeStart": 5, "gateway": "x"}, "invalid IP address: x"),
    ({"dataDir": 5, "routes": [{"dst": "0.0.0.0/0", "mtu": "x"}]},
     f"{UNMARSHAL} string into Go struct field IPAMConfig.ipam.routes of type int"),
    ({"routes": [{"dst": "0.0.0.0/0", "mtu": "x", "gw": "y"}]}, "invalid IP address: y"),
]


@pytest.mark.parametrize("ipam,message", PRECEDENCE, ids=[repr(i)[:50] for i, _ in PRECEDENCE])
def test_which_of_several_errors_go_reports(ipam, message):
    conf = {"cniVersion": "1.0.0", "name": "n", "ipam": {"type": "host-local", **ipam}}
    assert load(conf) == ("error", 999, message)


TEXT_ERRORS = [
    (("ipam", "subnet"), "", "invalid CIDR address: "),
    (("ipam", "subnet"), "10.1.0.0", "invalid CIDR address: 10.1.0.0"),
    (("ipam", "rangeStart"), "10.1.0", "invalid IP address: 10.1.0"),
    (("runtimeConfig", "ipRanges", 0, 0, "gateway"), "x", "invalid IP address: x"),
    (("ipam", "routes", 0, "dst"), "", "invalid CIDR address: "),
    (("runtimeConfig", "ips", 0), "10.3.0.15/33", "invalid IP address 10.3.0.15/33"),
    (("args", "cni", "ips", 0), "", "cannot understand ip: IP <nil> not v4 nor v6"),
]


@pytest.mark.parametrize("path,value,message", TEXT_ERRORS, ids=[path_id(p) + "=" + repr(v) for p, v, _ in TEXT_ERRORS])
def test_unparsable_text_fails_with_the_go_types_message(path, value, message):
    assert load(replace(BASE, path, value)) == ("error", 999, message)


# -- capability arguments as the runtimes marshal them, through a real ADD ----------------------

GO_CNI_RANGES = [[{"Subnet": "10.0.0.0/24", "RangeStart": "", "RangeEnd": "", "Gateway": ""}]]  # containerd
OCICNI_RANGES = [[{"subnet": "10.0.0.0/24"}]]  # CRI-O
PODMAN_RANGES = [[{"subnet": "10.0.0.0/24", "rangeStart": "10.0.0.2", "rangeEnd": "10.0.0.254", "gateway": "10.0.0.1"}]]


def add(tmp_path, runtime: dict, args: dict | None = None, **env: str):
    conf = {"cniVersion": "1.0.0", "name": "capnet", "type": "bridge",
            "ipam": {"type": "host-local", "dataDir": str(tmp_path), "ranges": [[{"subnet": "192.0.2.0/24"}]]},
            "runtimeConfig": runtime}
    if args is not None:
        conf["args"] = args
    code, out = dispatch(PLUGIN, "ADD", conf, **env)
    assert code == 0, out
    return [(ip["address"], ip.get("gateway")) for ip in out["ips"]]


@pytest.mark.parametrize("ranges", [GO_CNI_RANGES, OCICNI_RANGES, PODMAN_RANGES], ids=["go-cni", "ocicni", "podman"])
def test_ip_ranges_capability_allocates_from_the_runtime_range(tmp_path, ranges):
    # The runtime's range set comes first; the configured one is still allocated from.
    assert add(tmp_path, {"ipRanges": ranges}) == [("10.0.0.2/24", "10.0.0.1"), ("192.0.2.2/24", "192.0.2.1")]


def test_go_cni_range_with_bounds_and_gateway(tmp_path):
    ranges = [[{"Subnet": "10.0.0.0/24", "RangeStart": "10.0.0.100", "RangeEnd": "10.0.0.110", "Gateway": "10.0.0.254"}]]
    assert add(tmp_path, {"IPRanges": ranges})[0] == ("10.0.0.100/24", "10.0.0.254")


@pytest.mark.parametrize("runtime", [{"ips": ["192.0.2.5"]}, {"IPs": ["192.0.2.5"]}, {"ips": ["192.0.2.5/24"]}],
                         ids=["camelCase", "GoCase", "with-prefix"])
def test_ips_capability_allocates_the_requested_address(tmp_path, runtime):
    assert add(tmp_path, runtime) == [("192.0.2.5/24", "192.0.2.1")]


def test_args_cni_ips_in_either_casing_allocate(tmp_path):
    assert add(tmp_path, {}, {"cni": {"ips": ["192.0.2.7"]}}) == [("192.0.2.7/24", "192.0.2.1")]
    assert add(tmp_path / "b", {}, {"CNI": {"IPs": ["192.0.2.8"]}}) == [("192.0.2.8/24", "192.0.2.1")]


def test_ips_and_ranges_together_as_go_cni_sends_them(tmp_path):
    runtime = {"IPRanges": GO_CNI_RANGES, "IPs": ["10.0.0.9", "192.0.2.9"]}
    assert add(tmp_path, runtime) == [("10.0.0.9/24", "10.0.0.1"), ("192.0.2.9/24", "192.0.2.1")]


def test_cni_args_ip_is_requested_first(tmp_path):
    assert add(tmp_path, {}, None, CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAME=p;IP=192.0.2.11") == [("192.0.2.11/24", "192.0.2.1")]


def test_cidr_prefix_with_leading_zeros_parses_as_in_go():
    # net.ParseCIDR reads the prefix with dtoi, which takes leading zeros.
    conf = replace(BASE, ("ipam", "subnet"), "10.1.0.0/024")
    assert load(conf) == load(BASE)
