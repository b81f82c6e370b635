"""``python -m cnichain.tools.bench [options]``: the bench without typer."""

from cnichain.tools.bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
