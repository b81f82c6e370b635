"""A tiny OCI image built in Python from Debian's busybox-static, as an OCI layout tar.

No registry is reachable from CI, yet containerd's CRI needs a sandbox ("pause") image and a
container image, and podman needs an image to run.  One single-layer image serves all three: the
static busybox with a handful of applet links, a page for ``httpd`` to serve, and ``sleep`` as the
default command (what a pause container does, minus zombie reaping, which these pods never need).
The archive is what ``ctr images import`` and ``podman load`` both read.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile

BUSYBOX = "/bin/busybox"
# A name under the reserved .invalid domain: nothing can ever be pulled for it, so a runtime that
# does not find the imported image fails at once instead of reaching out to a registry.
IMAGE_NAME = "cnichain.invalid/e2e/busybox:1"
APPLETS = ("sh", "sleep", "httpd", "nc", "cat", "echo", "ip", "ls", "sysctl", "hostname", "true")
PAGE = b"cnichain-e2e-page\n"
PAGE_PATH = "www/index.html"


def oci_arch() -> str:
    """This machine's architecture in OCI's spelling (the import only unpacks a matching one)."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
            "s390x": "s390x", "riscv64": "riscv64"}.get(machine, machine)


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    tar.addfile(info)


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.SYMTYPE
    info.linkname = target
    info.mode = 0o777
    tar.addfile(info)


def layer_bytes(busybox: str = BUSYBOX) -> bytes:
    """The root filesystem as an uncompressed tar (a valid OCI layer as it is)."""
    with open(busybox, "rb") as fh:
        binary = fh.read()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "www"):
            _add_dir(tar, d)
        _add_file(tar, "bin/busybox", binary, 0o755)
        for applet in APPLETS:
            _add_link(tar, f"bin/{applet}", "busybox")
        _add_file(tar, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", 0o644)
        _add_file(tar, "etc/group", b"root:x:0:\n", 0o644)
        _add_file(tar, PAGE_PATH, PAGE, 0o644)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _add_file(tar, "blobs/sha256/" + digest.split(":", 1)[1], data, 0o644)
    return {"digest": digest, "size": len(data)}


def _json(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(path: str, name: str = IMAGE_NAME, busybox: str = BUSYBOX) -> str:
    """Write an OCI image layout tar of the busybox image to ``path``; return the image name.

    The index names the image twice: ``io.containerd.image.name`` (the full reference ctr uses)
    and ``org.opencontainers.image.ref.name`` (what podman reads).
    """
    layer = layer_bytes(busybox)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = _json({
        "architecture": oci_arch(),
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sleep", "2147483647"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(tar, layer)}
        config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(tar, config)}
        manifest = _json({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        })
        manifest_desc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **_blob(tar, manifest)}
        manifest_desc["platform"] = {"architecture": oci_arch(), "os": "linux"}
        manifest_desc["annotations"] = {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name}
        _add_file(tar, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), 0o644)
        _add_file(tar, "index.json", _json({"schemaVersion": 2, "manifests": [manifest_desc]}), 0o644)
    return name
