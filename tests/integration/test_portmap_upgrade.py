"""A node upgraded while pods run: the previous release's portmap table (every pod in its own
chains, no maps) keeps serving through the first ADD of this release, which rebuilds the shared
chains with the maps' rules in one transaction, and through each old pod's move into the maps at
its next ADD (one transaction) or its DEL (one listing).  A connect loop to every hostPort runs
the whole time and must never miss: a transaction is atomic, so there is no gap to see.
"""

from __future__ import annotations

import json
import sys

import pytest

from cnichain.plugins.portmap import names, plan as planning
from cnichain.plugins.portmap.config import container_ips, load
from cnichain.common.types import Result
from cnichain.podstate.runtime import Attachment
from tests.integration.portmap_traffic import CLIENT4, NODE4, NODE6, CLIENT6, bridge_conflist, table

pytestmark = pytest.mark.integration

SERVER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)\n"
    "s.bind(('::', 80)); s.listen(64)\n"
    "for _ in range(100000):\n"
    "    c, _a = s.accept(); c.sendall(sys.argv[1].encode()); c.close()\n"
)
# Connects to each port every 20 ms for a bounded time; prints per port the answers it counted.
LOOP = (
    "import json, socket, sys, time\n"
    "addr, ports, seconds = sys.argv[1], [int(p) for p in sys.argv[2].split(',')], float(sys.argv[3])\n"
    "seen = {p: {} for p in ports}\n"
    "end = time.monotonic() + seconds\n"
    "while time.monotonic() < end:\n"
    "    for p in ports:\n"
    "        try:\n"
    "            with socket.create_connection((addr, p), timeout=3) as c:\n"
    "                got = c.recv(64).decode() or 'empty'\n"
    "        except OSError as e:\n"
    "            got = type(e).__name__\n"
    "        seen[p][got] = seen[p].get(got, 0) + 1\n"
    "    time.sleep(0.02)\n"
    "print(json.dumps(seen))\n"
)
PORTS = {"old1": 8101, "old2": 8102}


def previous_release(lab, plans: list[planning.OwnerPlan]) -> None:
    """The table as the previous release left it: its skeleton (the verdict maps and their rules,
    none of the map layout's maps, sets or rules) and each pod in its own chains."""
    ours = set(names.OWN_MAPS.values()) | {names.OWNERS}
    lookups = ("@to_", "@hairpin", "@masqall")
    skeleton = [c for c in planning.skeleton()
                if not ("map" in c.get("add", {}) and c["add"]["map"]["name"] in ours)
                and "set" not in c.get("add", {})
                and not any(lookup in json.dumps(c) for lookup in lookups)]
    commands = list(skeleton)
    for p in plans:
        commands += planning.owner_chains(p, create=True)
        commands += [planning.element(k, names.dnat_chain(p.owner), "create") for k in p.dnat_keys]
        commands += [planning.element(k, names.masq_chain(p.owner), "create") for k in p.masq_keys]
    lab.run(lab.node, "nft", "delete", "table", names.FAMILY_TABLE)
    lab.run(lab.node, "nft", "-j", "-f", "-", input=json.dumps({"nftables": commands}))


def test_previous_release_pods_answer_through_the_upgrade_and_move_into_the_maps(lab, make_runtime, plugin_dir):
    client = lab.netns("client")
    lab.wire(client, [f"{CLIENT4}/24", f"{CLIENT6}/64"], [f"{NODE4}/24", f"{NODE6}/64"], "cli")
    runtime = make_runtime([plugin_dir])
    conf = bridge_conflist(lab, dual=False)
    pods, results, plans, servers = {}, {}, [], []
    try:
        for name, port in PORTS.items():
            ns = lab.netns(name)
            att = Attachment(f"ctr-{name}", ns, "eth0", capability_args={"portMappings": [{"hostPort": port, "containerPort": 80}]})
            result = runtime.add(conf, att)
            pods[name], results[name] = att, result
            servers.append(lab.popen(ns, sys.executable, "-c", SERVER, name))
            cfg = load({"runtimeConfig": {"portMappings": [{"hostPort": port, "containerPort": 80}]}})
            plans.append(planning.plan_owner(conf.name, att.container_id, cfg,
                                             container_ips(Result.from_dict(result, conf.cni_version), "eth0")))
        previous_release(lab, plans)
        snap = table(lab)
        assert snap.digests == {} and set(snap.chain_owners()) == {p.owner for p in plans}

        loop = lab.popen(client, sys.executable, "-c", LOOP, NODE4, ",".join(str(p) for p in PORTS.values()), "8",
                         stdout=-1, text=True)
        # this release's first ADD: refused fast (no maps yet), the skeleton rebuilt in one transaction
        new = Attachment("ctr-new", lab.netns("new"), "eth0", capability_args={"portMappings": [{"hostPort": 8103, "containerPort": 80}]})
        runtime.add(conf, new)
        # old1's next portmap ADD, as the reconciler's repair sends it (its cached config and result)
        runtime.exec_plugin("portmap", "ADD", pods["old1"], {
            "cniVersion": conf.cni_version, "name": conf.name, "type": "portmap",
            "runtimeConfig": {"portMappings": pods["old1"].capability_args["portMappings"]},
            "prevResult": results["old1"]})
        out, _ = loop.communicate(timeout=60)
        seen = json.loads(out)
        for port, name in ((p, n) for n, p in PORTS.items()):
            assert set(seen[str(port)]) == {name}, seen  # every connect answered, by its own pod
            assert seen[str(port)][name] > 50, seen

        snap = table(lab)
        old1, old2 = plans
        assert snap.digests[old1.owner] == old1.digest and sorted(snap.map_keys(old1.owner)) == sorted(old1.keys)
        assert names.dnat_chain(old1.owner) not in snap.chains  # moved: its chains are gone
        # old2 stays in its chains, registered in OWNERS by the first rebuild (its DEL can then
        # tell it is here without listing the table)
        assert snap.chain_owners() == [old2.owner] and snap.digests[old2.owner] == names.CHAIN_LAYOUT
        assert snap.identity(old2.owner) == old2.identity
        new_owner = names.owner_id(conf.name, "ctr-new")
        assert snap.digests[new_owner] != names.CHAIN_LAYOUT and snap.map_keys(new_owner)
        # old2's DEL in the chain layout with a lost cache (no mappings, no prevResult): found by
        # its OWNERS element, removed from one listing; nothing of it is left
        runtime.exec_plugin("portmap", "DEL", pods["old2"], {"cniVersion": conf.cni_version, "name": conf.name,
                                                          "type": "portmap"})
        snap = table(lab)
        assert snap.chain_owners() == [] and old2.owner not in snap.owners()
        assert not any(c.startswith(names.OWNED_CHAIN_PREFIXES) for c in snap.chains)
        for att in (pods["old1"], new):
            runtime.delete(conf, att)
        snap = table(lab)
        assert snap.owners() == [] and not (snap.own or snap.to or any(snap.set_elements.values()))
    finally:
        for s in servers:
            s.kill()
            s.wait()
