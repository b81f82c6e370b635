"""What puts cnichain on a node: ``cnichain node install|uninstall`` puts the bundled tree
(``bundle/``, also the OCI image), launchers (``launchers``, ``native_shim``) and a conflist onto a
node safely.

``atomic`` (file, symlink and directory replacement that a runtime never sees half done),
``chain`` (pure: finding the primary conflist and deriving ours from it), ``verify`` (run the
installed plugins before any conflist names them), ``bundle_install`` (the order of it all),
``state`` (what we wrote, so uninstall removes exactly that), ``report`` (what an install did,
the one report of both install paths).  Talking to the runtime is
:mod:`cnichain.podstate`'s (``cri`` over ``grpc_unary``).
"""
