"""What operators run by hand: the libcni-like runner, CRI-O's call pattern, lint, inspect and gc
(podstate), the bench, the demo and the lab helpers."""
