"""``python -m cnichain.cli.agent``: the agent's own command line (argparse, no typer)."""

from cnichain.cli.agent.server import main

if __name__ == "__main__":
    raise SystemExit(main())
