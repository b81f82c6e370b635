"""The bundled tree (node/bundle/) in an empty root: no /bin/sh, no host libc, no Python outside it.

Each command runs chrooted into a temp directory holding only the tree (bind-mounted read-only at
its real prefix), /dev/null and /proc, in a private mount namespace (tests/emptyroot.py).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cnichain.node import native_shim
from cnichain.node.bundle import executables, layout
from cnichain.node.launchers import PLUGINS
from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR as HOST_LOCAL_DATA_DIR
from cnichain.plugins.portmap import names as pm_names
from tests import required
from tests.emptyroot import run_in_root

pytestmark = pytest.mark.integration

PREFIX = layout.DEFAULT_PREFIX


def run(bundle, tmp_path, argv, env=None, stdin=b"", netns=None, binds=()) -> subprocess.CompletedProcess:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    tree = os.path.join(bundle.out, PREFIX.lstrip("/"))
    return run_in_root(str(root), argv, [(tree, PREFIX, True), *binds], netns=netns, env=env, input=stdin)


def test_interpreter_points_into_the_tree(bundle):
    python = os.path.join(bundle.tree, "bin", f"python{layout.PYTHON_VERSION}")
    final = layout.version_dir(PREFIX, bundle.tree_id)
    interp = subprocess.run(["patchelf", "--print-interpreter", python], capture_output=True, text=True, check=True)
    rpath = subprocess.run(["patchelf", "--print-rpath", python], capture_output=True, text=True, check=True)
    assert interp.stdout.strip() == f"{final}/lib/{layout.loader_name()}"
    assert rpath.stdout.strip() == f"{final}/lib"
    dyn = subprocess.run(["readelf", "-d", python], capture_output=True, text=True)
    if dyn.returncode == 0:  # binutils present: RPATH, not RUNPATH (dlopen by name needs it)
        assert "(RPATH)" in dyn.stdout and "(RUNPATH)" not in dyn.stdout
    assert os.readlink(os.path.join(bundle.out, layout.current_link(PREFIX).lstrip("/"))) == f"versions/{bundle.tree_id}"


def test_pyc_are_unchecked_hash_based(bundle):
    pyc = os.path.join(bundle.tree, layout.SITE_REL, "cnichain/common/__pycache__/skel.cpython-311.pyc")
    with open(pyc, "rb") as fh:
        head = fh.read(8)
    assert int.from_bytes(head[4:8], "little") == 0b01  # hash-based, check_source off


def test_manifest_names_the_carried_packages(bundle):
    pkgs = {name.split(":")[0] for name in bundle.manifest["debian_packages"]}
    assert {"libc6", "python3.11-minimal", "libpython3.11-stdlib", "libnftables1", "python3-nftables"} <= pkgs
    assert {"cnichain", "pyroute2", "typer"} <= set(bundle.manifest["python_distributions"])
    assert bundle.manifest["files_without_package"] == []
    assert bundle.manifest["tree_id"] == bundle.tree_id and bundle.manifest["prefix"] == PREFIX


def test_version_of_every_plugin_in_an_empty_root(bundle, tmp_path):
    for plugin_type in PLUGINS:
        out = run(bundle, tmp_path, [f"{PREFIX}/bin/{plugin_type}"], env={"CNI_COMMAND": "VERSION"})
        assert out.returncode == 0, (plugin_type, out.stderr)
        assert "1.1.0" in json.loads(out.stdout)["supportedVersions"]


def test_cli_version_verbose_in_an_empty_root(bundle, tmp_path):
    out = run(bundle, tmp_path, [f"{layout.current_link(PREFIX)}/{layout.CLI_REL}", "version", "--verbose"])
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert bundle.tree_id in text and "libnftables1" in text and "python3.11-minimal" in text


def test_host_local_add_del_in_an_empty_root(bundle, tmp_path):
    conf = {"cniVersion": "1.0.0", "name": "bundlenet", "type": "bridge",
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.123.0.0/24"}]], "dataDir": HOST_LOCAL_DATA_DIR}}
    (tmp_path / "root" / "var/lib/cni").mkdir(parents=True)
    env = {"CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/none", "CNI_IFNAME": "eth0", "CNI_PATH": f"{PREFIX}/bin"}
    add = run(bundle, tmp_path, [f"{PREFIX}/bin/host-local"], env=dict(env, CNI_COMMAND="ADD"), stdin=json.dumps(conf).encode())
    assert add.returncode == 0, add.stdout + add.stderr
    assert json.loads(add.stdout)["ips"][0]["address"] == "10.123.0.2/24"
    reservation = tmp_path / "root" / HOST_LOCAL_DATA_DIR.lstrip("/") / "bundlenet" / "10.123.0.2"
    assert reservation.exists()
    dele = run(bundle, tmp_path, [f"{PREFIX}/bin/host-local"], env=dict(env, CNI_COMMAND="DEL"), stdin=json.dumps(conf).encode())
    assert dele.returncode == 0, dele.stdout + dele.stderr
    assert not reservation.exists()


def test_portmap_add_del_in_an_empty_root(bundle, tmp_path, lab):
    pod = lab.netns("pod")
    lab.run(lab.node, "ip", "link", "add", "bbr0", "type", "bridge")
    lab.run(lab.node, "ip", "addr", "add", "10.124.0.1/24", "dev", "bbr0")
    lab.run(lab.node, "ip", "link", "set", "bbr0", "up")
    conf = {"cniVersion": "1.0.0", "name": "bundlenet", "type": "portmap",
            "prevResult": {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": pod}],
                           "ips": [{"address": "10.124.0.5/24", "interface": 0}]},
            "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]}}
    env = {"CNI_CONTAINERID": "bundlepod", "CNI_NETNS": pod, "CNI_IFNAME": "eth0", "CNI_PATH": f"{PREFIX}/bin"}
    binds = [(pod, pod, False)]
    add = run(bundle, tmp_path, [f"{PREFIX}/bin/portmap"], env=dict(env, CNI_COMMAND="ADD"),
              stdin=json.dumps(conf).encode(), netns=lab.node, binds=binds)
    assert add.returncode == 0, add.stdout + add.stderr
    listing = lab.run(lab.node, "nft", "list", "table", "inet", pm_names.TABLE).stdout
    assert "18080" in listing
    dele = run(bundle, tmp_path, [f"{PREFIX}/bin/portmap"], env=dict(env, CNI_COMMAND="DEL"),
               stdin=json.dumps(conf).encode(), netns=lab.node, binds=binds)
    assert dele.returncode == 0, dele.stdout + dele.stderr
    after = lab.run(lab.node, "nft", "list", "table", "inet", pm_names.TABLE, check=False).stdout
    assert "18080" not in after


MAPS_PROBE = (
    "import sys; sys.path.insert(0, sys.prefix + '/lib/python3.11/site-packages')\n"
    "import cnichain.plugins.portmap.plugin, cnichain.plugins.bridge.plugin, pyroute2, nftables, ssl, sqlite3\n"
    "nftables.Nftables()\n"
    "from pyroute2 import IPRoute\n"
    "IPRoute().close()\n"
    "print(open('/proc/self/maps').read())\n"
)


def test_a_plugin_process_maps_only_files_of_the_tree(bundle, tmp_path):
    out = run(bundle, tmp_path, [f"{PREFIX}/cnichain/current/bin/python3", "-IS", "-c", MAPS_PROBE])
    assert out.returncode == 0, out.stderr
    files = {line.split(None, 5)[5] for line in out.stdout.decode().splitlines() if len(line.split(None, 5)) == 6}
    backed = {f for f in files if f.startswith("/")}
    final = layout.version_dir(PREFIX, bundle.tree_id) + "/"
    assert backed and all(f.startswith(final) for f in backed), sorted(f for f in backed if not f.startswith(final))
    assert any("libnftables.so.1" in f for f in backed) and any(f.endswith(layout.loader_name()) for f in backed)


def test_launcher_pins_imports_to_the_version_current_named_at_start(bundle, tmp_path):
    """A launcher reaches the interpreter through ``current``; its import path must name the version dir."""
    launcher = os.path.join(bundle.out, PREFIX.lstrip("/"), "bin", native_shim.COLD_DIR, "portmap")
    if not os.path.exists(launcher):  # a tree without a native shim: the executable is the launcher
        launcher = os.path.join(bundle.out, PREFIX.lstrip("/"), "bin", "portmap")
    with open(launcher) as fh:
        head = fh.read().split("from cnichain.common.shim", 1)[0].split("from cnichain.plugins", 1)[0]
    assert_path_pinned_to_version(bundle, tmp_path, head)


def test_executables_are_native_shims_falling_back_to_the_trees_launchers(bundle):
    """When the tree carries the shim, each executable is that shim, configured with the tree's
    launcher at its final path under the prefix as its cold fallback (and the launcher is there)."""
    if executables.tree_shim(bundle.tree) is None:
        required.missing("the native shim in the tree (shim/build.sh, run by ./run)")
    bin_out = os.path.join(bundle.out, PREFIX.lstrip("/"), "bin")
    for plugin_type in PLUGINS:
        with open(os.path.join(bin_out, plugin_type), "rb") as fh:
            config = native_shim.read_config(fh.read())
        assert config == native_shim.ShimConfig(plugin_type, "/run/cnichain/agent.sock",
                                                f"{PREFIX}/bin/{native_shim.COLD_DIR}/{plugin_type}")
        with open(os.path.join(bin_out, native_shim.COLD_DIR, plugin_type)) as fh:
            text = fh.read()
        assert text.startswith(f"#!{layout.launcher_python(PREFIX)} -IS\n") and "forward(" not in text


def test_cli_pins_imports_to_the_version_current_named_at_start(bundle, tmp_path):
    """The image's entrypoint reaches the CLI through ``current``; the agent it starts must import
    from its own version directory even after ``current`` is switched (its workers enter the host)."""
    cli = os.path.join(bundle.tree, layout.CLI_REL)
    with open(cli) as fh:
        head = fh.read().split("from cnichain.cli.app", 1)[0]
    assert_path_pinned_to_version(bundle, tmp_path, head)


def assert_path_pinned_to_version(bundle, tmp_path, head: str) -> None:
    """Run a script's import-path preamble (``head``, its shebang line dropped) through ``current``
    in the empty root: every import path under the prefix is in the tree's own version directory."""
    probe = head.split("\n", 1)[1] + "import json\nprint(json.dumps(sys.path))\n"
    out = run(bundle, tmp_path, [f"{layout.current_link(PREFIX)}/{layout.PYTHON_REL}", "-IS", "-c", probe])
    assert out.returncode == 0, out.stderr
    final = layout.version_dir(PREFIX, bundle.tree_id)
    paths = [p for p in json.loads(out.stdout) if p.startswith(PREFIX)]
    assert paths[0] == f"{final}/{layout.SITE_REL}"
    assert all(p.startswith(final + "/") for p in paths), paths
