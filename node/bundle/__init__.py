"""A self-contained runtime tree for nodes without Python: interpreter, libraries, loader, our code.

``./run bundle OUT [--prefix P]`` (``python -m cnichain.node.bundle``) builds it from the build
host's Debian packages and the cnichain wheel; ``layout`` says where everything lives, ``sources``
what is carried, ``elf`` and ``debian`` answer questions about host files, ``build`` does it.
"""
