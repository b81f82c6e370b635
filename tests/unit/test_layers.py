"""The floors of the code, bottom up; an import may only point down (or sideways within a floor):

    common < plugins < podstate < node < agent < tools < benchmarks < cli

``common`` is what every plugin stands on; ``plugins`` run once per pod and drag in nothing above
them (no agent, no typer); ``podstate`` is pod state and the runtime's side of it (the libcni-like
runner, the CRI client, the result cache, inspect and gc), which the agent, the CLI, the bench
and the tests all read; ``node`` puts the tree and the launchers onto a node; ``agent`` serves
requests and reconciles; ``tools`` are what operators and tests run by hand (the node probe asks
the agent); ``benchmarks`` measure all of it; ``cli`` is the typer layer over the lot.  Data
packages (``conflists``, ``shim``) sit beside ``common`` and import nothing.

A strict order means no arrow runs back up and no two floors import each other, so the import
graph of top-level packages has no circle.  Checked on every module's source (ast), including
imports inside functions and under ``TYPE_CHECKING``, so a lazy import cannot hide a wrong arrow.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FLOORS = ("common", "plugins", "podstate", "node", "agent", "tools", "benchmarks", "cli")
DATA = ("conflists", "shim")  # below everything, importing nothing of ours
# floor -> the top-level packages of ours it must never import: every floor above it
FORBIDDEN = {floor: set(FLOORS[i + 1:]) for i, floor in enumerate(FLOORS)}
FORBIDDEN.update({d: set(FLOORS) for d in DATA})


def _modules(layer: str) -> list[str]:
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, layer)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        out += [os.path.join(dirpath, f) for f in filenames if f.endswith(".py")]
    return sorted(out)


def _imported(path: str) -> set[str]:
    """Absolute names of the ``cnichain`` modules ``path`` imports (relative imports resolved)."""
    package = ["cnichain", *os.path.relpath(os.path.dirname(path), ROOT).split(os.sep)]
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            if mod == "cnichain":  # from cnichain import agent
                names |= {f"cnichain.{a.name}" for a in node.names}
    return {n for n in names if n.startswith("cnichain.")}


def _violations(layer: str) -> list[str]:
    bad = []
    for path in _modules(layer):
        for name in sorted(_imported(path)):
            top = name.split(".")[1]
            if top in FORBIDDEN[layer]:
                bad.append(f"{os.path.relpath(path, ROOT)} imports {name}")
    return bad


@pytest.mark.parametrize("layer", FLOORS)
def test_no_import_points_up(layer):
    assert _modules(layer), layer
    assert _violations(layer) == []


@pytest.mark.parametrize("layer", DATA)
def test_data_packages_import_nothing_of_ours(layer):
    assert _violations(layer) == []


def test_every_top_level_package_has_a_floor():
    """A new top-level package gets a place in the order before it can import anything."""
    linked = {e for e in os.listdir(os.path.join(ROOT, "cnichain")) if os.path.islink(os.path.join(ROOT, "cnichain", e))}
    assert linked == set(FLOORS) | set(DATA)


def test_the_check_sees_relative_and_lazy_imports(tmp_path, monkeypatch):
    """The checker itself: a relative import climbing into cli and a lazy one are both found."""
    pkg = tmp_path / "plugins" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text("from ...cli import app\ndef f():\n    import cnichain.agent.server\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", str(tmp_path))
    assert _imported(str(pkg / "m.py")) == {"cnichain.cli", "cnichain.agent.server"}
    assert len(_violations("plugins")) == 2
