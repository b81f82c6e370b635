"""Shared fixtures.

Integration tests run the plugins as real processes, the way a runtime does, inside throwaway
namespaces: ``lab`` gives a fresh "node" namespace (the host) per test and deletes every namespace
it made afterwards, pass or fail.  ``plugin_dir`` holds launchers written by ``cnichain install``
for this checkout, so what is tested is what a node runs.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Iterator, Optional

import pytest

from cnichain.node import launchers
from cnichain.tools.lab import Lab
from cnichain.podstate.runtime import Runtime
from tests import coldruns, required
from tests.specver import ALL_VERSIONS, CHAINING_VERSIONS, CHECK_VERSIONS

REFERENCE_DIR = os.environ.get("CNICHAIN_REFERENCE_DIR", "/usr/lib/cni")
WARM_PASS = os.environ.get("CNICHAIN_TEST_AGENT") == "1"


def _versions(versions: tuple[str, ...]) -> tuple[str, ...]:
    """The spec versions a per-version case runs at: all of them cold; the oldest and the newest in
    the warm pass, whose subject is the way to the handler (the shim, the agent, a worker), not the
    per-version contract the cold pass proves at every version with the same handler code."""
    return versions if not WARM_PASS or len(versions) <= 2 else (versions[0], versions[-1])


def pytest_configure(config: Any) -> None:
    """As root, move the whole test process into a private network namespace first.

    Integration tests already work in lab namespaces; this is the safety net for everything else:
    a unit test that reaches the kernel by mistake (an in-process ADD, an nft call) changes a
    throwaway namespace that dies with the test run, never the machine's own.
    """
    if os.geteuid() != 0 or os.environ.get("CNICHAIN_TEST_KEEP_NETNS") == "1":
        return
    import ctypes
    import subprocess

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        raise pytest.UsageError(f"cannot unshare the network namespace: {os.strerror(ctypes.get_errno())}")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    if WARM_PASS:
        _keep_what_runs_plugins(config, items)
    if os.geteuid() == 0 and shutil.which("ip"):
        return
    skip = pytest.mark.skip(reason="integration tests need root and iproute2")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def _keep_what_runs_plugins(config: Any, items: list) -> None:
    """The warm pass deselects the integration tests that never exec a plugin from ``plugin_dir``
    (images, bundles, the bench, the agent's own harnesses) or are about the cold exec itself
    (marker ``cold_path``): they would run exactly as in the cold pass, so only the tests whose
    plugins the session agent serves run twice."""
    keep, drop = [], []
    for item in items:
        runs_plugins = "plugin_dir" in getattr(item, "fixturenames", ()) and "cold_path" not in item.keywords
        (keep if runs_plugins or "integration" not in item.keywords else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def agent_socket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """"" (launchers run cold), or with CNICHAIN_TEST_AGENT=1 (as root) the socket of a session agent.

    Opt-in so that the same integration suite runs once cold and once warm (agent/).
    """
    if os.environ.get("CNICHAIN_TEST_AGENT") != "1" or os.geteuid() != 0:
        yield ""
        return
    from cnichain.agent import running_agent

    folder = tmp_path_factory.mktemp("agent")
    os.chmod(folder, 0o700)
    # Its reconciler stays off: it would act on the lab's pods (a test's deliberate damage
    # repaired, a namespace it checks kept alive) -- the reconciler's own tests run it on purpose.
    with running_agent(os.path.join(str(folder), "agent.sock"), args=("--reconcile", "off")) as agent:
        yield agent.socket_path


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory, agent_socket: str) -> Iterator[str]:
    """A bin dir with one executable per cnichain plugin, written by the real installer: Python
    launchers, or with an agent (CNICHAIN_TEST_AGENT=1) the native shim when it was built.

    In the warm pass every request must be served by the agent: a cold fallback would pass the
    same tests while proving nothing about the warm path, so each one is logged and fails the run.
    """
    path = str(tmp_path_factory.mktemp("cnibin"))
    if agent_socket and required.under_run():
        required.native_shim()  # warm under ./run means the production path: shim, then agent
    report = launchers.install(path, agent_socket=agent_socket)
    assert not report.refused
    if agent_socket and required.under_run():
        with open(os.path.join(path, "bridge"), "rb") as fh:
            assert fh.read(4) == b"\x7fELF", "the warm pass must run the native shim, not Python launchers"
    if not agent_socket:
        yield path
        return
    cold_log = str(tmp_path_factory.mktemp("coldruns") / "cold.log")
    with coldruns.noted(path, cold_log) as cold:
        yield path
        runs = cold.runs()
    if runs:
        raise AssertionError(f"the warm pass ran {len(runs)} plugin execs cold (type, command): {runs[:20]}")


@pytest.fixture(scope="session")
def reference_dir() -> str:
    """The reference Go plugins (Debian's containernetworking-plugins, which ./run installs)."""
    if not os.path.isfile(os.path.join(REFERENCE_DIR, "bridge")):
        required.missing(f"the reference plugins in {REFERENCE_DIR} (containernetworking-plugins)")
    return REFERENCE_DIR


REFERENCE_VERSIONS = ("1.1.1", "1.9.1")


def reference_dir_of(version: str) -> str:
    """Debian 12's reference plugins (1.1.1, ``CNICHAIN_REFERENCE_DIR``) or sid's 1.9.1 that
    ``./run`` unpacked (tools/debcache.py); either missing fails under ``./run`` (tests/required.py)."""
    from cnichain.tools import debcache

    path = REFERENCE_DIR if version == "1.1.1" else debcache.reference_plugins_dir("sid")
    if path and os.path.isfile(os.path.join(path, "bridge")):
        return path
    where = REFERENCE_DIR if version == "1.1.1" else debcache.cache_dir()
    required.missing(f"the reference plugins {version} in {where}")


@pytest.fixture(params=REFERENCE_VERSIONS, ids=[f"ref{v}" for v in REFERENCE_VERSIONS])
def any_reference(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(version, bin dir) of each reference: interop cases run against both."""
    return request.param, reference_dir_of(request.param)


@pytest.fixture
def lab() -> Iterator[Lab]:
    """A fresh node namespace (plus whatever pods the test adds); everything removed afterwards."""
    with Lab(prefix="cnit") as the_lab:
        yield the_lab


@pytest.fixture
def make_runtime(lab: Lab, plugin_dir: str):
    """Build a runner whose plugins execute inside the lab's node namespace."""

    def factory(bin_dirs: Optional[list[str]] = None, **kw: Any) -> Runtime:
        return Runtime(bin_dirs or [plugin_dir], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node, **kw)

    return factory


@pytest.fixture(params=_versions(ALL_VERSIONS))
def cni_version(request: pytest.FixtureRequest) -> str:
    """Every supported spec version (the reference suite's ``testutils.AllSpecVersions``)."""
    return request.param


@pytest.fixture(params=_versions(CHAINING_VERSIONS))
def chained_version(request: pytest.FixtureRequest) -> str:
    """Versions with a prevResult (0.3.0 on): the reference runs its chained plugins' kernel cases
    (portmap, bandwidth) over these, since a 0.1/0.2 config cannot carry a prevResult to them."""
    return request.param


@pytest.fixture(params=_versions(CHECK_VERSIONS))
def check_version(request: pytest.FixtureRequest) -> str:
    """Versions with CHECK (0.4.0 on), for cases that are about what CHECK detects."""
    return request.param
