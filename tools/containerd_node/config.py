"""containerd's configuration for a node whose every path lives under the run's directory.

The CRI plugin uses the locally built busybox image as its sandbox image because no registry is
reachable, and plugins that would touch machine-wide places (``/opt/containerd``, btrfs/zfs/
devmapper/aufs/erofs/blockfile snapshotters, tracing, NRI's ``/var/run/nri`` and ``/etc/nri``) are
disabled, as is CDI (``/etc/cdi``, ``/var/run/cdi``); 2.x's image verifier, which the CRI needs,
looks into a directory under the run's instead of ``/opt/containerd/image-verifier``.  The config
is version 2 for 1.x and version 3 (``io.containerd.cri.v1.runtime``/``images``) for 2.x.
"""

from __future__ import annotations

import os

DISABLED = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri",
            "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs",
            "io.containerd.differ.v1.erofs"]
SOCKET_NAME = "containerd.sock"


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _common(workdir: str, version: int) -> list[str]:
    q = _toml_str
    return [
        f"version = {version}",
        f"root = {q(os.path.join(workdir, 'root'))}",
        f"state = {q(os.path.join(workdir, 'state'))}",
        f"disabled_plugins = [{', '.join(q(p) for p in DISABLED)}]",
        "[grpc]",
        f"  address = {q(os.path.join(workdir, SOCKET_NAME))}",
        "[ttrpc]",
        f"  address = {q(os.path.join(workdir, 'containerd.ttrpc.sock'))}",
        "[debug]",
        '  level = "info"',
        "[metrics]",
        '  address = ""',
    ]


def config_text(major: int, workdir: str, bin_dirs: list[str], conf_dir: str, sandbox_image: str) -> str:
    """The config for a containerd of release ``major`` on a node whose every path is under ``workdir``.

    ``bin_dirs`` are the CNI plugin directories in lookup order; 1.x takes exactly one.
    """
    if major >= 2:
        return config_v3(workdir, bin_dirs, conf_dir, sandbox_image)
    if len(bin_dirs) != 1:
        raise ValueError("containerd 1.x takes exactly one CNI bin_dir")
    return config_v2(workdir, bin_dirs[0], conf_dir, sandbox_image)


def config_v3(workdir: str, bin_dirs: list[str], conf_dir: str, sandbox_image: str) -> str:
    """containerd 2.x config (version 3): CRI runtime and image sections, CDI off, our CNI dirs."""
    q = _toml_str
    runtime, images, cri = "plugins.'io.containerd.cri.v1.runtime'", "plugins.'io.containerd.cri.v1.images'", \
        "plugins.'io.containerd.grpc.v1.cri'"
    return "\n".join([
        *_common(workdir, 3),
        f"[{cri}]",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "[plugins.'io.containerd.image-verifier.v1.bindir']",
        f"  bin_dir = {q(os.path.join(workdir, 'image-verifier'))}",
        f"[{images}]",
        '  snapshotter = "overlayfs"',
        f"[{images}.pinned_images]",
        f"  sandbox = {q(sandbox_image)}",
        f"[{images}.registry]",
        '  config_path = ""',
        f"[{runtime}]",
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  restrict_oom_score_adj = true",
        "  enable_cdi = false",
        "  cdi_spec_dirs = []",
        f"[{runtime}.cni]",
        f"  bin_dirs = [{', '.join(q(d) for d in bin_dirs)}]",
        f"  conf_dir = {q(conf_dir)}",
        "  max_conf_num = 1",
        f"[{runtime}.containerd]",
        '  default_runtime_name = "runc"',
        f"[{runtime}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{runtime}.containerd.runtimes.runc.options]",
        '  BinaryName = "runc"',
        "  SystemdCgroup = false",
        "",
    ])


def config_v2(workdir: str, bin_dir: str, conf_dir: str, sandbox_image: str) -> str:
    """containerd 1.6/1.7 config (version 2)."""
    q = _toml_str
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join([
        *_common(workdir, 2),
        f"[{cri}]",
        f"  sandbox_image = {q(sandbox_image)}",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "  enable_selinux = false",
        "  disable_apparmor = true",
        "  restrict_oom_score_adj = true",
        f"[{cri}.cni]",
        f"  bin_dir = {q(bin_dir)}",
        f"  conf_dir = {q(conf_dir)}",
        "  max_conf_num = 1",
        f"[{cri}.containerd]",
        '  snapshotter = "overlayfs"',
        '  default_runtime_name = "runc"',
        f"[{cri}.containerd.runtimes.runc]",
        '  runtime_type = "io.containerd.runc.v2"',
        f"[{cri}.containerd.runtimes.runc.options]",
        '  BinaryName = "runc"',
        "  SystemdCgroup = false",
        "",
    ])
