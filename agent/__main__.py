"""``python -m cnichain.agent``: the agent's own command line (argparse, no typer)."""

from cnichain.agent.server import main

if __name__ == "__main__":
    raise SystemExit(main())
