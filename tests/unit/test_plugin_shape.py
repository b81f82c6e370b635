"""The shape every plugin keeps, checked on the source so it cannot drift.

* each plugin package has ``config.py`` (pure parsing, with ``load``), ``plan.py`` (pure: what to
  change), ``kernel.py`` (the only module that writes to the kernel or to state files),
  ``plugin.py`` (the handlers) and ``__main__.py``;
* kernel writes (netlink change requests, nft transactions, sysctl writes, file replacement) and
  pyroute2/nftables imports appear in ``kernel.py`` only;
* no broad ``except`` swallows errors: ``except Exception`` exists only in the skeleton, which turns
  unexpected exceptions into code 999, and ``except BaseException`` only to clean up and re-raise.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

import cnichain.common as common_pkg
import cnichain.plugins as plugins_pkg
from cnichain.plugins.registry import TYPES

PLUGINS_DIR = os.path.dirname(plugins_pkg.__file__)
COMMON_DIR = os.path.dirname(common_pkg.__file__)
PLUGINS = sorted(t.module for t in TYPES)
SHAPE = ("config.py", "plan.py", "kernel.py", "plugin.py", "__main__.py")
WRITES = re.compile(
    r"sysctl\.(write|ensure)\(|nft\.(apply|handle)\(|os\.(replace|unlink|link|makedirs|write)\("
    r'|\.link\("(add|set|del)"|\.(route|addr|brport|vlan_filter)\("|\.tc\("|nlm_request'
)
HEAVY_IMPORT = re.compile(r"^\s*(import|from)\s+(pyroute2|nftables)\b", re.M)


def _sources(directory: str) -> list[str]:
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".py"))


def test_every_plugin_package_is_registered():
    packages = {d for d in os.listdir(PLUGINS_DIR) if os.path.isfile(os.path.join(PLUGINS_DIR, d, "plugin.py"))}
    assert packages == set(PLUGINS)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_every_plugin_has_the_shape(plugin):
    files = set(os.listdir(os.path.join(PLUGINS_DIR, plugin)))
    assert set(SHAPE) <= files
    with open(os.path.join(PLUGINS_DIR, plugin, "config.py")) as fh:
        tree = ast.parse(fh.read())
    assert "load" in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("plugin", PLUGINS)
def test_only_kernel_writes(plugin):
    offenders = []
    for path in _sources(os.path.join(PLUGINS_DIR, plugin)):
        if os.path.basename(path) == "kernel.py":
            continue
        with open(path) as fh:
            text = fh.read()
        for lineno, line in enumerate(text.splitlines(), 1):
            if WRITES.search(line) or HEAVY_IMPORT.match(line):
                offenders.append(f"{os.path.basename(path)}:{lineno}: {line.strip()}")
    assert offenders == []


def _broad_handlers(path: str) -> list[str]:
    with open(path) as fh:
        tree = ast.parse(fh.read())
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler):
            continue
        name = node.type.id if isinstance(node.type, ast.Name) else None
        if node.type is None or name == "Exception":
            out.append(f"{os.path.basename(path)}:{node.lineno}: except {name or ''}")
        elif name == "BaseException" and not isinstance(node.body[-1], ast.Raise):
            out.append(f"{os.path.basename(path)}:{node.lineno}: except BaseException without re-raise")
    return out


def test_no_broad_except_outside_the_skeleton():
    found = []
    for directory in [COMMON_DIR] + [os.path.join(PLUGINS_DIR, p) for p in PLUGINS]:
        for path in _sources(directory):
            found += [f for f in _broad_handlers(path) if not f.startswith("skel.py:")]
    assert found == []
    assert len(_broad_handlers(os.path.join(COMMON_DIR, "skel.py"))) == 1  # dispatch's code-999 net


def _record_classes() -> list[type]:
    """Every record class defined under common/ and plugins/ (imported, so subclasses register)."""
    import importlib
    import pkgutil

    from cnichain.common.record import Record

    for pkg in (common_pkg, plugins_pkg):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    found: list[type] = []
    todo = [Record]
    while todo:  # bounded by the number of classes defined
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return [c for c in found if c.__module__.startswith(("cnichain.common", "cnichain.plugins"))]


def test_every_record_field_is_visible_to_a_type_checker():
    """A field listed in ``_fields`` but not annotated in the class is invisible to mypy
    (``"Plugin" has no attribute "add"``) unless ``__init__`` assigns it as an attribute."""
    import inspect

    from cnichain.common.record import FrozenRecord

    classes = _record_classes()
    assert len(classes) >= 15
    for cls in classes:
        annotated: set[str] = set()
        for klass in cls.__mro__:
            annotated |= set(getattr(klass, "__annotations__", {}))
        if issubclass(cls, FrozenRecord):
            missing = [f for f in cls._fields if f not in annotated]
            assert not missing, f"{cls.__module__}.{cls.__qualname__} does not annotate {missing}"
        else:  # a mutable Record assigns self.<field> in __init__, which a checker reads
            body = inspect.getsource(cls.__init__)
            missing = [f for f in cls._fields if f not in annotated and f"self.{f} " not in body
                       and f"self.{f}:" not in body]
            assert not missing, f"{cls.__module__}.{cls.__qualname__} never assigns {missing}"
