"""The cold-path import budget, checked on the real launchers.

Every plugin exec pays for every module it imports: pyroute2 plus a socket costs well over 100 ms,
typer about 55 ms, the nftables binding about 20 ms, while the interpreter itself starts in about
6 ms.  These tests run each installed launcher exactly as a runtime would, with ``-X importtime``,
collect the modules it imported for one command, and fail when one is over budget:

* never, in any plugin or command: typer, click, rich, the CLI package, the stdlib ``logging``;
* never on VERSION or an error path (bad JSON, unsupported version, missing env): pyroute2 or
  the nftables binding;
* never in the lean plugins and commands: host-local (all commands), portmap (all commands; no
  nftables either for ADD/CHECK with nothing to map), route-override DEL, tuning DEL of a
  sysctl-only config;
* not in those lean paths either, nor in VERSION of host-local, tuning, route-override and
  portmap: the stdlib modules that cost milliseconds for conveniences (``dataclasses`` with
  ``inspect``, ``typing``, ``contextlib``, ``socket``, ``hashlib`` with OpenSSL's ``_hashlib``);
  records come from cnichain.common.record instead.

The root-only lean paths (tuning sysctls in a real namespace, portmap with mappings) are checked in
tests/integration/test_bench_import_budget.py.  No kernel object is touched here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cnichain.node import launchers as node_launchers
from tests.import_budget import ALWAYS_FORBIDDEN, CONVENIENCE, HEAVY, PARSING, explain, imported_modules, offenders

AVAILABLE = node_launchers.available_plugins()
LEAN_PLUGINS = ("host-local", "tuning", "route-override", "portmap")
LEANEST = ("host-local", "tuning")  # no json package, no re (tests/import_budget.py PARSING)


@pytest.fixture(scope="module")
def launchers(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("budgetbin"))
    node_launchers.install(path)
    return path


def _env(command: str, **extra: str) -> dict:
    env = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "budget-ctr",
        "CNI_NETNS": "/var/run/netns/cnichain-budget-does-not-exist",
        "CNI_IFNAME": "eth0",
        "CNI_PATH": "/nonexistent",
    }
    env.update(extra)
    return env


def _check(launcher: str, env: dict, stdin: bytes, forbidden: tuple[str, ...], expect_code: int | None = None) -> dict:
    code, mods, out = imported_modules(launcher, env, stdin)
    assert mods, "no -X importtime output: is the launcher a Python script?"
    bad = offenders(mods, forbidden)
    assert not bad, f"{os.path.basename(launcher)} {env.get('CNI_COMMAND')} imported {bad}; {explain(mods)}"
    if expect_code is not None:
        assert code == expect_code, f"exit {code}, stdout {out!r}"
    return mods


# -- every plugin: VERSION and the error paths ---------------------------------------------------
@pytest.mark.parametrize("plugin_type", sorted(AVAILABLE))
def test_version_is_lean(launchers: str, plugin_type: str) -> None:
    forbidden = ALWAYS_FORBIDDEN + HEAVY + (CONVENIENCE if plugin_type in LEAN_PLUGINS else ())
    forbidden += PARSING if plugin_type in LEANEST else ()
    mods = _check(os.path.join(launchers, plugin_type), {"CNI_COMMAND": "VERSION"}, b"", forbidden, 0)
    # The plugin's own effects modules are not needed to print the supported versions either.
    assert "subprocess" not in mods or "cnichain.common.invoke" in mods, explain(mods)


ERROR_CASES = {
    "bad-json": (_env("ADD"), b"{not json"),
    "bad-version": (_env("ADD"), json.dumps({"cniVersion": "9.9.9", "name": "budget", "type": "x"}).encode()),
    "missing-env": ({"CNI_COMMAND": "ADD"}, json.dumps({"cniVersion": "1.0.0", "name": "budget"}).encode()),
    "unknown-command": (_env("BOGUS"), b"{}"),
}


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
@pytest.mark.parametrize("plugin_type", sorted(AVAILABLE))
def test_error_paths_are_lean(launchers: str, plugin_type: str, case: str) -> None:
    env, stdin = ERROR_CASES[case]
    code, mods, out = imported_modules(os.path.join(launchers, plugin_type), env, stdin)
    assert code == 1, out
    assert json.loads(out)["code"] in (1, 4, 6, 7), out
    bad = offenders(mods, ALWAYS_FORBIDDEN + HEAVY)
    assert not bad, f"{plugin_type} {case} imported {bad}; {explain(mods)}"


# -- the lean plugins and commands ------------------------------------------------------------------
@pytest.mark.parametrize("version", ["0.4.0", "1.0.0"])
def test_host_local_never_loads_netlink(launchers: str, tmp_path, version: str) -> None:
    launcher = os.path.join(launchers, "host-local")
    conf = {"cniVersion": version, "name": "budget", "type": "bridge",
            "ipam": {"type": "host-local", "subnet": "10.9.0.0/24", "dataDir": str(tmp_path / "ipam")}}
    stdin = json.dumps(conf).encode()
    code, mods, out = imported_modules(launcher, _env("ADD"), stdin)
    assert code == 0, out
    lean = ALWAYS_FORBIDDEN + HEAVY + CONVENIENCE + PARSING
    assert not offenders(mods, lean), explain(mods)
    assert "subprocess" not in mods, "host-local has nothing to exec; " + explain(mods)
    prev = json.loads(out)
    _check(launcher, _env("CHECK"), json.dumps(dict(conf, prevResult=prev)).encode(), lean, 0)
    for _ in range(2):
        _check(launcher, _env("DEL"), json.dumps(dict(conf, prevResult=prev)).encode(), lean, 0)


@pytest.mark.parametrize("command", ["ADD", "CHECK", "DEL"])
def test_portmap_without_mappings_loads_nothing_heavy(launchers: str, command: str) -> None:
    conf = {"cniVersion": "1.0.0", "name": "budget", "type": "portmap", "snat": True,
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
                           "ips": [{"address": "10.9.0.2/24", "interface": 0}]}}
    # ADD and CHECK with nothing to map have nothing to do.  DEL may look for rules left under the
    # container's ID (the runtime need not resend the mappings), so only netlink is off limits there.
    forbidden = ALWAYS_FORBIDDEN + CONVENIENCE + (HEAVY if command != "DEL" else ("pyroute2",))
    _check(os.path.join(launchers, "portmap"), _env(command), json.dumps(conf).encode(), forbidden, 0)


def test_route_override_del_loads_no_netlink(launchers: str) -> None:
    conf = {"cniVersion": "1.0.0", "name": "budget", "type": "route-override",
            "addroutes": [{"dst": "192.0.2.0/24", "gw": "10.9.0.1"}]}
    mods = _check(os.path.join(launchers, "route-override"), _env("DEL"), json.dumps(conf).encode(),
                  ALWAYS_FORBIDDEN + HEAVY + CONVENIENCE, 0)
    # DEL undoes nothing, so it does not even parse routes (ipaddress is for ADD and CHECK).
    assert "ipaddress" not in mods, explain(mods)


def test_tuning_sysctl_only_del_with_netns_gone_loads_no_netlink(launchers: str, tmp_path) -> None:
    conf = {"cniVersion": "1.0.0", "name": "budget", "type": "tuning", "dataDir": str(tmp_path / "tuning"),
            "sysctl": {"net.core.somaxconn": "500"}}
    _check(os.path.join(launchers, "tuning"), _env("DEL"), json.dumps(conf).encode(),
           ALWAYS_FORBIDDEN + HEAVY + CONVENIENCE + PARSING, 0)


def test_importtime_parser_sees_heavy_modules() -> None:
    """Guard the guard: a script that imports a forbidden module is caught."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import logging"], capture_output=True, timeout=60)
    names = [line.split("|")[-1].strip() for line in proc.stderr.decode().splitlines() if line.startswith("import time:")]
    assert offenders(dict.fromkeys(names, 1), ALWAYS_FORBIDDEN) == ["logging"]
