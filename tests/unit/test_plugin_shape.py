"""The shape every plugin keeps, checked on the source so it cannot drift.

* each plugin package has ``config.py`` (pure parsing, with ``load``), ``plan.py`` (pure: what to
  change), ``kernel.py`` (the only module that writes to the kernel or to state files),
  ``plugin.py`` (the handlers) and ``__main__.py``; a plugin that keeps node state (``state`` in
  the registry) also has ``state.py``, whose ``STATE`` is its reconciler face
  (:class:`cnichain.common.plugin_state.PluginState`), and no other plugin has one;
* kernel writes (netlink change requests, nft transactions, sysctl writes, file replacement) and
  pyroute2/nftables imports appear in ``kernel.py`` only, except bridge's nftables side, which has its
  own module (``firewall.py``) beside its netlink one: ``kernel.py`` there applies no nft transaction,
  ``firewall.py`` sends no netlink request, and the rule builders (``rules.py``) stay pure;
* one undo style: a handler rolls back partial work with ``with Rollback() as undo:`` and pushes
  each undo with its arguments bound (``undo.push("what", fn, arg)``), never a lambda, never its own
  ``try``/``except`` around ``unwind()``;
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
# The modules that may write, per plugin: kernel.py everywhere, and bridge's nftables module.
KERNEL_MODULES = {"bridge": ("kernel.py", "firewall.py")}
NFT_WRITE = re.compile(r"nft\.(apply|handle)\(")
NETLINK_WRITE = re.compile(r'\.link\("(add|set|del)"|\.(route|addr|brport|vlan_filter)\("|\.tc\("|nlm_request|sysctl\.')


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


@pytest.mark.parametrize("ptype", TYPES, ids=lambda t: t.name)
def test_a_plugin_keeping_state_has_its_reconciler_face(ptype):
    import importlib

    from cnichain.common.plugin_state import PluginState

    has_file = os.path.isfile(os.path.join(PLUGINS_DIR, ptype.module, "state.py"))
    assert has_file == ptype.state
    if ptype.state:
        face = importlib.import_module(f"cnichain.plugins.{ptype.module}.state").STATE
        assert isinstance(face, PluginState) and face.plugin_type == ptype.name
        assert face.repair is not None or face.leftovers is not None


@pytest.mark.parametrize("plugin", PLUGINS)
def test_only_kernel_writes(plugin):
    offenders = []
    for path in _sources(os.path.join(PLUGINS_DIR, plugin)):
        if os.path.basename(path) in KERNEL_MODULES.get(plugin, ("kernel.py",)):
            continue
        with open(path) as fh:
            text = fh.read()
        for lineno, line in enumerate(text.splitlines(), 1):
            if WRITES.search(line) or HEAVY_IMPORT.match(line):
                offenders.append(f"{os.path.basename(path)}:{lineno}: {line.strip()}")
    assert offenders == []


def _offending_lines(path: str, pattern: re.Pattern) -> list[str]:
    with open(path) as fh:
        return [f"{os.path.basename(path)}:{n}: {line.strip()}"
                for n, line in enumerate(fh.read().splitlines(), 1) if pattern.search(line)]


def test_bridge_keeps_netlink_and_nftables_apart():
    """kernel.py talks netlink and sysctl, firewall.py talks libnftables, rules.py builds JSON."""
    bridge = os.path.join(PLUGINS_DIR, "bridge")
    assert _offending_lines(os.path.join(bridge, "kernel.py"), re.compile(r"\bnft\.|import.*\b(firewall|rules)\b")) == []
    assert _offending_lines(os.path.join(bridge, "firewall.py"), NETLINK_WRITE) == []
    assert _offending_lines(os.path.join(bridge, "firewall.py"), NFT_WRITE) != []
    assert _offending_lines(os.path.join(bridge, "rules.py"), re.compile(r"common\b.*\bnft\b|firewall")) == []


@pytest.mark.parametrize("plugin", PLUGINS)
def test_one_undo_style(plugin):
    offenders = []
    for path in _sources(os.path.join(PLUGINS_DIR, plugin)):
        offenders += _offending_lines(path, re.compile(r"\.unwind\(|\.push\(.*\blambda\b"))
        offenders += [line for line in _offending_lines(path, re.compile(r"\bRollback\("))
                      if "with Rollback() as " not in line]
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

    from cnichain.common.record import RecordBase

    for pkg in (common_pkg, plugins_pkg):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    found: list[type] = []
    todo = [RecordBase]
    while todo:  # bounded by the number of classes defined
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return [c for c in found if c.__module__.startswith(("cnichain.common", "cnichain.plugins"))]


def test_every_record_declares_its_fields_once_as_annotations():
    """A record's fields are its annotations (which mypy reads through ``dataclass_transform``):
    no ``_fields`` or ``__slots__`` list beside them to drift, and every field annotated."""
    classes = [c for c in _record_classes() if c.__module__ != "cnichain.common.record"]
    assert len(classes) >= 15
    for cls in classes:
        name = f"{cls.__module__}.{cls.__qualname__}"
        assert not set(cls.__dict__.get("__slots__", ())) & set(cls._fields), f"{name} lists fields in __slots__"
        annotated: set[str] = set()
        for klass in cls.__mro__:
            annotated |= set(getattr(klass, "__annotations__", {}))
        assert set(cls._fields) <= annotated and cls._fields, name
        own = list(cls.__dict__.get("__annotations__", {}))
        assert list(cls._fields[len(cls._fields) - len(own):]) == own, f"{name}: fields are not its annotations"
    hand_lists = []
    for directory in [COMMON_DIR] + [os.path.join(PLUGINS_DIR, p) for p in PLUGINS]:
        for path in _sources(directory):
            if os.path.basename(path) != "record.py":
                hand_lists += _offending_lines(path, re.compile(r"^\s+(__slots__ = )?_fields = "))
    assert hand_lists == []
