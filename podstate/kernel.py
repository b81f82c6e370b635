"""What our plugins hold in the kernel of a node namespace, read back without any runtime's help.

Each plugin's state is read through that plugin's own readers, so this view sees exactly what the
plugin wrote and reads itself:

* portmap: its nftables table (libnftables JSON), each container's DNAT rules named by the
  identity rule of its chain (:func:`cnichain.plugins.portmap.kernel.listed_mappings`);
* bridge masquerade: its masquerade chain, one rule per pod address whose comment names network,
  ifname and container ID (:func:`cnichain.plugins.bridge.firewall.masquerade_listing`);
* bandwidth: its IFBs (alias naming the attachment when ours made them), their TBF (egress) and
  the TBF on the host veth redirecting to them (ingress), through its netlink calls.

Every read happens with the calling thread inside ``node_netns`` (None: the caller's namespace):
libnftables and netlink bind a socket to the namespace it is created in, and the plugins' readers
open theirs where they are called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from cnichain.common import netns as netns_mod

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cnichain.plugins.portmap.listing import HeldMapping


@dataclass
class Masquerade:
    network: str
    container_id: str
    ifname: str
    addresses: list[str] = field(default_factory=list)


@dataclass
class Shaping:
    ifb: str
    network: str = ""  # from the IFB's alias; "" for IFBs the reference plugin made
    container_id: str = ""
    egress: Optional[dict] = None  # TBF on the IFB: rate/burst in bits, limit in bytes
    host_veth: str = ""
    ingress: Optional[dict] = None  # TBF on the host veth


class _in_netns:
    """``netns.entered`` when a path is given, else nothing (the caller's namespace)."""

    def __init__(self, path: Optional[str]) -> None:
        self.inner = netns_mod.entered(path) if path else None

    def __enter__(self) -> None:
        if self.inner is not None:
            self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.inner is not None:
            self.inner.__exit__(*exc)


# -- portmap ----------------------------------------------------------------------------------


def portmap_mappings(node_netns: Optional[str]) -> list[HeldMapping]:
    """portmap's DNAT rules as portmap itself reads them back (its own record, not a copy)."""
    from cnichain.plugins.portmap import kernel as portmap

    with _in_netns(node_netns):
        return portmap.listed_mappings()


# -- bridge masquerade ------------------------------------------------------------------------


def parse_masquerade_listing(objects: list[dict]) -> list[Masquerade]:
    """One entry per attachment named in the rule comments of bridge's masquerade chain."""
    from cnichain.plugins.bridge import rules

    found: dict[tuple[str, str, str], Masquerade] = {}
    for rule in rules.rules_in(objects):
        owner = rules.attachment_of(str(rule.get("comment", "")))
        if owner is None:
            continue
        network, ifname, cid = owner
        entry = found.setdefault((network, cid, ifname), Masquerade(network, cid, ifname))
        entry.addresses.extend(rules.rule_addresses(rule))
    return list(found.values())


def masquerades(node_netns: Optional[str]) -> list[Masquerade]:
    from cnichain.plugins.bridge import firewall as bridge

    with _in_netns(node_netns):
        listing = bridge.masquerade_listing()
    return parse_masquerade_listing(listing) if listing else []


# -- bandwidth --------------------------------------------------------------------------------


def _tick() -> float:
    from cnichain.plugins.bandwidth import plan as bandwidth_plan

    try:
        with open("/proc/net/psched", "rb") as fh:
            return bandwidth_plan.tick_in_usec(fh.read().decode("ascii", "replace"))
    except Exception:  # OSError or the plugin's parse error: rates are still worth showing
        return 0.0


def _tbf_view(params: Any, tick: float) -> dict:
    from cnichain.plugins.bandwidth import plan as bandwidth_plan

    out = {"rate_bits": params.rate * 8, "limit_bytes": params.limit, "buffer_ticks": params.buffer}
    if tick:
        out["burst_bits"] = bandwidth_plan.burst_bytes(params, tick) * 8
    return out


def pod_shaping(netns_path: str, ifname: str, ifb: str) -> dict:
    """What bandwidth keeps in a pod's namespace (layouts ``split`` and ``pod``): the root TBF of
    the pod's interface (egress) and the TBF of its IFB there (ingress); {} when none, or when
    the namespace cannot be entered."""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel as bandwidth

    tick = _tick()
    out: dict = {}
    try:
        with netlink.route_socket(netns_path) as pod:
            for name, direction in ((ifname, "egress"), (ifb, "ingress")):
                link = netlink.get_link(pod, name=name)
                root = bandwidth.root_tbf(pod, link.index) if link is not None else None
                if root is not None and root.tbf is not None:
                    out[direction] = _tbf_view(root.tbf, tick)
    except Exception:  # gone meanwhile, or not a namespace: the view says what it can
        return {}
    return out


def shapings(node_netns: Optional[str]) -> tuple[list[Shaping], dict[str, dict]]:
    """Every IFB of bandwidth's naming in the node namespace with the limits the kernel holds, and
    the root TBF of every veth that has one (ingress-only shaping has no IFB; its veth is named in
    the result)."""
    from cnichain.common import netlink
    from cnichain.plugins.bandwidth import kernel as bandwidth
    from cnichain.plugins.bandwidth.config import IFB_PREFIX

    tick = _tick()
    out = []
    veth_tbf: dict[str, dict] = {}
    with netlink.session(node_netns or None) as host:
        for veth in bandwidth.veth_links(host):
            vroot = bandwidth.root_tbf(host, veth.index)
            if vroot is not None and vroot.tbf is not None:
                veth_tbf[veth.name] = _tbf_view(vroot.tbf, tick)
        for link in bandwidth.ifb_links(host):
            if not link.name.startswith(IFB_PREFIX):
                continue
            shaping = Shaping(ifb=link.name)
            owner = bandwidth.alias_owner(link.alias)
            if owner is not None:
                shaping.network, shaping.container_id = owner
            root = bandwidth.root_tbf(host, link.index)
            if root is not None and root.tbf is not None:
                shaping.egress = _tbf_view(root.tbf, tick)
            for veth in bandwidth.veths_redirecting_to(host, link.index)[:1]:
                shaping.host_veth = veth.name
                vroot = bandwidth.root_tbf(host, veth.index)
                if vroot is not None and vroot.tbf is not None:
                    shaping.ingress = _tbf_view(vroot.tbf, tick)
            out.append(shaping)
    return out, veth_tbf
