"""cnichain: chained CNI meta-plugins (portmap, bandwidth, tuning, route-override) with a bridge and
host-local base.

This directory is the import package.  Its sub-packages are relative symlinks to the top-level
``common/``, ``plugins/``, ``podstate/``, ``agent/``, ``node/``, ``tools/``, ``benchmarks/``, ``cli/``, ``conflists/`` and
``shim/``, so the repository keeps its readable top-level layout while ``import cnichain.plugins.portmap`` works straight from a checkout:
``pip install -e .`` (what ``./run`` does) puts the checkout itself on ``sys.path``, and a wheel
build copies the linked files in.
"""
