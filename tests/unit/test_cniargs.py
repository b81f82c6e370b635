import pytest

from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import CniError


def test_known_and_ignore_unknown():
    raw = "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.0.0.5"
    assert parse_cni_args(raw, {"IP"}) == {"IP": "10.0.0.5"}


def test_unknown_without_ignore():
    with pytest.raises(CniError, match=r'ARGS: unknown args \["FOO=bar"\]') as info:
        parse_cni_args("FOO=bar", {"IP"})
    assert info.value.code == 999


def test_invalid_pair():
    with pytest.raises(CniError, match='ARGS: invalid pair "novalue"') as info:
        parse_cni_args("novalue", {"IP"})
    assert info.value.code == 999


def test_bad_bool():
    with pytest.raises(CniError, match="boolean unmarshal error: invalid input maybe") as info:
        parse_cni_args("IgnoreUnknown=maybe", set())
    assert info.value.code == 999
