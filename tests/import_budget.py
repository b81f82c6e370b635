"""Which modules a launcher imports for one command (``-X importtime``), and the budgets: shared
by the unit import-budget tests and the root-only ones in tests/integration/."""

from __future__ import annotations

import subprocess

from cnichain.node import launchers

ALWAYS_FORBIDDEN = ("typer", "click", "rich", "cnichain.cli", "logging")
HEAVY = ("pyroute2", "nftables")
# Stdlib conveniences that cost 1-9 ms of import each on a 2-core node (benchmarks/README.md).
CONVENIENCE = ("dataclasses", "inspect", "typing", "contextlib", "socket", "hashlib", "_hashlib")
# The json package and re (which imports enum, functools and collections): ~3-4 ms a cold exec
# spends for nothing, since common/leanjson.py drives json's own C scanner and the names are checked
# without re.  Forbidden where nothing else needs them (tuning, host-local; enum everywhere lean).
PARSING = ("json", "re", "enum")


def imported_modules(
    launcher: str, env: dict, stdin: bytes = b"", prefix: tuple[str, ...] = ()
) -> tuple[int, dict[str, int], bytes]:
    """Run ``launcher`` once (after ``prefix``, e.g. ``ip netns exec NS``); return
    (exit code, {module: cumulative µs}, stdout)."""
    full_env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **env}
    launcher = launchers.python_launcher(launcher)  # behind a native shim: its cold launcher
    with open(launcher) as fh:
        shebang = fh.readline()[2:].split()
    # The launcher's own interpreter and flags, plus -X importtime.
    proc = subprocess.run(
        [*prefix, *shebang, "-X", "importtime", launcher], input=stdin, env=full_env, capture_output=True, timeout=60
    )
    mods: dict[str, int] = {}
    for line in proc.stderr.decode("utf-8", "replace").splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line[len("import time:"):].split("|")
        if cumulative.strip().isdigit():
            mods[name.strip()] = int(cumulative.strip())
    return proc.returncode, mods, proc.stdout


def offenders(mods: dict[str, int], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in mods if any(m == f or m.startswith(f + ".") for f in forbidden))


def explain(mods: dict[str, int]) -> str:
    top = sorted(mods.items(), key=lambda kv: -kv[1])[:15]
    return "heaviest imports (cumulative µs): " + ", ".join(f"{m}={us}" for m, us in top)
