"""``python -m cnichain.benchmarks.latency [options]``: the bench without typer."""

from cnichain.benchmarks.latency.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
