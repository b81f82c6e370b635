"""plugins/registry.py is the one list of plugin types: everything else must agree with it."""

from __future__ import annotations

import importlib
import os
import tomllib

from cnichain.plugins import registry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def test_every_registered_type_is_a_plugin_of_that_name():
    for t in registry.TYPES:
        plugin = importlib.import_module(f"cnichain.plugins.{t.module}.plugin").PLUGIN
        assert plugin.name == t.name


def test_no_console_script_is_named_like_a_plugin_or_system_tool():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert set(scripts) == {"cnichain"}


def test_readme_describes_every_plugin():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    for t in registry.TYPES:
        assert f"- **{t.name}**" in readme, t.name
