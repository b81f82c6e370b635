"""The OCI image (node/bundle/image.py): built with podman into private storage, then run.

podman here needs ``--runtime runc`` and explicit ulimits; the storage is a temp dir, reset and
removed afterwards, so the machine's own podman storage is never touched.  podman and patchelf
are parts ./run installs (missing: a failure under ./run).  A container of ours that fails is a
failure, unless a busybox image built here fails the same way: then this machine runs no
container at all (no usable cgroups, for one), a fact of the machine, and the case skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from cnichain.node.bundle import image, layout
from cnichain.tools.containerd_node import ocimage
from tests import required

pytestmark = pytest.mark.integration

RUN_OPTS = ["--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--network", "none"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, bundle):
    required.command("podman")
    required.command("patchelf")
    import tempfile

    work = tmp_path_factory.mktemp("image")
    storage = tempfile.mkdtemp(prefix="cnimg-")  # podman refuses a runroot path over 50 characters
    info = subprocess.run([*image.podman_argv(storage), "info"], capture_output=True, text=True, timeout=120)
    if info.returncode != 0:
        shutil.rmtree(storage, ignore_errors=True)
        required.missing(f"a working podman ('podman info' failed: {info.stderr.strip()[-300:]})")
    try:
        report = image.build_image(str(work / "cnichain.tar"), tag="localhost/cnichain:test", storage=storage,
                                   built=bundle.out)
        yield report, image.podman_argv(storage)
    finally:
        subprocess.run([*image.podman_argv(storage), "system", "reset", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(storage, ignore_errors=True)


def control_podman(storage: str) -> list[str]:
    """podman for the control container, spelled here rather than taken from ``image.podman_argv``:
    a fault in the product's podman options must fail our container, not the control as well
    (which would turn that fault into a skip).  Its own storage, never the machine's."""
    return ["podman", "--root", f"{storage}/root", "--runroot", f"{storage}/run", "--tmpdir", f"{storage}/tmp",
            "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "file"]


def skip_if_no_container_runs(ours: str) -> None:
    """Our container failed (podman's text, ``ours``, is the same for a machine without usable
    cgroups and for an entrypoint that cannot run): skip only when a busybox image built here,
    run by a podman of the test's own options and storage, fails as well, which proves the machine
    runs no container; otherwise return, and the caller's assertion fails with podman's words."""
    import tempfile

    storage = tempfile.mkdtemp(prefix="cnimg-bb-")  # short: podman refuses a runroot over 50 characters
    podman = control_podman(storage)
    try:
        archive = os.path.join(storage, "busybox.tar")
        ocimage.write_archive(archive)
        subprocess.run([*podman, "load", "-i", archive], capture_output=True, timeout=300, check=True)
        control = subprocess.run([*podman, "run", "--rm", *RUN_OPTS, ocimage.IMAGE_NAME, "/bin/true"],
                                 capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run([*podman, "system", "reset", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(storage, ignore_errors=True)
    if control.returncode != 0:
        pytest.skip(f"podman runs no container on this machine (a busybox image fails too): "
                    f"{control.stderr.strip()[-300:]}")


def test_containerfile_is_scratch_plus_tree():
    text = image.containerfile("/opt/cni")
    assert text.startswith("FROM scratch\n") and "COPY opt /opt" in text
    entry = json.loads(text.split("ENTRYPOINT ", 1)[1].splitlines()[0])
    assert entry[0] == layout.launcher_python("/opt/cni") and entry[-1].endswith("/" + layout.CLI_REL)


def test_image_runs_cnichain_version(built):
    report, podman = built
    assert os.path.getsize(report.archive) == report.archive_bytes > 0
    out = subprocess.run([*podman, "run", "--rm", *RUN_OPTS, report.tag, "version", "--verbose"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        skip_if_no_container_runs(out.stderr)
    assert out.returncode == 0, out.stderr
    assert report.tree_id in out.stdout and "libnftables1" in out.stdout


def test_archive_is_an_oci_layout(built):
    import tarfile

    report, _ = built
    with tarfile.open(report.archive) as tar:
        names = set(tar.getnames())
    assert "oci-layout" in names and "index.json" in names


def test_image_installs_onto_a_host_without_python(built, tmp_path):
    """The init container's job: 'node install' from the image into a host dir, then the host's
    plugins run in an empty root made of that dir alone (no Python, no libc, no shell there)."""
    report, podman = built
    host = tmp_path / "host"
    (host / "etc/cni/net.d").mkdir(parents=True)
    try:
        _install_and_run(report, podman, host)
    finally:
        shutil.rmtree(host, ignore_errors=True)  # a 70 MB tree: do not leave it to pytest's retention


def _install_and_run(report, podman, host) -> None:
    from tests.emptyroot import run_in_root

    out = subprocess.run([*podman, "run", "--rm", *RUN_OPTS, "-v", f"{host}:/host", report.tag,
                          "node", "install", "--host-root", "/host"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        skip_if_no_container_runs(out.stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("verified ") == 6
    assert os.readlink(host / "opt/cni/cnichain/current") == f"versions/{report.tree_id}"
    assert (host / "etc/cni/net.d/10-cnichain.conflist").exists()
    ran = run_in_root(str(host), ["/opt/cni/bin/bridge"], [], env={"CNI_COMMAND": "VERSION"})
    assert ran.returncode == 0, ran.stderr
    assert "1.1.0" in json.loads(ran.stdout)["supportedVersions"]
