"""What operators run by hand: CRI-O's call pattern, lint, the node probe (``probe``: is the runtime,
the agent and the installed tree answering), the demo and the lab helpers; and what the tests and
the bench share: a throwaway containerd node (containerd_node) and the locator of the Debian
packages ./run unpacks (debcache).  The pod state these stand on (the libcni-like runner, inspect
and gc) is the floor below the agent, :mod:`cnichain.podstate`."""
