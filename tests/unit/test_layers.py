"""Import arrows point down: ``cli`` -> ``benchmarks`` -> ``agent``/``node``/``tools`` -> ``plugins`` -> ``common``.

Plugins run once per pod and must not drag in the agent, the node tooling or typer; common is the
floor every plugin stands on, so it imports nothing of ours above it; the agent, node and tools
layers are reusable without the typer layer.  Checked on every module's source (ast), including
imports inside functions and under ``TYPE_CHECKING``, so a lazy import cannot hide a wrong arrow.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# layer -> the top-level packages of ours it must never import
FORBIDDEN = {
    "common": {"plugins", "agent", "node", "tools", "benchmarks", "cli"},
    "plugins": {"agent", "node", "tools", "benchmarks", "cli"},
    "agent": {"benchmarks", "cli"},
    "node": {"benchmarks", "cli"},
    "tools": {"benchmarks", "cli"},
    "benchmarks": {"cli"},
}


def _modules(layer: str) -> list[str]:
    out = []
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


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_no_import_points_up(layer):
    assert _modules(layer), layer
    assert _violations(layer) == []


def test_the_check_sees_relative_and_lazy_imports(tmp_path, monkeypatch):
    """The checker itself: a relative import climbing into cli and a lazy one are both found."""
    pkg = tmp_path / "plugins" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text("from ...cli import app\ndef f():\n    import cnichain.agent.server\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", str(tmp_path))
    assert _imported(str(pkg / "m.py")) == {"cnichain.cli", "cnichain.agent.server"}
    assert len(_violations("plugins")) == 2
