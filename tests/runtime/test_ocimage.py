"""The busybox OCI archive is a well-formed image layout (pure file checks, no root needed).

A broken archive shows up in the runtime tests only as a vague import or pull error, so the
layout's own invariants are checked here: every descriptor's digest and size match its blob, the
config's diff_id matches the layer, and the layer holds what the tests run.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from cnichain.tools.containerd_node import ocimage
from tests import required

pytestmark = pytest.mark.runtime


@pytest.fixture(autouse=True)
def _busybox() -> None:
    """busybox-static is a package ./run installs: missing fails under ./run."""
    required.executable(ocimage.BUSYBOX, "busybox-static")


def _blob(tar: tarfile.TarFile, desc: dict) -> bytes:
    member = tar.extractfile("blobs/sha256/" + desc["digest"].split(":", 1)[1])
    assert member is not None
    data = member.read()
    assert len(data) == desc["size"]
    assert "sha256:" + hashlib.sha256(data).hexdigest() == desc["digest"]
    return data


def test_archive_is_a_consistent_oci_layout(tmp_path) -> None:
    path = str(tmp_path / "image.tar")
    name = ocimage.write_archive(path)
    with tarfile.open(path) as tar:
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(tar.extractfile("index.json").read())
        (manifest_desc,) = index["manifests"]
        assert manifest_desc["annotations"]["io.containerd.image.name"] == name
        manifest = json.loads(_blob(tar, manifest_desc))
        config = json.loads(_blob(tar, manifest["config"]))
        (layer_desc,) = manifest["layers"]
        layer = _blob(tar, layer_desc)
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["architecture"] == manifest_desc["platform"]["architecture"] == ocimage.oci_arch()
    with tarfile.open(fileobj=io.BytesIO(layer)) as rootfs:
        names = set(rootfs.getnames())
        assert {"bin/busybox", "bin/httpd", "bin/sleep", ocimage.PAGE_PATH} <= names
        assert rootfs.getmember("bin/httpd").linkname == "busybox"
        assert rootfs.extractfile(ocimage.PAGE_PATH).read() == ocimage.PAGE


def test_archive_is_reproducible(tmp_path) -> None:
    """Same inputs, same bytes: image ids stay stable across runs (no timestamps inside)."""
    first, second = str(tmp_path / "a.tar"), str(tmp_path / "b.tar")
    ocimage.write_archive(first)
    ocimage.write_archive(second)
    with open(first, "rb") as a, open(second, "rb") as b:
        assert a.read() == b.read()
