"""Each name a plugin puts on a node -- nftables tables, the IFB prefix and alias, state
directories and files -- is spelled once, by the module that owns it; every other module (tools,
agent, node, benchmarks, the CLI, the tests and their helpers) imports it.

Checked on the source with ast: string constants, the literal parts of f-strings included,
docstrings excluded (prose may name a table).  A test may spell a value only where it deliberately
checks the wire or disk form against the reference (``ALLOWED``, kept small).
"""

from __future__ import annotations

import ast
import os

from cnichain.plugins.bandwidth import config as bandwidth_config
from cnichain.plugins.bandwidth import kernel as bandwidth_kernel
from cnichain.plugins.bridge import rules as bridge_rules
from cnichain.plugins.host_local import config as host_local_config
from cnichain.plugins.host_local import kernel as host_local_kernel
from cnichain.plugins.portmap import names as portmap_names
from cnichain.plugins.tuning import config as tuning_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("plugins", "common", "podstate", "agent", "node", "tools", "benchmarks", "cli", "tests")


def _owner(module: object) -> str:
    return os.path.relpath(os.path.realpath(module.__file__), ROOT)  # type: ignore[attr-defined]


# value -> (the module that defines it, how a string constant that holds it is matched)
OWNED = {
    portmap_names.TABLE: (_owner(portmap_names), "contains"),
    bridge_rules.MASQ_TABLE: (_owner(bridge_rules), "contains"),
    bridge_rules.SPOOF_TABLE: (_owner(bridge_rules), "contains"),
    bandwidth_config.IFB_PREFIX: (_owner(bandwidth_config), "starts"),
    f"{bandwidth_kernel.IFB_ALIAS_PREFIX} net=": (_owner(bandwidth_kernel), "contains"),  # ifb_alias()
    tuning_config.DEFAULT_DATA_DIR: (_owner(tuning_config), "contains"),
    host_local_config.DEFAULT_DATA_DIR: (_owner(host_local_config), "contains"),
    host_local_kernel.LAST_IP_PREFIX: (_owner(host_local_kernel), "starts"),
}

# (module, value): tests that check the value itself, as the reference writes it
ALLOWED = {
    ("tests/unit/test_bandwidth.py", bandwidth_config.IFB_PREFIX),  # the reference's IFB name for one pod
    ("tests/unit/test_tuning.py", tuning_config.DEFAULT_DATA_DIR),  # the reference's default dataDir
    ("tests/unit/test_host_local_plugin.py", host_local_kernel.LAST_IP_PREFIX),  # the reference's disk layout
    ("tests/unit/test_portmap_del.py", portmap_names.TABLE),  # DEL's transaction, object by object
}


def _modules() -> list[str]:
    out = []
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames if f.endswith(".py")]
    return sorted(out)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def strings_in(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant that is not a docstring."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip]


def spells(text: str, value: str, how: str) -> bool:
    return text.startswith(value) if how == "starts" else value in text


def spelled_outside_owner(module: str, source: str) -> list[str]:
    found = []
    for lineno, text in strings_in(source):
        for value, (owner, how) in OWNED.items():
            if module != owner and (module, value) not in ALLOWED and spells(text, value, how):
                found.append(f"{module}:{lineno}: {text!r} spells {value!r} (owned by {owner})")
    return found


def test_owned_names_are_spelled_only_by_their_owner():
    offenders = []
    for module in _modules():
        with open(os.path.join(ROOT, module), encoding="utf-8") as fh:
            offenders += spelled_outside_owner(module, fh.read())
    assert offenders == []


def test_the_scan_sees_constants_and_f_strings_but_not_docstrings():
    table, prefix = portmap_names.TABLE, bandwidth_config.IFB_PREFIX
    source = f'def f():\n    """{table} in prose"""\n    return f"list table inet {table} {{x}}"\n'
    assert [line for line, _ in strings_in(source)] == [3]
    assert spelled_outside_owner("tools/x.py", source) != []
    assert spelled_outside_owner("tools/x.py", f'X = "{prefix}" + y\nY = "both {prefix}"\n') == [
        f"tools/x.py:1: {prefix!r} spells {prefix!r} (owned by plugins/bandwidth/config.py)"]


def test_allowed_entries_are_still_needed():
    for module, value in ALLOWED:
        with open(os.path.join(ROOT, module), encoding="utf-8") as fh:
            strings = [text for _, text in strings_in(fh.read())]
        assert any(spells(text, value, OWNED[value][1]) for text in strings), (module, value)
