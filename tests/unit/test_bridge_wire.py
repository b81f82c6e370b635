"""bridge's rtnetlink messages (plugins/bridge/wire.py) against the bodies pyroute2 0.9 sent for
the same calls (captured from its socket; the 16-byte netlink header left out), and the address
listing decoder (pure: no kernel)."""

from __future__ import annotations

from cnichain.common import rtnl
from cnichain.plugins.bridge import wire

BRIDGE = "0000000000000000000000000000000008000300627237000800040078050000100012000b0001006272696467650000"
VETH = ("00000000000000000000000000000000110003007665746832663131333239610000000008000400780500004400120009000100"
        "766574680000000034000200300001000000000000000000000000000000000009000300657468300000000008001c00080000"
        "000800040078050000")
VETH_PLAIN = ("0000000000000000000000000000000011000300766574683134356631643730000000003c00120009000100766574680000"
              "00002c000200280001000000000000000000000000000000000009000300657468300000000008001c0003000000")
ENSLAVE_UP = "0000000003000000010000000100000008000a0002000000"
PORT = ("000000000300000000000000000000002c001200110001006272696467655f736c61766500000000140005000500040001000000"
        "0500210001000000")
ADDR_V6_NODAD = "0a4000000200000014000100fd0000000000000000000000000000050800080002000000"
ADDR_V4 = "0218000002000000080001000a010005080002000a010005"
ROUTE_GW_PRIO = "02100000fe03000100000000080001000a0200000800040002000000080005000a0100010800060064000000"
ROUTE_DEVICE = "02100000fe03fd0100000000080001000a0300000800040002000000"
ROUTE_TABLE = "021000006403000100000000080001000a0400000800040002000000080005000a01000108000f0064000000"
ROUTE_V6_DEFAULT = "0a000000fe03000100000000080004000200000014000500fd000000000000000000000000000001"
ROUTE_V4_DEFAULT = "02000000fe030001000000000800040002000000080005000a010001"
ADDR_DUMP_V6 = "0a00000000000000"
DEL_LINK = "00000000030000000000000000000000"


def test_link_requests_are_pyroute2s_bytes():
    assert wire.new_bridge("br7", 1400).hex() == BRIDGE
    assert wire.new_veth("veth2f11329a", "eth0", 8, 1400, "").hex() == VETH
    assert wire.new_veth("veth145f1d70", "eth0", 3, 0, "").hex() == VETH_PLAIN
    assert wire.enslave(3, 2, True).hex() == ENSLAVE_UP
    assert wire.bridge_port(3, True, True).hex() == PORT
    assert rtnl.link_change(3).hex() == DEL_LINK


def test_address_and_route_requests_are_pyroute2s_bytes():
    assert wire.new_address(2, "fd00::5", 64, 0x02).hex() == ADDR_V6_NODAD
    assert wire.new_address(2, "10.1.0.5", 24, 0).hex() == ADDR_V4
    assert wire.new_route("10.2.0.0/16", 2, "10.1.0.1", 100, None, 0).hex() == ROUTE_GW_PRIO
    assert wire.new_route("10.3.0.0/16", 2, "", None, None, 253).hex() == ROUTE_DEVICE
    assert wire.new_route("10.4.0.0/16", 2, "10.1.0.1", None, 100, 0).hex() == ROUTE_TABLE
    assert wire.new_route("::/0", 2, "fd00::1", None, None, 0).hex() == ROUTE_V6_DEFAULT
    assert wire.new_route("0.0.0.0/0", 2, "10.1.0.1", None, None, 0).hex() == ROUTE_V4_DEFAULT
    assert wire.address_dump(10).hex() == ADDR_DUMP_V6


def test_address_listing_is_read_for_one_link():
    def msg(body: bytes) -> bytes:
        return rtnl.HEADER.pack(rtnl.HEADER.size + len(body), 20, 2, 1, 0) + body

    listing = [msg(wire.new_address(2, "10.1.0.1", 24, 0)), msg(wire.new_address(3, "10.9.0.1", 16, 0)),
               msg(wire.new_address(2, "fd00::1", 64, 0x02))]
    assert wire.addresses(listing, 2) == [("10.1.0.1", 24), ("fd00::1", 64)]
