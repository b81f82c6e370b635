import pytest

from cnichain.common.cniargs import parse_cni_args
from cnichain.common.errors import CniError


def test_known_and_ignore_unknown():
    raw = "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.0.0.5"
    assert parse_cni_args(raw, {"IP"}) == {"IP": "10.0.0.5"}


def test_unknown_without_ignore():
    with pytest.raises(CniError, match=r'ARGS: unknown args \["FOO=bar"\]'):
        parse_cni_args("FOO=bar", {"IP"})


def test_invalid_pair():
    with pytest.raises(CniError, match='ARGS: invalid pair "novalue"'):
        parse_cni_args("novalue", {"IP"})


def test_bad_bool():
    with pytest.raises(CniError, match="boolean unmarshal error: invalid input maybe"):
        parse_cni_args("IgnoreUnknown=maybe", set())
