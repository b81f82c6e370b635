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

from cnichain.node import install as installer
from cnichain.tools.lab import Lab
from cnichain.tools.runtime import Runtime
from tests import required
from tests.specver import ALL_VERSIONS, CHAINING_VERSIONS, CHECK_VERSIONS

REFERENCE_DIR = os.environ.get("CNICHAIN_REFERENCE_DIR", "/usr/lib/cni")


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
    _warm_pass_only_what_the_agent_serves(config, items)
    if os.geteuid() == 0 and shutil.which("ip"):
        return
    skip = pytest.mark.skip(reason="integration tests need root and iproute2")
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


def _warm_pass_only_what_the_agent_serves(config: Any, items: list) -> None:
    """With CNICHAIN_TEST_AGENT=1 (CI's warm pass) keep only the tests whose plugins the session
    agent serves (those using ``plugin_dir`` or ``agent_socket``); the rest would repeat the cold
    pass exactly."""
    if os.environ.get("CNICHAIN_TEST_AGENT") != "1":
        return
    served = {"plugin_dir", "agent_socket"}
    keep = [item for item in items if served & set(getattr(item, "fixturenames", ()))]
    if len(keep) != len(items):
        kept = {id(item) for item in keep}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
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
    with running_agent(os.path.join(str(folder), "agent.sock")) as agent:
        yield agent.socket_path


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory, agent_socket: str) -> str:
    """A bin dir with one executable per cnichain plugin, written by the real installer: Python
    launchers, or with an agent (CNICHAIN_TEST_AGENT=1) the native shim when it was built."""
    path = str(tmp_path_factory.mktemp("cnibin"))
    if agent_socket and required.under_run():
        required.native_shim()  # warm under ./run means the production path: shim, then agent
    report = installer.install(path, agent_socket=agent_socket)
    assert not report.refused
    if agent_socket and required.under_run():
        with open(os.path.join(path, "bridge"), "rb") as fh:
            assert fh.read(4) == b"\x7fELF", "the warm pass must run the native shim, not Python launchers"
    return path


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


@pytest.fixture(params=ALL_VERSIONS)
def cni_version(request: pytest.FixtureRequest) -> str:
    """Every supported spec version (the reference suite's ``testutils.AllSpecVersions``)."""
    return request.param


@pytest.fixture(params=CHAINING_VERSIONS)
def chained_version(request: pytest.FixtureRequest) -> str:
    """Versions with a prevResult (0.3.0 on): the reference runs its chained plugins' kernel cases
    (portmap, bandwidth) over these, since a 0.1/0.2 config cannot carry a prevResult to them."""
    return request.param


@pytest.fixture(params=CHECK_VERSIONS)
def check_version(request: pytest.FixtureRequest) -> str:
    """Versions with CHECK (0.4.0 on), for cases that are about what CHECK detects."""
    return request.param
