"""Fixtures of the real-runtime suite: a fresh node per test, with containerd (CRI) or podman on it.

Each test gets its own node and client namespaces, its own private mount namespace and its own
runtime process; the fixture tears all of it down afterwards, pass or fail (see :class:`Node`).
Session-wide are only things that are pure data: the generated CRI stubs and the image archive.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType
from typing import Iterator

import pytest

from cnichain.tools.containerd_node import ocimage
from tests import required

from . import bundlenode, cri_stubs
from .containerd import LOG_NAME, RELEASES, Containerd, Release, start_with_cri
from .containerd import log_tail as containerd_log_tail
from .cri_client import CriClient
from .node import Node


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "declare_capabilities(*names): the node's conflist copy declares these capabilities on "
        "every plugin, so the runtime passes those args to each of them")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Remember each phase's report on the item, so fixtures can add diagnostics on failure."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(scope="session")
def cri_api(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, ModuleType]:
    """``(api_pb2, api_pb2_grpc)`` generated from tests/runtime/cri/api.proto for this session."""
    return cri_stubs.generate(str(tmp_path_factory.mktemp("cri-stubs")))


@pytest.fixture(scope="session")
def image_archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """``(path, name)`` of the busybox OCI archive, built once per session."""
    path = os.path.join(str(tmp_path_factory.mktemp("image")), "busybox-oci.tar")
    return path, ocimage.write_archive(path)


@pytest.fixture(scope="session")
def node_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[bundlenode.NodeImage]:
    """The cnichain image (tree built once per session) in a private podman storage."""
    yield from bundlenode.build_node_image(tmp_path_factory)


@pytest.fixture(params=RELEASES, ids=lambda release: release.label)
def containerd_release(request: pytest.FixtureRequest) -> Release:
    """Each containerd release of the matrix in turn; every containerd case runs on each.

    A release that ./run has not unpacked fails the case under ./run (it fetches all of them) and
    skips it otherwise.
    """
    release: Release = request.param
    if release.bin_dir() is None or not os.path.isfile(release.binary("containerd")):
        required.missing(f"{release.label} (unpacked by ./run tests)")
    return release


@pytest.fixture
def node(agent_socket: str) -> Iterator[Node]:
    """A throwaway node with our plugins installed; everything removed afterwards."""
    the_node = Node(agent_socket=agent_socket)
    try:
        yield the_node
    finally:
        the_node.close()


@dataclass
class CriNode:
    """A node running our own containerd, with the busybox image imported and a CRI client."""

    node: Node
    containerd: Containerd
    cri: CriClient
    image: str


@pytest.fixture
def cri_node(request: pytest.FixtureRequest, containerd_release: Release, node: Node,
             cri_api: tuple[ModuleType, ModuleType], image_archive: tuple[str, str]) -> Iterator[CriNode]:
    """The node with this containerd release up, the image imported and the CRI reporting ready.

    On a failed test the tail of containerd's log (CNI errors land there) goes to the report.
    """
    archive, image = image_archive
    marker = request.node.get_closest_marker("declare_capabilities")
    if marker is not None:
        node.declare_capabilities(list(marker.args))
    try:
        containerd, cri = start_with_cri(containerd_release, node, cri_api, archive, image, node.bin_dir,
                                         node.conf_dir)
    except BaseException:
        print(f"containerd log tail:\n{containerd_log_tail(os.path.join(node.workdir, LOG_NAME))}")
        raise
    try:
        yield CriNode(node=node, containerd=containerd, cri=cri, image=image)
    except BaseException:
        print(f"containerd log tail:\n{containerd.log_tail()}")
        raise
    else:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"containerd log tail:\n{containerd.log_tail()}")
    finally:
        cri.close()
