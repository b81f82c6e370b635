"""Each option set is declared once, by its component: the commands that forward (the agent, the
bench) declare nothing in cli/app.py, print their component's own help, and no other module
declares a ``cnichain`` command line that the CLI declares again."""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import os

import pytest
import typer
from typer.testing import CliRunner

from cnichain.cli.app import FORWARDED, app

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPONENTS = ("agent", "benchmarks", "node", "podstate", "tools")


def _command(*path: str):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


def _component_help(module: str, argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        importlib.import_module(module).main([*argv, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


@pytest.mark.parametrize("name", sorted(FORWARDED))
def test_a_forwarding_command_declares_no_option_of_its_own(name):
    cmd = _command(name)
    assert cmd.params == [], f"cnichain {name} declares {[p.opts for p in cmd.params]}: declare them in {FORWARDED[name][0]}"
    assert cmd.context_settings["ignore_unknown_options"] and cmd.context_settings["help_option_names"] == []


@pytest.mark.parametrize("argv", [["agent"], ["agent", "status"], ["bench"]])
def test_help_is_the_components_own(argv, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    module = FORWARDED[argv[0]][0]
    shown = CliRunner().invoke(app, [*argv, "--help"])
    assert shown.exit_code == 0, shown.output
    assert shown.output == _component_help(module, argv[1:])
    assert f"usage: cnichain {' '.join(argv)}" in shown.output


def test_arguments_reach_the_component_untouched():
    """A value the component refuses is refused by its own parser (argparse's exit 2 and usage)."""
    shown = CliRunner().invoke(app, ["agent", "--reconcile", "sometimes"])
    assert shown.exit_code == 2
    shown = CliRunner().invoke(app, ["bench", "--modes", "nope"])
    assert shown.exit_code == 2


def _declared_programs() -> dict[str, str]:
    """``prog="cnichain X"`` of every ArgumentParser in the components -> the module declaring it."""
    found = {}
    for pkg in COMPONENTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for f in filenames:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    tree = ast.parse(fh.read(), path)
                for node in ast.walk(tree):
                    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "ArgumentParser":
                        for kw in node.keywords:
                            if kw.arg == "prog" and isinstance(kw.value, ast.Constant) and str(kw.value.value).startswith("cnichain "):
                                found[str(kw.value.value)] = os.path.relpath(path, ROOT)
    return found


def test_no_command_line_is_declared_by_a_component_and_again_by_the_cli():
    programs = _declared_programs()
    assert {"cnichain agent", "cnichain agent status", "cnichain bench"} <= set(programs)
    for prog, where in programs.items():
        path = prog.split()[1:]
        assert path[0] in FORWARDED, f"{where} declares '{prog}' but the CLI does not forward to it"
        if len(path) == 1:
            assert _command(*path).params == [], f"'{prog}' is declared in {where} and in cli/app.py"


def test_the_manifests_agent_flags_reach_the_agents_config_through_the_cli(monkeypatch):
    """What the DaemonSet and the systemd unit run (``--opt=value`` and ``--opt value`` alike)."""
    from cnichain.agent import server

    seen = []
    monkeypatch.setattr(server, "run", lambda config: seen.append(config) or 0)
    argv = ["agent", "--socket=/run/x/agent.sock", "--pool=2", "--mount-ns=/proc/1/ns/mnt", "--bin-dir=/opt/cni/bin",
            "--reconcile=dry-run", "--grace", "30"]
    shown = CliRunner().invoke(app, argv)
    assert shown.exit_code == 0, shown.output
    (cfg,) = seen
    assert (cfg.socket_path, cfg.pool_size) == ("/run/x/agent.sock", 2)
    assert (cfg.reconcile.mode, cfg.reconcile.grace, cfg.reconcile.mount_ns) == ("dry-run", 30.0, "/proc/1/ns/mnt")
    assert cfg.reconcile.bin_dirs == ["/opt/cni/bin"]
