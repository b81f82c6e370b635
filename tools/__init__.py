"""What operators run by hand: the libcni-like runner, CRI-O's call pattern, lint, inspect and gc
(podstate), the demo and the lab helpers; and what the tests and the bench share: a throwaway
containerd node (containerd_node) and the locator of the Debian packages ./run unpacks (debcache)."""
