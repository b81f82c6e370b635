"""Build a self-contained runtime tree plus launchers under ``OUT/<prefix>/``.

Order: plan (sources.py) -> copy into a staging directory -> tree id from the copied bytes and
the prefix -> rename to ``versions/<id>`` -> patch the interpreter to the carried loader and lib
dir at their final absolute paths -> compile ``.pyc`` (unchecked-hash: copies reset mtimes, and
the tree never changes after the build) -> manifest -> ``current`` symlink -> executables (the
native shim the tree carries, with the tree's Python launcher as its cold fallback; see
executables.py).
The tree id depends only on what was copied and on the prefix, so the same inputs give the same
directory name, and a security update on the build host gives a new one.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import os
import py_compile
import shutil
import time
from dataclasses import dataclass

from cnichain.common import atomic
from cnichain.node.bundle import debian, elf, executables, layout
from cnichain.node.bundle.sources import Plan, plan_tree

FORMAT = 1
# The import path is pinned to the version directory, as a plugin launcher's is: the image's
# entrypoint reaches the interpreter through ``current``, and the agent's workers enter the host's
# mount namespace, where ``current`` may name another version after an upgrade; the version
# directory of the agent's own tree is there too (the init container installed it; two are kept).
CLI_SOURCE = """#!{python} -IS
# cnichain operator CLI of this tree (written by the bundle builder; do not edit)
import sys
{path}from cnichain.cli.app import main
sys.exit(main())
"""


@dataclass
class BuildReport:
    tree: str  # OUT path of versions/<id>
    tree_id: str
    prefix: str
    launchers: list[str]  # every file written under <prefix>/bin (native shims and cold launchers)
    size_bytes: int
    files: int
    seconds: float
    manifest: dict


def _copy(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)
    shutil.copyfile(src, dst)
    exec_bit = os.stat(src).st_mode & 0o111 or elf.is_elf(src)
    os.chmod(dst, 0o755 if exec_bit else 0o644)


def _tree_id(staging: str, plan: Plan, prefix: str, stamp: str = "") -> str:
    h = hashlib.sha256(f"cnichain-tree/{FORMAT}\0{prefix}\0".encode())
    if stamp:  # a rebuild of the same inputs that must still get a version directory of its own
        h.update(f"stamp\0{stamp}\0".encode())
    for rel in sorted(plan.all_files()):
        with open(os.path.join(staging, rel), "rb") as fh:
            h.update(rel.encode() + b"\0" + hashlib.sha256(fh.read()).digest())
    for rel, target in sorted(plan.symlinks.items()):
        h.update(f"{rel}\0->{target}\0".encode())
    return h.hexdigest()[:16]


def _tree_size(path: str) -> tuple[int, int]:
    total = count = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            total += st.st_size
            count += 1
    return total, count


def _write_file(path: str, data: bytes, mode: int) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    atomic.write_file(path, data, mode)


def _manifest(plan: Plan, prefix: str, tree_id: str, stamp: str = "") -> dict:
    owners = debian.owners(sorted(set(plan.debian.values())))
    unknown = sorted(rel for rel, src in plan.debian.items() if src not in owners)
    from importlib.metadata import version

    return {
        "format": FORMAT,
        "cnichain": version("cnichain"),
        "tree_id": tree_id,
        "prefix": prefix,
        "python": layout.PYTHON_VERSION,
        "debian_packages": debian.versions({o.split(":")[0] for o in owners.values()}),
        "python_distributions": dict(sorted(plan.dist_versions.items())),
        "files_without_package": unknown,
        **({"build_stamp": stamp} if stamp else {}),
    }


def build(out: str, prefix: str = layout.DEFAULT_PREFIX, agent_socket: str = "/run/cnichain/agent.sock",
          stamp: str = "") -> BuildReport:
    """Build the tree for ``prefix`` under ``out`` and return what was built.

    ``stamp``: a build label (e.g. a CI build number) recorded in the manifest and hashed into the
    tree id, so a rebuild of identical inputs still installs as a new version; "" adds nothing.
    """
    from cnichain.node import launchers

    started = time.monotonic()
    layout.check_abs_path(prefix, "prefix")
    out = os.path.abspath(out)
    if out == "/":
        raise layout.LayoutError("OUT must not be /")
    shebang = f"#!{layout.launcher_python(prefix)} -IS"
    if len(shebang) + 40 > layout.MAX_SHEBANG:  # room for versions/<id> in the CLI's shebang
        raise layout.LayoutError(f"prefix {prefix!r} is too long for a shebang line")
    plan = plan_tree()
    versions = layout.under(out, layout.versions_dir(prefix))
    os.makedirs(versions, mode=0o755, exist_ok=True)
    staging = os.path.join(versions, f".staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for rel, src in sorted(plan.all_files().items()):
            _copy(src, os.path.join(staging, rel))
        for rel, target in plan.symlinks.items():
            os.symlink(target, os.path.join(staging, rel))
        tree_id = _tree_id(staging, plan, prefix, stamp)
        final_host = layout.version_dir(prefix, tree_id)
        final = layout.under(out, final_host)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    elf.patch_interpreter(os.path.join(final, f"bin/python{layout.PYTHON_VERSION}"),
                          f"{final_host}/lib/{layout.loader_name()}", f"{final_host}/lib")
    stdlib = os.path.join(final, layout.STDLIB_REL)
    ok = compileall.compile_dir(stdlib, ddir=f"{final_host}/{layout.STDLIB_REL}", quiet=1, workers=0,
                                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    if not ok:
        raise RuntimeError("compileall failed on the carried sources")
    manifest = _manifest(plan, prefix, tree_id, stamp)
    _write_file(os.path.join(final, layout.MANIFEST_REL), json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n", 0o644)
    _write_file(os.path.join(final, layout.CLI_REL),
                CLI_SOURCE.format(python=f"{final_host}/{layout.PYTHON_REL}",
                                  path=launchers._pinned_prefix_path([layout.SITE_REL])).encode(), 0o755)
    link = layout.under(out, layout.current_link(prefix))
    tmp_link = link + ".tmp-build"
    if os.path.lexists(tmp_link):
        os.unlink(tmp_link)
    os.symlink(f"versions/{tree_id}", tmp_link)
    os.replace(tmp_link, link)
    names = {plugin_type: module for plugin_type, module in sorted(launchers.PLUGINS.items())}
    written = []
    for host_path, data, _entry in executables.planned(prefix, layout.bin_dir(prefix), names, agent_socket,
                                                       executables.tree_shim(final)):
        path = layout.under(out, host_path)
        _write_file(path, data, 0o755)
        written.append(path)
    size, count = _tree_size(final)
    return BuildReport(final, tree_id, prefix, written, size, count, time.monotonic() - started, manifest)
