"""The spec-version predicates of tests/specver.py agree with the reference suite's testutils."""

from __future__ import annotations

import pytest

from tests.specver import (
    ALL_VERSIONS,
    CHAINING_VERSIONS,
    CHECK_VERSIONS,
    REFERENCE_PLUGIN_VERSIONS,
    assert_result_shape,
    expects_check,
    expects_gc,
    ips_carry_version,
    result_has_interfaces,
    result_ips,
    result_routes,
)


def test_version_lists() -> None:
    assert ALL_VERSIONS == ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
    assert CHAINING_VERSIONS == ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
    assert CHECK_VERSIONS == ("0.4.0", "1.0.0", "1.1.0")
    assert REFERENCE_PLUGIN_VERSIONS == ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0")


def test_predicates_match_reference_testutils() -> None:
    # SpecVersionHasIPVersion, SpecVersionHasCHECK, SpecVersionHasGC, SpecVersionHasChaining
    assert [v for v in ALL_VERSIONS if ips_carry_version(v)] == ["0.3.0", "0.3.1", "0.4.0"]
    assert [v for v in ALL_VERSIONS if expects_check(v)] == ["0.4.0", "1.0.0", "1.1.0"]
    assert [v for v in ALL_VERSIONS if expects_gc(v)] == ["1.1.0"]
    assert [v for v in ALL_VERSIONS if result_has_interfaces(v)] == list(CHAINING_VERSIONS)


def test_versions_compare_as_numbers_not_strings() -> None:
    # "0.10.0" < "0.4.0" as strings; a parsed comparison gets it right
    assert expects_check("0.10.0") and result_has_interfaces("0.10.0") and not expects_check("0.3.1")


def test_old_and_new_result_shapes() -> None:
    old = {"cniVersion": "0.2.0", "ip4": {"ip": "10.0.0.2/24", "gateway": "10.0.0.1", "routes": [{"dst": "0.0.0.0/0"}]},
           "ip6": {"ip": "fd00::2/64"}}
    assert result_ips(old) == [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}, {"address": "fd00::2/64"}]
    assert result_routes(old) == [{"dst": "0.0.0.0/0"}]
    assert_result_shape(old, "0.2.0")
    new = {"cniVersion": "0.4.0", "interfaces": [{"name": "eth0"}],
           "ips": [{"version": "4", "address": "10.0.0.2/24", "interface": 0}], "routes": [{"dst": "0.0.0.0/0"}]}
    assert result_ips(new) == new["ips"] and result_routes(new) == new["routes"]
    assert_result_shape(new, "0.4.0")
    with pytest.raises(AssertionError):
        assert_result_shape(new, "1.0.0")  # wrong cniVersion
    with pytest.raises(AssertionError):
        assert_result_shape(dict(new, cniVersion="1.0.0"), "1.0.0")  # 1.0.0 dropped "version"
