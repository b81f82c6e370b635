"""What goes into a tree: the host files to copy and where each lands, decided before anything is copied.

Three sources, each recorded for the manifest:
- Debian: the ``python3.11`` binary, the standard library minus what a node never runs (test
  suites, IDLE, tkinter, 2to3, ensurepip, distutils, venv, the static-library config dir),
  ``lib-dynload`` minus test and terminal/GUI modules, the distro nftables binding, and every
  shared library the loader would map for them plus ``libnftables.so.1`` (dlopened by name) and
  ``libgcc_s.so.1`` (dlopened by glibc for thread cancellation), and glibc's loader itself.
- Python distributions: ``cnichain`` and its runtime requirements, file by file from their
  RECORD in the environment running the build, and cnichain's package as imported there (an
  editable install from a checkout, or a wheel).
Kept on purpose: ``ssl``, ``sqlite3`` and ``unittest.mock``, which pyroute2 imports at import time.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import sys
import sysconfig
from dataclasses import dataclass, field

from cnichain.node.bundle import elf
from cnichain.node.bundle.layout import PYTHON_VERSION, SITE_REL, STDLIB_REL, loader_name

STDLIB_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip", "pydoc_data",
                    "distutils", "venv", "__pycache__", "site-packages", "dist-packages", "curses"}
STDLIB_SKIP_FILES = {"turtle.py", "antigravity.py", "this.py", "EXTERNALLY-MANAGED", "sitecustomize.py",
                     "_distutils_system_mod.py"}
DYNLOAD_SKIP = re.compile(r"^(_test|xx|_ctypes_test|_xxsub|_xxtest|_curses|_dbm|_gdbm|nis\.|ossaudiodev|readline|_tkinter)")
DLOPENED = ("libnftables.so.1", "libgcc_s.so.1")


@dataclass
class Plan:
    """Host file -> path relative to the tree, per origin."""

    debian: dict[str, str] = field(default_factory=dict)  # rel -> host path
    dists: dict[str, str] = field(default_factory=dict)  # rel -> host path
    dist_versions: dict[str, str] = field(default_factory=dict)  # distribution -> version
    symlinks: dict[str, str] = field(default_factory=dict)  # rel -> target (relative)
    host_loader: str = ""

    def all_files(self) -> dict[str, str]:
        return {**self.debian, **self.dists}


def base_python() -> str:
    """The distro interpreter behind this (virtual) environment."""
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if sys.version_info[:2] != tuple(int(x) for x in PYTHON_VERSION.split(".")):
        raise RuntimeError(f"the builder must run on Python {PYTHON_VERSION}, not {platform.python_version()}")
    return exe


def lib_dirs() -> list[str]:
    arch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    return [f"/usr/lib/{arch}", f"/lib/{arch}", "/usr/lib64", "/lib64", "/usr/lib", "/lib"]


def _walk_stdlib(stdlib: str, plan: Plan) -> None:
    for dirpath, dirnames, filenames in os.walk(stdlib):
        rel_dir = os.path.relpath(dirpath, stdlib)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in STDLIB_SKIP_DIRS and not d.startswith("config-") and d != "lib-dynload")
        for name in sorted(filenames):
            if name in STDLIB_SKIP_FILES or name.endswith((".pyc", ".exe")):
                continue
            src = os.path.join(dirpath, name)
            if os.path.islink(src) and not os.path.realpath(src).startswith(stdlib + "/"):
                continue  # Debian links a few files to /etc; a node never reads them
            rel = os.path.normpath(os.path.join(STDLIB_REL, rel_dir, name))
            plan.debian[rel] = os.path.realpath(src)


def _walk_dynload(dynload: str, plan: Plan) -> None:
    for name in sorted(os.listdir(dynload)):
        if name.endswith(".so") and not DYNLOAD_SKIP.match(name):
            plan.debian[f"{STDLIB_REL}/lib-dynload/{name}"] = os.path.realpath(os.path.join(dynload, name))


def _requirement_applies(req: str) -> bool:
    """Whether a Requires-Dist line is needed at run time on Linux (no extras, no other OS)."""
    marker = req.partition(";")[2]
    if "extra" in marker:
        return False
    if "Windows" in marker or "win32" in marker or "Darwin" in marker:
        return "!=" in marker
    return True


def _closure(root: str) -> list[importlib.metadata.Distribution]:
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [root]
    while todo:  # bounded by the number of installed distributions
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"distribution {name!r} is not installed in the build environment") from None
        seen[name] = dist
        for req in dist.requires or []:
            if _requirement_applies(req):
                todo.append(re.match(r"[A-Za-z0-9._-]+", req).group(0))  # type: ignore[union-attr]
    return [seen[k] for k in sorted(seen)]


FUZZ_DIR = "cnichain/shim/fuzz/"  # the shim's fuzz harness and corpus: tests only, as in the wheel


def _skipped(rel: str) -> bool:
    return (rel.startswith("..") or "__pycache__" in rel or rel.endswith((".pyc", ".pth"))
            or rel.endswith("/RECORD") or rel.startswith(FUZZ_DIR))


def _add_dists(plan: Plan) -> None:
    for dist in _closure("cnichain"):
        plan.dist_versions[dist.metadata["Name"]] = dist.version
        for f in dist.files or []:
            rel = str(f)
            if _skipped(rel):
                continue
            src = os.path.realpath(str(dist.locate_file(f)))
            if os.path.isfile(src):
                plan.dists[f"{SITE_REL}/{rel}"] = src
    _add_package("cnichain", plan)


def _add_package(name: str, plan: Plan) -> None:
    """Every file of an importable package, read from where it is imported (links followed).

    An editable install's RECORD lists only a ``.pth`` file; the package itself is the checkout's
    ``cnichain/`` directory, whose sub-packages are symlinks.  Walking the imported package gives
    the same files as a wheel's RECORD would, for either kind of install.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.origin:
        raise RuntimeError(f"package {name!r} is not importable in the build environment")
    root = os.path.dirname(spec.origin)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fname in sorted(filenames):
            rel = os.path.relpath(os.path.join(dirpath, fname), os.path.dirname(root))
            if not _skipped(rel):
                plan.dists[f"{SITE_REL}/{rel}"] = os.path.realpath(os.path.join(dirpath, fname))


