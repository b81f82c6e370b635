"""What a node holds for each pod, and the runtime's side of it: the floor the agent, the CLI, the
bench and the tests stand on, above the plugins and below everything that runs.

``runtime`` runs a conflist the way libcni does; ``cri`` (the CRI Status and ListPodSandbox calls,
hand-encoded messages) over ``grpc_unary`` (one bounded unary gRPC call on a unix socket; the
image has no gRPC library) asks the runtime, and ``sandboxes`` turns that into a listing.
``cache`` reads libcni's result cache, ``files`` the plugins' files, ``kernel`` nftables and tc in
the node namespace, ``view`` joins them per container and tells orphans, ``render`` prints, and
``gc`` plans and runs the clean-up.  No typer here: ``cli/app.py`` is the thin layer.
"""
