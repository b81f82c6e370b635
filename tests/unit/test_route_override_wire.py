"""route-override's route requests against the bodies pyroute2 0.9 sent for the same calls
(captured from its socket; the 16-byte netlink header left out).  Pure: no kernel."""

from __future__ import annotations

import socket

from cnichain.plugins.route_override.kernel import MAIN_TABLE, RTMSG, RTN_UNICAST, route_body

ADD_GW = "02100000fe03000100000000080001000a070000080004000300000008000f00fe000000080005000a050001"
ADD_DEVICE = "02100000fe03000100000000080001000a080000080004000300000008000f00fe000000"
ADD_V6 = ("0a400000fe0300010000000014000100fd090000000000000000000000000000080004000300000008000f00fe000000"
          "14000500fd050000000000000000000000000001")
ADD_DEFAULT = "02000000fe03000100000000080004000300000008000f00fe000000080005000a050001"
DEL_GW_METRIC = ("02100000fe03000100000000080001000a06000008000f00fe0000000800040003000000080005000a050001"
                 "0800060032000000")
DEL_DEFAULT = "02000000fe0300010000000008000f00fe0000000800040003000000080005000a050001"
DEL_V6_KERNEL = ("0a400000fe0200010000000014000100fd05000000000000000000000000000008000f00fe0000000800040003000000"
                 "0800060000010000")
DUMP_V4 = "02000000fe00000000000000"


def _added(family: int, dst: str, dst_len: int, gateway: str = "") -> dict:
    route = {"family": family, "dst": dst, "dst_len": dst_len, "oif": 3, "table": MAIN_TABLE, "scope": 0,
             "proto": 3, "type": RTN_UNICAST}
    if gateway:
        route["gateway"] = gateway
    return route


def test_adds_are_pyroute2s_bytes():
    assert route_body(_added(socket.AF_INET, "10.7.0.0", 16, "10.5.0.1"), deleting=False).hex() == ADD_GW
    assert route_body(_added(socket.AF_INET, "10.8.0.0", 16), deleting=False).hex() == ADD_DEVICE
    assert route_body(_added(socket.AF_INET6, "fd09::", 64, "fd05::1"), deleting=False).hex() == ADD_V6
    assert route_body(_added(socket.AF_INET, "0.0.0.0", 0, "10.5.0.1"), deleting=False).hex() == ADD_DEFAULT


def test_deletes_are_pyroute2s_bytes():
    listed = {"family": socket.AF_INET, "dst": "10.6.0.0", "dst_len": 16, "table": MAIN_TABLE, "scope": 0, "proto": 3,
              "type": RTN_UNICAST, "tos": 0, "oif": 3, "gateway": "10.5.0.1", "priority": 50}
    assert route_body(listed, deleting=True).hex() == DEL_GW_METRIC
    default = dict(listed, dst="0.0.0.0", dst_len=0)
    del default["priority"]
    assert route_body(default, deleting=True).hex() == DEL_DEFAULT
    kernel_v6 = {"family": socket.AF_INET6, "dst": "fd05::", "dst_len": 64, "table": MAIN_TABLE, "scope": 0, "proto": 2,
                 "type": RTN_UNICAST, "tos": 0, "oif": 3, "priority": 256}
    assert route_body(kernel_v6, deleting=True).hex() == DEL_V6_KERNEL


def test_the_listing_request_names_the_main_table():
    assert RTMSG.pack(socket.AF_INET, 0, 0, 0, MAIN_TABLE, 0, 0, 0, 0).hex() == DUMP_V4
