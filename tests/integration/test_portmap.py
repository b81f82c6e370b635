"""portmap against a real kernel: traffic through lab namespaces, read-back of our nftables table.

Topology per test: the lab's node namespace runs the reference bridge + host-local and our
portmap (the Runtime, like containerd); a "client" namespace is wired to the node on
192.168.77.0/24 and fd77::/64 and plays a remote machine.

As in the reference's portmap_integ_test.go, each kernel case runs once per spec version with
chaining (``chained_version``: 0.3.0 on; cases about what CHECK detects: ``check_version``), and
checks the version's prevResult pass-through and CHECK rule (tests/specver.py).  Single on
purpose: the 20-pod race (kernel-state concurrency, nothing version-dependent), GC (1.1.0 only),
and the config refusal of bad conditions (rejected while parsing, before any version-dependent
step).
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from cnichain.podstate.runtime import Attachment, PluginFailed
from cnichain.common.types import Result
from cnichain.plugins.portmap import names
from tests.integration.portmap_traffic import (
    CLIENT4, CLIENT6, NODE4, NODE6, bridge_conflist, fetch, pod_ips, serve, table, wait_no_tentative,
)
from tests.specver import assert_check_refused, assert_cni_error, assert_failed, check_as_runtime, expects_check

pytestmark = pytest.mark.integration

@pytest.fixture
def node(lab, make_runtime, plugin_dir, reference_dir):
    """(runtime, client netns) with the client wired to the node."""
    client = lab.netns("client")
    lab.wire(client, [f"{CLIENT4}/24", f"{CLIENT6}/64"], [f"{NODE4}/24", f"{NODE6}/64"], "cli")
    lab.run(lab.node, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    return make_runtime([plugin_dir, reference_dir]), client


def test_traffic_v4_v6_localhost_hairpin_then_del(lab, node, chained_version):
    runtime, client = node
    conf = bridge_conflist(lab, version=chained_version)
    pod = lab.netns("pod")
    pms = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
           {"hostPort": 5353, "containerPort": 53, "protocol": "UDP"}]
    att = Attachment("ctr-traffic", pod, "eth0", capability_args={"portMappings": pms})
    result = runtime.add(conf, att)
    assert result["cniVersion"] == chained_version and "interfaces" in result
    ips = pod_ips(result)
    assert set(ips) == {4, 6}
    wait_no_tentative(lab, lab.node)  # a fresh bridge's IPv6 gateway answers only after DAD
    servers = [serve(lab, pod, 80, "tcp-pod"), serve(lab, pod, 53, "udp-pod", "UDP")]
    try:
        assert fetch(lab, client, NODE4, 8080) == "tcp-pod"
        assert fetch(lab, client, NODE6, 8080) == "tcp-pod"
        assert fetch(lab, client, NODE4, 5353, "UDP") == "udp-pod"
        assert fetch(lab, client, NODE6, 5353, "UDP") == "udp-pod"
        assert fetch(lab, lab.node, "127.0.0.1", 8080) == "tcp-pod"  # route_localnet + masquerade
        assert lab.run(lab.node, "sysctl", "-n", "net.ipv4.conf.cni0.route_localnet").stdout.strip() == "1"
        assert fetch(lab, pod, "10.77.0.1", 8080) == "tcp-pod"  # hairpin via the node
        assert fetch(lab, pod, NODE4, 8080) == "tcp-pod"
        check_as_runtime(runtime, conf, att)

        # a non-local destination on the same port is routed, not intercepted (reference PR #1210)
        other = lab.netns("other")
        lab.wire(other, ["192.168.78.2/24"], ["192.168.78.1/24"], "oth")
        lab.run(client, "ip", "route", "add", "192.168.78.0/24", "via", NODE4)
        lab.run(other, "ip", "route", "add", "default", "via", "192.168.78.1")
        srv_other = serve(lab, other, 8080, "the-real-host")
        try:
            assert fetch(lab, client, "192.168.78.2", 8080) == "the-real-host"
        finally:
            srv_other.kill()
            srv_other.wait()

        runtime.delete(conf, Attachment("ctr-traffic", pod, "eth0"))
        assert fetch(lab, client, NODE4, 8080) == ""
        assert fetch(lab, client, NODE6, 8080) == ""
        assert fetch(lab, lab.node, "127.0.0.1", 8080) == ""
        snap = table(lab)
        assert snap.owners() == [] and snap.elements == {}
    finally:
        for s in servers:
            s.kill()
            s.wait()


def test_containerd_shaped_port_mappings(lab, node, chained_version):
    """containerd's go-cni marshals port mappings from a struct without json tags, with an empty
    HostIP for "any": the mapping must work exactly as its camelCase twin (and DEL, which gets the
    same capability args again, must remove it)."""
    runtime, client = node
    conf = bridge_conflist(lab, version=chained_version, dual=False)
    pod = lab.netns("pod")
    pms = [{"HostPort": 8080, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""},
           {"HostPort": 8081, "ContainerPort": 80, "Protocol": "tcp", "HostIP": NODE4}]
    att = Attachment("ctr-containerd", pod, "eth0", capability_args={"portMappings": pms})
    runtime.add(conf, att)
    srv = serve(lab, pod, 80, "containerd-pod")
    try:
        assert fetch(lab, client, NODE4, 8080) == "containerd-pod"
        assert fetch(lab, client, NODE4, 8081) == "containerd-pod"
        check_as_runtime(runtime, conf, att)
    finally:
        srv.kill()
        srv.wait()
    runtime.delete(conf, att)
    assert fetch(lab, client, NODE4, 8080) == ""
    assert table(lab).owners() == []


def test_host_ip_answers_only_on_that_address(lab, node, chained_version):
    runtime, client = node
    lab.run(lab.node, "ip", "addr", "add", "192.168.77.10/24", "dev", f"n{lab.run_id}cli")
    conf = bridge_conflist(lab, version=chained_version, dual=False)
    pod = lab.netns("pod")
    att = Attachment("ctr-hostip", pod, "eth0", capability_args={"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "tcp", "hostIP": "192.168.77.10"},
        {"hostPort": 8081, "containerPort": 80, "protocol": "tcp", "hostIP": "0.0.0.0"}]})
    runtime.add(conf, att)
    srv = serve(lab, pod, 80, "hostip-pod")
    try:
        assert fetch(lab, client, "192.168.77.10", 8080) == "hostip-pod"
        assert fetch(lab, client, NODE4, 8080) == ""
        assert fetch(lab, client, NODE4, 8081) == "hostip-pod"  # 0.0.0.0 means any address
        check_as_runtime(runtime, conf, att)
    finally:
        srv.kill()
        srv.wait()
    runtime.delete(conf, att)


def _sctp_supported(lab) -> bool:
    """Whether this kernel makes an SCTP socket: refused with EPROTONOSUPPORT means no
    CONFIG_IP_SCTP (False); any other failure of the probe fails the test."""
    probe = ("import errno, socket, sys\n"
             "try:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_SCTP)\n"
             "except OSError as exc:\n    sys.exit(3 if exc.errno == errno.EPROTONOSUPPORT else 4)\n")
    code = lab.run(lab.node, "python3", "-c", probe, check=False).returncode
    assert code in (0, 3), f"the SCTP probe failed otherwise (exit {code})"
    return code == 0


def test_sctp(lab, node, chained_version):
    if not _sctp_supported(lab):
        pytest.skip("this kernel has no SCTP (CONFIG_IP_SCTP; socket() fails with EPROTONOSUPPORT)")
    runtime, client = node
    conf = bridge_conflist(lab, version=chained_version, dual=False)
    pod = lab.netns("pod")
    att = Attachment("ctr-sctp", pod, "eth0", capability_args={"portMappings": [{"hostPort": 9999, "containerPort": 99, "protocol": "sctp"}]})
    runtime.add(conf, att)
    srv = serve(lab, pod, 99, "sctp-pod", "SCTP")
    try:
        assert fetch(lab, client, NODE4, 9999, "SCTP") == "sctp-pod"
    finally:
        srv.kill()
        srv.wait()
    runtime.delete(conf, att)


def test_two_pods_share_a_host_port_and_dels_touch_only_their_own(lab, node, chained_version):
    """A sandbox recreated before the old one's DEL: both claim 8080; the older one serves until
    its DEL, then the newer one takes over; neither DEL disturbs the other."""
    runtime, client = node
    conf = bridge_conflist(lab, version=chained_version, dual=False)
    pods = {}
    servers = []
    try:
        for name in ("old", "new"):
            ns = lab.netns(name)
            att = Attachment(f"ctr-{name}", ns, "eth0", capability_args={"portMappings": [{"hostPort": 8080, "containerPort": 80}]})
            runtime.add(conf, att)
            pods[name] = att
            servers.append(serve(lab, ns, 80, name))
        old, new = (names.owner_id(conf.name, f"ctr-{n}") for n in ("old", "new"))
        snap = table(lab)
        # the first claim holds the key in the maps; the later one waits in the chain layout
        assert snap.own["any/4/tcp/8080"] == old and snap.elements["any/4/tcp/8080"] == names.dnat_chain(new)
        assert fetch(lab, client, NODE4, 8080) == "old"
        check_as_runtime(runtime, conf, pods["old"])
        check_as_runtime(runtime, conf, pods["new"])
        runtime.delete(conf, pods["old"])
        assert fetch(lab, client, NODE4, 8080) == "new"
        snap = table(lab)
        assert "any/4/tcp/8080" not in snap.own and snap.elements["any/4/tcp/8080"] == names.dnat_chain(new)
        check_as_runtime(runtime, conf, pods["new"])
        runtime.delete(conf, pods["new"])
        assert fetch(lab, client, NODE4, 8080) == ""
        snap = table(lab)
        assert snap.chains.keys() <= {"prerouting", "output", "postrouting", "hostports"}
        assert not (snap.own or snap.to or snap.elements or snap.digests)
    finally:
        for s in servers:
            s.kill()
            s.wait()


# -- plugin contract with synthetic prevResults (no pod needed for rules) ----------------------


@pytest.fixture
def routed(lab):
    """Routes towards the synthetic pod addresses (10.66/16, fd66::/64) on a veth in the node (this kernel has no dummy driver)."""
    lab.run(lab.node, "ip", "link", "add", "pmdummy", "type", "veth", "peer", "name", "pmdummy-peer")
    lab.run(lab.node, "ip", "link", "set", "pmdummy-peer", "up")
    lab.run(lab.node, "ip", "addr", "add", "10.66.255.254/16", "dev", "pmdummy")
    lab.run(lab.node, "ip", "addr", "add", "fd66::ffff/64", "dev", "pmdummy", "nodad")
    lab.run(lab.node, "ip", "link", "set", "pmdummy", "up")
    return lab


def run_plugin(lab, plugin_dir, command, conf, cid, netns="/var/run/netns/none", ifname="eth0"):
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": netns, "CNI_IFNAME": ifname,
           "CNI_PATH": plugin_dir, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = lab.run(lab.node, "env", "-i", *[f"{k}={v}" for k, v in env.items()], os.path.join(plugin_dir, "portmap"),
                   check=False, input=json.dumps(conf))
    out = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, out


def synthetic_prev(i: int, version: str) -> dict:
    base = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "cni0"}, {"name": f"veth{i}"}, {"name": "eth0", "sandbox": f"/var/run/netns/p{i}"}],
        "ips": [{"interface": 2, "address": f"10.66.{i // 250}.{i % 250 + 2}/16", "gateway": "10.66.0.1"},
                {"interface": 2, "address": f"fd66::{i + 2:x}/64"}],
        "routes": [{"dst": "0.0.0.0/0", "gw": "10.66.0.1"}],
        "dns": {"nameservers": ["10.66.0.1"]},
    }
    return Result.from_dict(base, "1.1.0").to_dict(version)


def pm_conf(version, prev=None, mappings=None, name="pmsyn", **extra):
    conf = {"cniVersion": version, "name": name, "type": "portmap"}
    if mappings is not None:
        conf["runtimeConfig"] = {"portMappings": mappings}
    if prev is not None:
        conf["prevResult"] = prev
    conf.update(extra)
    return conf


def test_contract_per_version(lab, plugin_dir, routed, cni_version):
    prev = synthetic_prev(1, cni_version)
    mappings = [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]
    code, out = run_plugin(lab, plugin_dir, "ADD", pm_conf(cni_version, prev, mappings), "c-ver")
    assert code == 0, out
    assert out == prev  # passed through unchanged, in the config's version
    owner = names.owner_id("pmsyn", "c-ver")
    assert owner in table(lab).owners()
    code, out = run_plugin(lab, plugin_dir, "CHECK", pm_conf(cni_version, prev, mappings), "c-ver")
    if expects_check(cni_version):
        assert code == 0 and out is None, out
    else:
        assert_check_refused(code, out)
    # DEL without portMappings and without prevResult still removes the rules; CNI_NETNS gone
    code, out = run_plugin(lab, plugin_dir, "DEL", pm_conf(cni_version), "c-ver", netns="/var/run/netns/gone-away")
    assert code == 0, out
    assert table(lab).owners() == []
    code, out = run_plugin(lab, plugin_dir, "DEL", pm_conf(cni_version, prev, mappings), "c-ver", netns="")
    assert code == 0, out
    if expects_check(cni_version):
        code, out = run_plugin(lab, plugin_dir, "CHECK", pm_conf(cni_version, prev, mappings), "c-ver")
        assert code == 1
        assert_cni_error(out, 999, f"missing hostport rules: nothing of 'id {names.network_digest('pmsyn')} "
                                   f"pmsyn/c-ver' in table inet {names.TABLE}")


def test_readd_replaces_and_shared_ip_is_kept(lab, plugin_dir, routed, chained_version):
    version = chained_version
    prev = synthetic_prev(3, version)
    m1 = [{"hostPort": 8080, "containerPort": 80}]
    m2 = [{"hostPort": 9090, "containerPort": 90}]
    assert run_plugin(lab, plugin_dir, "ADD", pm_conf(version, prev, m1), "a") == (0, prev)
    assert run_plugin(lab, plugin_dir, "ADD", pm_conf(version, prev, m2), "a") == (0, prev)  # no DEL between
    assert run_plugin(lab, plugin_dir, "ADD", pm_conf(version, prev, m1), "b") == (0, prev)  # same IP as a
    snap = table(lab)
    a, b = names.owner_id("pmsyn", "a"), names.owner_id("pmsyn", "b")
    # a's re-ADD replaced its keys in the maps; b's address is a's, so b waits in the chain layout
    assert sorted(snap.map_keys(a)) == ["any/4/tcp/9090", "any/6/tcp/9090", "masq/10.66.0.5", "masq/fd66::5"]
    assert snap.elements == {"any/4/tcp/8080": f"c-{b}", "any/6/tcp/8080": f"c-{b}",
                             "masq/10.66.0.5": f"m-{b}", "masq/fd66::5": f"m-{b}"}
    assert run_plugin(lab, plugin_dir, "DEL", pm_conf(version), "a") == (0, None)
    snap = table(lab)
    assert snap.owners() == [b] and snap.own == {} and snap.to == {}
    assert snap.elements == {"any/4/tcp/8080": f"c-{b}", "any/6/tcp/8080": f"c-{b}",
                             "masq/10.66.0.5": f"m-{b}", "masq/fd66::5": f"m-{b}"}
    check = run_plugin(lab, plugin_dir, "CHECK", pm_conf(version, prev, m1), "b")
    if expects_check(version):
        assert check == (0, None)
    else:
        assert_check_refused(*check)


def test_parallel_add_del_of_20_pods(lab, plugin_dir, routed):
    """20 pods added in parallel (half of them sharing a host port), then 10 deleted while 5
    more are added: exactly the survivors' mappings remain.  Single version: a race on kernel
    state, which the version of the configs does not change."""
    def mappings(i):
        return [{"hostPort": 7000 if i % 2 else 20000 + i, "containerPort": 80},
                {"hostPort": 30000 + i, "containerPort": 53, "protocol": "udp"}]

    errors = []

    def op(cmd, i):
        conf = pm_conf("1.0.0", synthetic_prev(i, "1.0.0"), mappings(i))
        code, out = run_plugin(lab, plugin_dir, cmd, conf, f"par{i}")
        if code != 0:
            errors.append((cmd, i, out))

    def run_all(ops):
        threads = [threading.Thread(target=op, args=o) for o in ops]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)

    run_all([("ADD", i) for i in range(20)])
    assert not errors
    run_all([("DEL", i) for i in range(10)] + [("ADD", i) for i in range(20, 25)])
    assert not errors
    snap = table(lab)
    alive = list(range(10, 25))
    assert sorted(snap.owners()) == sorted(names.owner_id("pmsyn", f"par{i}") for i in alive)
    expect_keys = set()
    for i in alive:
        for m in mappings(i):
            for fam in (4, 6):
                expect_keys.add(f"any/{fam}/{m.get('protocol', 'tcp')}/{m['hostPort']}")
        expect_keys |= {f"masq/10.66.0.{i + 2}", f"masq/fd66::{i + 2:x}"}
    holders: dict[str, set[str]] = {}
    for k, o in snap.own.items():
        holders.setdefault(k, set()).add(o)
    for k, claimants in snap.chain_claims().items():
        holders.setdefault(k, set()).update(claimants)
    assert set(holders) == expect_keys
    shared = [names.owner_id("pmsyn", f"par{i}") for i in alive if i % 2]
    assert holders["any/4/tcp/7000"] == set(shared)
    # the first claim held the shared port in the maps and the others waited in the chain layout;
    # with that holder maybe among the deleted, the line is whatever of it is alive, nothing else
    key = "any/4/tcp/7000"
    line = ([snap.own[key]] if key in snap.own else []) + snap.line(key)
    assert sorted(line) == sorted(shared)
    if len(snap.line(key)) > 1:
        assert snap.elements[key] == names.bucket_chain(key)
    # nothing else lingers: the waiting owners' chains, the shared buckets and the base chains
    buckets = {names.bucket_chain(k) for k, claimants in snap.chain_claims().items() if len(claimants) > 1}
    expected_chains = {"prerouting", "output", "postrouting", "hostports"} | buckets
    for o in snap.chain_owners():
        expected_chains |= {f"c-{o}", f"m-{o}"}
    assert set(snap.chains) == expected_chains
    assert set(snap.digests) == set(snap.owners())


def test_gc_removes_containers_not_listed(lab, plugin_dir, routed):
    """Single: GC exists at 1.1.0 only."""
    for i, cid in enumerate(("keep", "gone1", "gone2")):
        conf = pm_conf("1.1.0", synthetic_prev(i, "1.1.0"), [{"hostPort": 8000 + i, "containerPort": 80}])
        assert run_plugin(lab, plugin_dir, "ADD", conf, cid)[0] == 0
    other = pm_conf("1.1.0", synthetic_prev(9, "1.1.0"), [{"hostPort": 8009, "containerPort": 80}], name="othernet")
    assert run_plugin(lab, plugin_dir, "ADD", other, "gone1")[0] == 0
    gc = pm_conf("1.1.0", **{"cni.dev/valid-attachments": [{"containerID": "keep", "ifname": "eth0"}]})
    env = {"CNI_COMMAND": "GC", "CNI_PATH": plugin_dir}
    proc = lab.run(lab.node, "env", "-i", *[f"{k}={v}" for k, v in env.items()], os.path.join(plugin_dir, "portmap"),
                   check=False, input=json.dumps(gc))
    assert proc.returncode == 0, proc.stdout
    assert sorted(table(lab).owners()) == sorted([names.owner_id("pmsyn", "keep"), names.owner_id("othernet", "gone1")])


def test_bad_conditions_leave_nothing_behind(lab, plugin_dir, routed):
    """Single version: the config is refused while parsing, before any version-dependent step."""
    conf = pm_conf("1.0.0", synthetic_prev(1, "1.0.0"), [{"hostPort": 8080, "containerPort": 80}],
                   conditionsV4=["ip", "saddr", "not-an-address"])
    code, out = run_plugin(lab, plugin_dir, "ADD", conf, "badcond")
    # Refused while parsing the config, before nft sees anything.
    assert code == 1 and out["code"] == 999
    assert out["msg"] == "failed to parse config: conditionsV4 is not a single nftables match expression: 'ip saddr not-an-address'"
    assert "'not-an-address' is not an IPv4 address or prefix" in out["details"]
    assert table(lab).owners() == []
    good = pm_conf("1.0.0", synthetic_prev(1, "1.0.0"), [{"hostPort": 8080, "containerPort": 80}],
                   conditionsV4=["ip", "saddr", "!=", "10.99.0.1"])
    assert run_plugin(lab, plugin_dir, "ADD", good, "goodcond")[0] == 0


def test_udp_conntrack_flushed_on_add(lab, node, chained_version):
    runtime, client = node
    conf = bridge_conflist(lab, version=chained_version, dual=False)
    # conntrack runs in a namespace once some rule needs it (here: a test-owned table)
    lab.run(lab.node, "nft", "add table ip pmtest; add chain ip pmtest c { type filter hook prerouting priority 0; }; add rule ip pmtest c ct state new accept")
    # a client already talking to the port before the mapping exists leaves a conntrack entry
    lab.run(client, "socat", "-T0.3", "-", f"UDP:{NODE4}:5454,sourceport=40000", check=False, input="early\n")
    listed = lab.run(lab.node, "conntrack", "-L", "-p", "udp", "--dport", "5454", check=False)
    assert "dport=5454" in listed.stdout
    pod = lab.netns("pod")
    att = Attachment("ctr-udp", pod, "eth0", capability_args={"portMappings": [{"hostPort": 5454, "containerPort": 53, "protocol": "udp"}]})
    runtime.add(conf, att)
    listed = lab.run(lab.node, "conntrack", "-L", "-p", "udp", "--dport", "5454", check=False)
    assert "dport=5454" not in listed.stdout
    runtime.delete(conf, att)


def test_check_reports_a_hand_flushed_shared_chain(lab, node, check_version):
    """ADD does not redeclare the shared chains (that costs ~15 ms per exec), so CHECK watches them."""
    runtime, _client = node
    conf = bridge_conflist(lab, version=check_version, dual=False)
    att = Attachment("ctr-shared", lab.netns("pod"), "eth0",
                     capability_args={"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
    runtime.add(conf, att)
    runtime.check(conf, att)
    lab.run(lab.node, "nft", "flush", "chain", "inet", names.TABLE, "prerouting")
    with pytest.raises(PluginFailed) as info:
        runtime.check(conf, att)
    assert_failed(info.value, 999, f'missing hostport rules in shared chain "prerouting" of table inet {names.TABLE}')
    runtime.delete(conf, Attachment("ctr-shared", att.netns, "eth0"))
