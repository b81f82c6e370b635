"""What a node holds for each pod, read from the kernel, the plugins' state and the runtime's cache.

``cache`` reads libcni's result cache, ``files`` the plugins' files, ``kernel`` nftables and tc in
the node namespace, ``view`` joins them per container and tells orphans, ``render`` prints, and
``gc`` plans and runs the clean-up.  No typer here: ``cli/app.py`` is the thin layer.
"""
