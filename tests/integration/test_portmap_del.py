"""portmap's DEL from the config against a real kernel: no listing when the config matches what
ADD installed, never another pod's keys when it does not, nothing left behind either way.

Each test execs our portmap launcher inside the lab's node namespace (the runtime's view), with
debug logging on so the fallback to listing is visible, and reads our table back with ``nft -j``.

Every case runs once per spec version with chaining (``chained_version``, as the reference's
portmap kernel tests): DEL from the config works from the prevResult, which each version shapes
differently (``version`` fields in 0.3.x/0.4.0 ``ips``).
"""

from __future__ import annotations

import json
import os

import pytest

from cnichain.common.types import Result
from cnichain.plugins.portmap import names, rebuild as slow

pytestmark = pytest.mark.integration


def conf(lab, version: str, ip: str, ports: list[int], *, snat: bool = True, mappings: bool = True,
         prev: bool = True) -> dict:
    out = {"cniVersion": version, "name": "delnet", "type": "portmap", "snat": snat,
           "log": {"file": lab.path("portmap.log"), "level": "debug"}}
    if prev:
        result = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/x"}],
                  "ips": [{"address": f"{ip}/24", "interface": 0}]}
        out["prevResult"] = Result.from_dict(result, "1.0.0").to_dict(version)
    if mappings:
        out["runtimeConfig"] = {"portMappings": [{"hostPort": p, "containerPort": 80, "protocol": "tcp"} for p in ports]}
    return out


def run(lab, plugin_dir, command: str, cid: str, stdin: dict) -> None:
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": f"/var/run/netns/{cid}-gone",
           "CNI_IFNAME": "eth0", "CNI_PATH": plugin_dir, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    proc = lab.run(lab.node, os.path.join(plugin_dir, "portmap"), input=json.dumps(stdin), env=env, check=False)
    assert proc.returncode == 0, proc.stdout


def table(lab) -> slow.Snapshot:
    out = lab.run(lab.node, "nft", "-j", "list", "table", "inet", names.TABLE, check=False)
    if out.returncode != 0:
        return slow.Snapshot()
    return slow.Snapshot.from_json(json.loads(out.stdout)["nftables"])


def fallbacks(lab) -> int:
    """How many DELs had to list the table (their config did not describe what was installed)."""
    try:
        with open(lab.path("portmap.log")) as fh:
            return sum(1 for line in fh if "DEL from config" in line and "refused" in line)
    except FileNotFoundError:
        return 0


def owner(cid: str) -> str:
    return names.owner_id("delnet", cid)


def empty(snap: slow.Snapshot) -> bool:
    return (snap.owners() == [] and snap.elements == {} and not any(c.startswith(("c-", "m-", "b-")) for c in snap.chains)
            and not (snap.own or snap.to or snap.digests or any(snap.set_elements.values())))


@pytest.fixture
def node(lab):
    lab.run(lab.node, "ip", "link", "add", "dbr0", "type", "bridge")
    lab.run(lab.node, "ip", "addr", "add", "10.88.0.1/24", "dev", "dbr0")
    lab.run(lab.node, "ip", "link", "set", "dbr0", "up")
    return lab


def test_matching_del_needs_no_listing_and_a_repeat_is_a_no_op(node, plugin_dir, chained_version):
    lab = node
    c = conf(lab, chained_version, "10.88.0.2", [18080, 18081])
    run(lab, plugin_dir, "ADD", "da", c)
    assert table(lab).owners() == [owner("da")]
    for _ in range(2):
        run(lab, plugin_dir, "DEL", "da", c)
        assert empty(table(lab))
    assert fallbacks(lab) == 0


def test_del_with_more_mappings_than_added_never_touches_another_pod(node, plugin_dir, chained_version):
    lab = node
    run(lab, plugin_dir, "ADD", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    run(lab, plugin_dir, "ADD", "db", conf(lab, chained_version, "10.88.0.3", [18090]))
    # db's port in da's DEL config: deleting by the config alone would take db's dispatch element.
    run(lab, plugin_dir, "DEL", "da", conf(lab, chained_version, "10.88.0.2", [18080, 18090]))
    snap = table(lab)
    assert snap.owners() == [owner("db")]
    assert sorted(snap.map_keys(owner("db"))) == ["any/4/tcp/18090", "masq/10.88.0.3"] and snap.elements == {}
    assert snap.to == {"any/4/tcp/18090": ("10.88.0.3", 80)}
    assert fallbacks(lab) == 1  # refused by the kernel, then done by listing
    run(lab, plugin_dir, "DEL", "db", conf(lab, chained_version, "10.88.0.3", [18090]))
    assert empty(table(lab)) and fallbacks(lab) == 1


def test_del_with_fewer_mappings_or_snat_off_still_removes_everything(node, plugin_dir, chained_version):
    lab = node
    run(lab, plugin_dir, "ADD", "da", conf(lab, chained_version, "10.88.0.2", [18080, 18081]))
    run(lab, plugin_dir, "DEL", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    assert empty(table(lab))
    run(lab, plugin_dir, "ADD", "db", conf(lab, chained_version, "10.88.0.3", [18080]))
    run(lab, plugin_dir, "DEL", "db", conf(lab, chained_version, "10.88.0.3", [18080], snat=False))
    assert empty(table(lab))
    assert fallbacks(lab) == 2


def test_del_without_mappings_or_prev_result_lists_and_removes(node, plugin_dir, chained_version):
    lab = node
    run(lab, plugin_dir, "ADD", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    run(lab, plugin_dir, "DEL", "da", conf(lab, chained_version, "10.88.0.2", [], mappings=False, prev=False))
    assert empty(table(lab)) and fallbacks(lab) == 0  # no plan, so straight to listing


def test_shared_key_del_from_config_falls_back_and_hands_the_key_over(node, plugin_dir, chained_version):
    lab = node
    run(lab, plugin_dir, "ADD", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    run(lab, plugin_dir, "ADD", "db", conf(lab, chained_version, "10.88.0.3", [18080]))  # same hostPort: db waits in a chain
    run(lab, plugin_dir, "DEL", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    snap = table(lab)
    assert snap.owners() == [owner("db")] and snap.elements["any/4/tcp/18080"] == f"c-{owner('db')}"
    assert fallbacks(lab) == 1
    run(lab, plugin_dir, "DEL", "db", conf(lab, chained_version, "10.88.0.3", [18080]))
    assert empty(table(lab))


def test_del_before_any_add_on_the_node(node, plugin_dir, chained_version):
    lab = node
    run(lab, plugin_dir, "DEL", "da", conf(lab, chained_version, "10.88.0.2", [18080]))
    assert lab.run(lab.node, "nft", "list", "table", "inet", names.TABLE, check=False).returncode != 0
