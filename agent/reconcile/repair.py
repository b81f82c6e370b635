"""Per plugin: is what it installed for an attachment still in the kernel, and put it back if not.

Every check and every repair is the plugin's own code, found through ``plugins/registry.py`` (its
``state.py``: :class:`cnichain.common.plugin_state.Repair`), in this process, on the stdin libcni
would send (:mod:`.attachments`), in the node namespace the agent runs in -- there is no second
writer.  What each plugin checks and how it repairs is said in its own ``state.py``.

A repairer answers only for state of its kind of change (:mod:`.netlink_events`), so an nftables
deletion does not make every bandwidth CHECK run.  And a pass reads each plugin's kernel state
once (its *survey*: portmap's table, the masquerade chain, one host netlink session), then asks a
*quick* question per attachment of it -- are its chains, keys, rules, IFB and qdiscs there --
and runs the plugin's full CHECK only for an attachment whose quick answer is no.  A pass over a
node of intact pods therefore costs about one listing, not one CHECK per pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from cnichain.common.errors import CniError
from cnichain.common.plugin_state import KINDS, Repair
from cnichain.common.skel import Request, build_request

from cnichain.agent.reconcile.attachments import Target


@dataclass(frozen=True)
class Repairer:
    """One plugin's repair face, under the plugin type it answers for."""

    plugin_type: str
    face: Repair

    @property
    def kinds(self) -> frozenset[str]:
        return self.face.kinds


@cache
def repairers() -> dict[str, Repairer]:
    """Plugin type -> its repairer, for every registered plugin whose state has a repair face."""
    from cnichain.plugins.registry import states

    return {name: Repairer(name, st.repair) for name, st in states().items() if st.repair is not None}


def as_command(req: Request, command: str) -> Request:
    """The same request for another command (a repair is an ADD of the input CHECK was given)."""
    env = dict(req.env)
    env["CNI_COMMAND"] = command
    return build_request(command, env, req.stdin)


def requests(target: Target, bin_dirs: list[str], kinds: frozenset[str] = KINDS) -> list[tuple[Repairer, Request]]:
    """The (repairer, parsed request) pairs of ``target``'s plugins that ask for kernel state."""
    out = []
    known = repairers()
    for plugin in target.conflist.plugins:
        rep = known.get(str(plugin.get("type")))
        if rep is None or not (rep.kinds & kinds):
            continue
        stdin = json.dumps(target.plugin_conf(plugin)).encode()
        req = build_request("CHECK", target.plugin_env("CHECK", bin_dirs), stdin)
        try:
            if rep.face.applies(req):
                out.append((rep, req))
        except CniError:
            continue  # a config its plugin refuses installed nothing to repair
    return out