def _add_nftables(plan: Plan) -> None:
    spec = importlib.util.find_spec("nftables")
    if spec is None or not spec.origin:
        raise RuntimeError("the nftables binding (Debian python3-nftables) is not importable")
    pkg = os.path.dirname(spec.origin)
    for name in sorted(os.listdir(pkg)):
        src = os.path.join(pkg, name)
        if os.path.isfile(src) and not name.endswith(".pyc"):
            plan.debian[f"{SITE_REL}/nftables/{name}"] = os.path.realpath(src)


def plan_tree() -> Plan:
    """Everything to copy, with its destination inside the tree; nothing is written here."""
    plan = Plan()
    python = base_python()
    stdlib = sysconfig.get_paths(vars={"installed_base": sys.base_prefix, "base": sys.base_prefix})["stdlib"]
    plan.debian[f"bin/python{PYTHON_VERSION}"] = python
    plan.symlinks["bin/python3"] = f"python{PYTHON_VERSION}"
    _walk_stdlib(stdlib, plan)
    _walk_dynload(os.path.join(stdlib, "lib-dynload"), plan)
    _add_nftables(plan)
    _add_dists(plan)
    plan.host_loader = os.path.realpath(elf.interpreter_of(python))
    plan.debian[f"lib/{loader_name()}"] = plan.host_loader
    # Every ELF object we carry, plus the libraries loaded by name at run time.
    objects = [python] + [src for rel, src in plan.all_files().items() if rel.endswith(".so") or ".so." in rel]
    objects += [elf.find_library(name, lib_dirs()) for name in DLOPENED]
    libs: dict[str, str] = {}
    for obj in objects:
        if elf.is_elf(obj):
            libs.update(elf.needed_libraries(plan.host_loader, obj))
    for name in DLOPENED:
        libs[name] = elf.find_library(name, lib_dirs())
    for soname, src in sorted(libs.items()):
        if soname == loader_name() or "/" in soname:
            continue
        plan.debian.setdefault(f"lib/{soname}", src)
    return plan
