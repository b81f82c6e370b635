"""Go's IP text rules (common/goip.py), the one parser of the decoder, host-local and the node tools.

Each row is what Go's ``net.ParseIP`` / ``net.ParseCIDR`` (and the plugins repo's ``ip.ParseIP``)
answer for the text: the canonical address, or None where Go returns nil or an error.
"""

from __future__ import annotations

import ipaddress

import pytest

from cnichain.common import goip
from cnichain.common.gojson import DecodeError, parse_cidr, parse_ip

A = ipaddress.ip_address
I = ipaddress.ip_interface  # noqa: E741 - read as "interface" in the tables

PARSE_IP = [
    ("10.1.2.3", A("10.1.2.3")),
    ("2001:db8::1", A("2001:db8::1")),
    ("::ffff:10.1.2.3", A("10.1.2.3")),  # 4-in-6 is the IPv4 address
    ("::1.2.3.4", A("::102:304")),  # an IPv4 tail alone does not make it 4-in-6
    ("010.1.2.3", None),  # leading zeros: refused since Go 1.17
    ("10.1.2", None),
    ("10.1.2.3/24", None),  # net.ParseIP takes no prefix
    ("fe80::1%eth0", None),  # nor a zone
    ("", None),
    (" 10.1.2.3", None),
    ("10.1.2.3\n", None),
    ("١٠.1.2.3", None),  # non-ASCII digits
    (None, None),
    (42, None),
]

PARSE_CIDR = [
    ("10.1.0.5/16", I("10.1.0.5/16")),  # the host part is kept
    ("10.1.0.0/024", I("10.1.0.0/24")),  # dtoi takes leading zeros
    ("10.1.0.0/0000000032", I("10.1.0.0/32")),
    ("::ffff:10.0.0.0/120", I("::ffff:10.0.0.0/120")),  # the family as written
    ("2001:db8::/64", I("2001:db8::/64")),
    ("10.1.0.0/33", None),
    ("2001:db8::/129", None),
    ("10.1.0.0/", None),
    ("10.1.0.0", None),
    ("10.1.0.0/24/1", None),
    ("10.1.0.0/+24", None),
    ("10.1.0.0/ 24", None),
    ("10.1.0.0/٢٤", None),
    ("10.1.0.0/" + "1" * 5000, None),  # no int() of a huge digit string
    ("fe80::1%eth0/64", None),
    ("010.1.0.0/24", None),
    ("", None),
    (None, None),
]


@pytest.mark.parametrize("text,want", PARSE_IP)
def test_parse_ip(text, want):
    assert goip.parse_ip(text) == want


@pytest.mark.parametrize("text,want", PARSE_CIDR)
def test_parse_cidr(text, want):
    got = goip.parse_cidr(text)
    assert got == want
    assert got is None or type(got) is type(want)


@pytest.mark.parametrize("text,want", [
    ("10.1.2.3", A("10.1.2.3")),
    ("10.1.2.3/24", A("10.1.2.3")),
    ("::ffff:10.1.2.3/120", A("10.1.2.3")),
    ("10.1.2.3/33", None),
    ("10.1.2", None),
    ("", None),
])
def test_parse_ip_or_cidr(text, want):
    assert goip.parse_ip_or_cidr(text) == want


def test_the_decoder_words_go_errors():
    assert parse_ip("::ffff:10.1.2.3") == A("10.1.2.3")
    with pytest.raises(DecodeError, match="^invalid IP address: 10.1.2$"):
        parse_ip("10.1.2")
    assert parse_cidr("10.1.0.5/16") == I("10.1.0.5/16")
    with pytest.raises(DecodeError, match="^invalid CIDR address: 10.1.0.0/33$"):
        parse_cidr("10.1.0.0/33")
