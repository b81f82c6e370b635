"""Every CLI command prints its help (typer renders help texts as rich markup)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["exec", "install", "uninstall", "conflists", "demo", "lint", "inspect", "gc",
                                     "bench", "agent", "agent status", "version", "node install", "node uninstall",
                                     "node probe"])
def test_every_command_has_working_help(command: str) -> None:
    """Help texts go through rich markup (a stray [..] in an option's help breaks --help) or, for the
    commands that forward to their component, argparse's %-formatting."""
    proc = subprocess.run([sys.executable, "-m", "cnichain.cli.app", *command.split(), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
