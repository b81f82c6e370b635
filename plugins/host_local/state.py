"""host-local's face for the node tools: reservations no cache entry names, released by owner.

host-local's state is its reservation files (one per address, holding container ID and ifname),
which the runtime's DEL releases through bridge's delegated IPAM call.  Nothing of it is in the
kernel, so there is nothing to repair; when a result cache is lost, the files of a container the
runtime no longer lists are released here with ``release_by_id`` under the store's lock, exactly
as host-local's DEL would.  Items are ``(data_dir, ip, ifname, path)``.
"""

from __future__ import annotations

from typing import Any

from cnichain.common.plugin_state import Leftovers, PluginState


def _describe(items: list[Any]) -> list[str]:
    return [f"host-local {ip}" for _d, ip, _i, _p in items]


def _collect(network: str, container_id: str, items: list[Any]) -> list[str]:
    from cnichain.plugins.host_local.kernel import DiskStore

    out = []
    by_dir: dict[tuple[str, str], list[str]] = {}
    for data_dir, ip, ifname, _path in items:
        by_dir.setdefault((data_dir, ifname or ""), []).append(ip)
    for (data_dir, ifname), ips in sorted(by_dir.items()):
        store = DiskStore(data_dir, network)
        with store.locked(create=False) as held:
            errors = store.release_by_id(container_id, ifname) if held else []
        if errors:
            raise RuntimeError("; ".join(errors))
        out.append(f"released {', '.join(ips)}")
    return out


STATE = PluginState("host-local", leftovers=Leftovers(_describe, _collect))
