"""Warm-up: import every plugin and what a request may need once, before the first fork.

This is the whole point of the agent: a worker forked after :func:`preload` starts with pyroute2,
the nftables binding and every plugin module already in memory (shared copy-on-write), instead of
paying 150-200 ms of interpreter start-up and imports per exec.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional


def load_plugins(extra: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Plugin type -> ``Plugin`` for every plugin package present, plus ``extra`` (type -> module)."""
    from cnichain.node.launchers import available_plugins

    modules = {t: f"cnichain.plugins.{m}.plugin" for t, m in available_plugins().items()}
    modules.update(extra or {})
    plugins = {}
    for plugin_type, module in modules.items():
        try:
            plugins[plugin_type] = importlib.import_module(module).PLUGIN
        except Exception as exc:  # noqa: BLE001 - that type then runs cold; the others stay warm
            print(f"cnichain-agent: not serving {plugin_type}: cannot load {module}: {exc}", file=sys.stderr)
    return plugins


def preload(plugins: dict[str, Any]) -> list[str]:
    """Import everything a request may need, so workers start warm; returns what was loaded.

    Nothing here may leave a socket, thread or library context behind: every worker opens its own
    netlink sockets and nftables context after entering the caller's namespace.
    """
    import pkgutil

    loaded = []
    seen = {n for n in sys.modules if n.startswith("cnichain.plugins.") and n.count(".") == 2}
    for pkg_name in sorted(seen):
        pkg = sys.modules[pkg_name]
        for info in pkgutil.iter_modules(getattr(pkg, "__path__", [])):
            if info.name == "__main__":
                continue
            try:
                importlib.import_module(f"{pkg_name}.{info.name}")
            except Exception as exc:  # noqa: BLE001 - a broken optional module must not stop the agent
                print(f"cnichain-agent: cannot preload {pkg_name}.{info.name}: {exc}", file=sys.stderr)
    for module in ("cnichain.common.netlink", "cnichain.common.nft", "cnichain.common.sysctl",
                   "cnichain.common.invoke", "cnichain.common.cniargs", "cnichain.common.types",
                   "subprocess", "ipaddress", "hashlib", "fcntl", "ctypes", "traceback", "json"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
    try:
        from pyroute2 import IPRoute  # noqa: F401 - the ~90 ms we are here to save

        import pyroute2.netlink.rtnl.ifinfmsg  # noqa: F401
        import pyroute2.netlink.rtnl.tcmsg  # noqa: F401

        loaded.append("pyroute2")
    except ImportError as exc:
        print(f"cnichain-agent: pyroute2 unavailable, workers will import it: {exc}", file=sys.stderr)
    try:
        import ctypes

        ctypes.CDLL("libnftables.so.1")  # dlopen once; a worker's Nftables() then only binds symbols
        import nftables  # noqa: F401

        loaded.append("nftables")
    except (ImportError, OSError) as exc:
        print(f"cnichain-agent: nftables binding unavailable: {exc}", file=sys.stderr)
    loaded.extend(sorted(n for n in sys.modules if n.startswith("cnichain.plugins.") and n.endswith(".plugin")))
    return loaded


def exercise(plugins: dict[str, Any]) -> list[str]:
    """Run, once in the agent, the first-use code every worker would otherwise run for itself.

    pyroute2 builds its message parsers and socket machinery lazily (the first ``IPRoute()``, link
    get and route dump in a process cost ~2.3, ~1.5 and ~2.3 ms; later ones a fraction); the
    skeleton's VERSION and error paths do the same on a smaller scale.  Done here, before the first
    fork, that state is shared by every worker instead of rebuilt by each.  Everything is read-only
    and side-effect free: a netlink socket in the agent's own namespace that only reads and is
    closed again, a VERSION and a refused ADD (no CNI_CONTAINERID) per plugin.  Returns what ran.
    """
    import io
    import socket as socket_mod

    from cnichain.common.skel import dispatch

    done = []
    for plugin in plugins.values():
        for env in ({"CNI_COMMAND": "VERSION"}, {"CNI_COMMAND": "ADD"}):
            try:
                dispatch(plugin, env, b"{}", io.StringIO(), io.StringIO())
            except Exception:  # noqa: BLE001 - warming is best effort; a request would meet it again
                pass
    done.append("dispatch")
    try:  # sysctl reads decode ASCII: load that codec here rather than in every worker
        from cnichain.common import sysctl

        sysctl.read("/proc/sys/net/ipv4/ip_forward")
    except (ImportError, OSError):
        pass
    try:
        from cnichain.common import netlink

        with netlink.session() as ipr:
            ipr.link("get", index=1)
            ipr.get_links()
            ipr.get_addr(family=socket_mod.AF_INET)
            ipr.get_routes(family=socket_mod.AF_INET)
            ipr.get_qdiscs()
        done.append("netlink")
    except Exception as exc:  # noqa: BLE001 - pyroute2 missing or no netlink here: workers start colder
        print(f"cnichain-agent: netlink warm-up skipped: {exc}", file=sys.stderr)
    return done

