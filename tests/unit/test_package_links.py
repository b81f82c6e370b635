"""The committed ``cnichain/`` package: what makes ``pip install -e .`` and a bare checkout import
the same modules a wheel installs."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "cnichain")
LINKED = ("agent", "benchmarks", "cli", "common", "conflists", "node", "plugins", "podstate", "shim", "tools")


def test_every_top_level_package_is_a_relative_link():
    entries = sorted(e for e in os.listdir(PACKAGE) if e != "__pycache__")
    assert entries == sorted(LINKED + ("__init__.py",))
    for name in LINKED:
        path = os.path.join(PACKAGE, name)
        # relative, so a clone anywhere (or a copy of the tree) resolves to its own folders
        assert os.path.islink(path) and os.readlink(path) == os.path.join("..", name)
        assert os.path.samefile(path, os.path.join(ROOT, name))


def test_the_venv_imports_this_checkout():
    """./run installs in editable mode: the modules the tests run are the files in this checkout."""
    import cnichain.plugins.portmap.plugin as module

    assert os.path.samefile(os.path.dirname(os.path.dirname(os.path.dirname(module.__file__))), PACKAGE)


def test_a_bare_checkout_on_pythonpath_imports_every_plugin():
    code = ("import importlib\nfrom cnichain.plugins import registry\n"
            "for m in registry.MODULES.values(): importlib.import_module(f'cnichain.plugins.{m}.plugin')\n"
            "import cnichain.common; print(cnichain.common.__file__)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {ROOT!r}); {code}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == os.path.join(PACKAGE, "common", "__init__.py")
