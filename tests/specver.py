"""What a CNI spec version changes in a plugin's contract, written once for every test.

The predicates mirror the reference suite's ``pkg/testutils`` (``SpecVersionHasCHECK``,
``SpecVersionHasIPVersion``, ``SpecVersionHasChaining`` ...), so a per-version test states *which*
rule it depends on instead of comparing version strings: as strings "0.10.0" < "0.4.0", so every
comparison here goes through ``cnichain.common.version`` (parsed tuples).
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed, Runtime
from cnichain.common.errors import Code
from cnichain.common.version import ALL, at_least, starting_from

# Every version we support (the reference's AllSpecVersions).
ALL_VERSIONS: tuple[str, ...] = ALL
# Versions with chaining (prevResult): the reference runs its chained plugins' kernel tests
# (portmap, bandwidth) over these only, since a 0.1/0.2 config cannot carry a prevResult to them.
CHAINING_VERSIONS: tuple[str, ...] = starting_from("0.3.0")
# Versions with CHECK: cases about what CHECK detects run over these only.
CHECK_VERSIONS: tuple[str, ...] = starting_from("0.4.0")
# Debian's reference plugins (libcni 1.0) speak up to 1.0.0: interop cases run over these.
REFERENCE_PLUGIN_VERSIONS: tuple[str, ...] = tuple(v for v in ALL if not at_least(v, "1.1.0"))


def expects_check(version: str) -> bool:
    """CHECK exists from 0.4.0 on; below that a plugin refuses it (``assert_check_refused``)."""
    return at_least(version, "0.4.0")


def expects_gc(version: str) -> bool:
    """GC and STATUS exist from 1.1.0 on."""
    return at_least(version, "1.1.0")


def result_has_interfaces(version: str) -> bool:
    """0.1.0/0.2.0 results have ``ip4``/``ip6`` and no ``interfaces``/``ips`` lists."""
    return at_least(version, "0.3.0")


def ips_carry_version(version: str) -> bool:
    """0.3.x and 0.4.0 ``ips`` entries carry ``"version": "4"|"6"``; 1.0.0 dropped it."""
    return result_has_interfaces(version) and not at_least(version, "1.0.0")


def result_ips(result: dict) -> list[dict[str, Any]]:
    """The result's addresses as ``[{"address", "gateway"?}]`` whatever the version's shape."""
    if "ips" in result or "interfaces" in result:
        return [dict(ip) for ip in result.get("ips", [])]
    out: list[dict[str, Any]] = []
    for key in ("ip4", "ip6"):
        if key in result:
            entry: dict[str, Any] = {"address": result[key]["ip"]}
            if result[key].get("gateway"):
                entry["gateway"] = result[key]["gateway"]
            out.append(entry)
    return out


def result_routes(result: dict) -> list[dict[str, Any]]:
    """The result's routes whatever the version's shape (0.1/0.2 keep them per family)."""
    if "ips" in result or "interfaces" in result or "routes" in result:
        return list(result.get("routes", []))
    return [r for key in ("ip4", "ip6") for r in result.get(key, {}).get("routes", [])]


def assert_result_shape(result: dict, version: str) -> None:
    """The result is printed at the config's version, with that version's fields and no others."""
    assert result["cniVersion"] == version, result
    if result_has_interfaces(version):
        assert "ip4" not in result and "ip6" not in result, result
        for ip in result.get("ips", []):
            assert ("version" in ip) == ips_carry_version(version), (version, ip)
    else:
        assert "interfaces" not in result and "ips" not in result, result


def assert_cni_error(out: Optional[dict], code: int, msg: str, *, prefix: bool = False) -> None:
    """The plugin printed a CNI error with this spec ``code`` and message (or message prefix)."""
    assert out is not None, "no error JSON on stdout"
    assert out["code"] == code, out
    if prefix:
        assert out["msg"].startswith(msg), out
    else:
        assert out["msg"] == msg, out


def assert_check_refused(rc: int, out: Optional[dict]) -> None:
    """CHECK below 0.4.0: exit 1 and error 1 (incompatible version), nothing looked at."""
    assert rc == 1, (rc, out)
    assert_cni_error(out, Code.INCOMPATIBLE_VERSION, "config version does not allow CHECK")


def assert_failed(error: PluginFailed, code: int, msg: str, *, prefix: bool = False) -> None:
    """A ``PluginFailed`` (the runtime's view of a plugin error) carries this code and message."""
    got = error.error
    assert got.code == code, (got.code, got.msg)
    if prefix:
        assert got.msg.startswith(msg), got.msg
    else:
        assert got.msg == msg, got.msg


def check_as_runtime(runtime: Runtime, conflist: ConfList, att: Attachment) -> None:
    """CHECK the attachment where the version has CHECK; below 0.4.0, prove it is refused."""
    if expects_check(conflist.cni_version):
        runtime.check(conflist, att)
        return
    with pytest.raises(PluginFailed) as info:
        runtime.check(conflist, att)
    assert_failed(info.value, Code.INCOMPATIBLE_VERSION, "config version does not allow CHECK")

