"""The Go-semantics decoder itself: key matching, null, zero values, text types and Go's error texts."""

from __future__ import annotations

import ipaddress

import pytest

from cnichain.common import gojson
from cnichain.common.errors import CniError

ENTRY = gojson.Struct("main.PortMapEntry", [
    ("hostPort", gojson.INT),
    ("containerPort", gojson.INT),
    ("protocol", gojson.STRING),
    gojson.Field("hostIP", gojson.STRING, "HostIP"),
])
CONF = gojson.Struct("main.Conf", [
    gojson.Field("snat", gojson.Ptr(gojson.BOOL), "SNAT"),
    ("masqAll", gojson.BOOL),
    ("gateway", gojson.IP),
    ("subnet", gojson.CIDR),
    ("rate", gojson.UINT64),
    ("sysctl", gojson.Map(gojson.STRING)),
    ("tags", gojson.List(gojson.STRING)),
    ("runtimeConfig", gojson.Struct("", [("portMappings", gojson.List(ENTRY))])),
    ("extra", gojson.ANY),
])


def decode(value):
    return gojson.decode(value, CONF, "prefix: ")


def test_absent_fields_take_go_zero_values():
    d = decode({})
    assert d == {
        "snat": None, "masqAll": False, "gateway": None, "subnet": None, "rate": 0, "sysctl": None,
        "tags": None, "runtimeConfig": {"portMappings": None}, "extra": None,
    }


@pytest.mark.parametrize("key", ["hostPort", "HostPort", "hostport", "HOSTPORT"])
def test_keys_match_case_insensitively(key):
    d = decode({"runtimeConfig": {"portMappings": [{key: 8080, "ContainerPort": 80}]}})
    assert d["runtimeConfig"]["portMappings"][0]["hostPort"] == 8080


def test_containerd_shape_decodes_like_camel_case():
    go = {"RuntimeConfig": {"PortMappings": [{"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""}]}}
    camel = {"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]}}
    assert decode(go) == decode(camel)


def test_later_spelling_wins_as_go_applies_keys_in_order():
    assert decode({"masqAll": True, "MasqAll": False})["masqAll"] is False
    assert decode({"MasqAll": False, "masqAll": True})["masqAll"] is True


def test_case_folding_is_unicode_aware_like_go():
    # Go folds the Kelvin sign to k and the long s to s when matching field names.
    schema = gojson.Struct("T", [("kind", gojson.STRING), ("mask", gojson.STRING)])
    assert gojson.decode({"\u212aind": "x", "ma\u017fk": "y"}, schema) == {"kind": "x", "mask": "y"}


def test_unknown_keys_are_ignored():
    assert decode({"nonsense": 1, "snat": True})["snat"] is True


def test_null_resets_nilable_fields_and_leaves_others():
    d = decode({"snat": True, "SNAT": None, "masqAll": True, "MasqAll": None, "rate": None})
    assert d["snat"] is None and d["masqAll"] is True and d["rate"] == 0


def test_null_elements_take_zero_values():
    d = decode({"tags": ["a", None], "sysctl": {"k": None}, "runtimeConfig": {"portMappings": [None]}})
    assert d["tags"] == ["a", ""]
    assert d["sysctl"] == {"k": ""}
    assert d["runtimeConfig"]["portMappings"] == [{"hostPort": 0, "containerPort": 0, "protocol": "", "hostIP": ""}]


def test_struct_seen_twice_is_merged_and_maps_merge():
    d = decode({"runtimeConfig": {}, "RuntimeConfig": {"portMappings": []}, "sysctl": {"a": "1"}, "Sysctl": {"b": "2"}})
    assert d["runtimeConfig"]["portMappings"] == []
    assert d["sysctl"] == {"a": "1", "b": "2"}


def test_decode_into_overlays_present_fields_only():
    base = decode({"masqAll": True, "rate": 5})
    assert gojson.decode_into(base, {"Rate": 7}, CONF) == dict(base, rate=7)


def test_empty_ip_is_unset_and_ips_parse():
    assert decode({"gateway": ""})["gateway"] is None
    assert decode({"gateway": "10.0.0.1"})["gateway"] == ipaddress.ip_address("10.0.0.1")
    assert decode({"gateway": "::ffff:10.0.0.1"})["gateway"] == ipaddress.ip_address("10.0.0.1")


def test_cidr_keeps_host_bits():
    assert str(decode({"subnet": "10.1.0.5/16"})["subnet"]) == "10.1.0.5/16"


@pytest.mark.parametrize(
    "value,message",
    [
        ({"gateway": "10.0.0.300"}, "prefix: invalid IP address: 10.0.0.300"),
        ({"gateway": "fe80::1%eth0"}, "prefix: invalid IP address: fe80::1%eth0"),
        ({"subnet": ""}, "prefix: invalid CIDR address: "),
        ({"subnet": "10.0.0.0"}, "prefix: invalid CIDR address: 10.0.0.0"),
        ({"subnet": "10.0.0.0/33"}, "prefix: invalid CIDR address: 10.0.0.0/33"),
        ({"snat": "yes"}, "prefix: json: cannot unmarshal string into Go struct field Conf.snat of type bool"),
        ({"rate": -1}, "prefix: json: cannot unmarshal number -1 into Go struct field Conf.rate of type uint64"),
        ({"rate": 1.5}, "prefix: json: cannot unmarshal number 1.5 into Go struct field Conf.rate of type uint64"),
        ({"rate": 2**64}, f"prefix: json: cannot unmarshal number {2**64} into Go struct field Conf.rate of type uint64"),
        ({"tags": "a"}, "prefix: json: cannot unmarshal string into Go struct field Conf.tags of type []string"),
        ({"tags": [1]}, "prefix: json: cannot unmarshal number into Go struct field Conf.tags of type string"),
        ({"sysctl": []}, "prefix: json: cannot unmarshal array into Go struct field Conf.sysctl of type map[string]string"),
        ({"gateway": 1}, "prefix: json: cannot unmarshal number into Go struct field Conf.gateway of type net.IP"),
        (
            {"runtimeConfig": {"portMappings": [{"HostPort": "80"}]}},
            "prefix: json: cannot unmarshal string into Go struct field PortMapEntry.runtimeConfig.portMappings.hostPort of type int",
        ),
        ([], "prefix: json: cannot unmarshal array into Go value of type main.Conf"),
    ],
)
def test_errors_carry_go_wording(value, message):
    with pytest.raises(CniError) as err:
        decode(value)
    assert err.value.code == 999 and err.value.msg == message


def test_any_keeps_the_value():
    assert decode({"extra": {"a": [1]}})["extra"] == {"a": [1]}


def test_an_integer_written_with_a_fraction_is_refused():
    with pytest.raises(CniError) as err:
        decode({"rate": 1.0})
    assert err.value.msg == "prefix: json: cannot unmarshal number 1.0 into Go struct field Conf.rate of type uint64"
    assert err.value.code == 999
