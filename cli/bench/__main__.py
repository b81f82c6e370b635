"""``python -m cnichain.cli.bench [options]``: the bench without typer."""

from cnichain.cli.bench.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
