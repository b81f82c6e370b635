"""bridge's config decoded as Go's encoding/json decodes it into the reference's NetConf.

Tables over every key bridge reads (the shared types.NetConf keys, the bridge keys, ``vlanTrunk``
entries, ``args.cni`` and ``runtimeConfig``): Go field casing and camelCase parse to the same
record, ``null`` is the same as absent, a wrong JSON type fails with Go's text, and the ``mac``
capability is read in the shapes runtimes send it.
"""

from __future__ import annotations

import pytest

from cnichain.common.types import DNS
from cnichain.plugins.bridge.config import SCHEMA
from cnichain.plugins.bridge.config import load as load_config
from tests.gocase import go_casing, keys, outcome, path_id, recase_all, remove, rename, replace, upper_casing

# Two configs that together use every key bridge decodes (a VLAN excludes isGateway here, and
# hairpinMode excludes promiscMode in the reference).
L3 = {
    "cniVersion": "1.0.0",
    "name": "net",
    "type": "bridge",
    "bridge": "br-test",
    "isGateway": True,
    "isDefaultGateway": True,
    "forceAddress": True,
    "ipMasq": True,
    "ipMasqBackend": "nftables",
    "mtu": 1400,
    "hairpinMode": True,
    "vlanTrunk": [{"id": 5}, {"minID": 10, "maxID": 12}],
    "preserveDefaultVlan": True,
    "macspoofchk": True,
    "enabledad": True,
    "portIsolation": True,
    "capabilities": {"mac": True},
    "ipam": {"type": "host-local", "subnet": "10.1.0.0/24"},
    "dns": {"nameservers": ["1.1.1.1"], "domain": "example", "search": ["a.example"], "options": ["ndots:2"]},
    "args": {"cni": {"mac": "02:00:00:00:00:02"}},
    "runtimeConfig": {"mac": "02:00:00:00:00:03"},
}
L2 = {
    "cniVersion": "0.4.0",
    "name": "vlan-net",
    "type": "bridge",
    "vlan": 7,
    "promiscMode": True,
    "disableContainerInterface": True,
    "args": {"cni": {"mac": "02:00:00:00:00:04"}},
}
BASES = {"l3": L3, "l2": L2}
CASES = [(name, path, field) for name, base in BASES.items() for path, field in keys(base, SCHEMA)]
IDS = [f"{name}:{path_id(path)}" for name, path, _ in CASES]


def load(conf: dict, cni_args: str = ""):
    return outcome(lambda: load_config(conf, cni_args))


def test_bases_set_every_field():
    l3, l2 = load(L3), load(L2)
    assert l3.bridge == "br-test" and l3.is_gateway and l3.is_default_gateway and l3.force_address and l3.ip_masq
    assert l3.mtu == 1400 and l3.hairpin_mode and l3.vlan_trunk == (5, 10, 11, 12) and l3.preserve_default_vlan
    assert l3.macspoofchk and l3.enable_dad and l3.port_isolation and l3.ipam_type == "host-local"
    assert l3.dns == DNS(nameservers=["1.1.1.1"], domain="example", search=["a.example"], options=["ndots:2"])
    assert l3.mac == "02:00:00:00:00:03" and l3.network == "net" and l3.cni_version == "1.0.0"
    assert l2.vlan == 7 and l2.promisc_mode and l2.disable_container_interface and l2.mac == "02:00:00:00:00:04"
    assert l2.bridge == "cni0" and l2.cni_version == "0.4.0" and not l2.is_layer3


@pytest.mark.parametrize("casing", [go_casing, upper_casing], ids=["GoCase", "UPPER"])
@pytest.mark.parametrize("base,path,field", CASES, ids=IDS)
def test_each_key_in_another_casing_reads_the_same(base, path, field, casing):
    conf = BASES[base]
    respelled = rename(conf, path, casing(field))
    assert respelled != conf
    assert load(respelled) == load(conf)


@pytest.mark.parametrize("base", sorted(BASES))
def test_whole_config_in_go_casing_reads_the_same(base):
    go = recase_all(BASES[base], SCHEMA, go_casing)
    assert load(go) == load(BASES[base])


def test_go_casing_examples():
    go = recase_all(L3, SCHEMA, go_casing)
    assert go["IsGateway"] is True and go["IPMasq"] is True and go["MTU"] == 1400 and go["IPAM"]["Type"]
    assert go["VlanTrunk"][1] == {"MinID": 10, "MaxID": 12} and go["RuntimeConfig"]["Mac"] and go["Args"]["Cni"]["Mac"]
    assert go["CNIVersion"] == "1.0.0" and go["DNS"]["Nameservers"] == ["1.1.1.1"]


@pytest.mark.parametrize("base,path,field", CASES, ids=IDS)
def test_null_is_the_same_as_absent(base, path, field):
    conf = BASES[base]
    assert load(replace(conf, path, None)) == load(remove(conf, path))


def test_null_bridge_keeps_the_default_name():
    assert load(replace(L3, ("bridge",), None)).bridge == "cni0"


NETCONF_UNMARSHAL = "failed to load netconf: json: cannot unmarshal"
ARGS_TYPE = 'struct { Cni main.BridgeArgs "json:\\"cni,omitempty\\"" }'
RT_TYPE = 'struct { Mac string "json:\\"mac,omitempty\\"" }'
BOOL_KEYS = ["isGateway", "isDefaultGateway", "forceAddress", "ipMasq", "hairpinMode", "promiscMode",
             "preserveDefaultVlan", "macspoofchk", "enabledad", "disableContainerInterface", "portIsolation"]
WRONG_TYPES = [
    *(((key,), "true", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.{key} of type bool") for key in BOOL_KEYS),
    *(((key,), 1, f"{NETCONF_UNMARSHAL} number into Go struct field NetConf.{key} of type bool") for key in BOOL_KEYS),
    (("cniVersion",), 1.0, f"{NETCONF_UNMARSHAL} number into Go struct field NetConf.cniVersion of type string"),
    (("name",), ["net"], f"{NETCONF_UNMARSHAL} array into Go struct field NetConf.name of type string"),
    (("type",), {}, f"{NETCONF_UNMARSHAL} object into Go struct field NetConf.type of type string"),
    (("capabilities",), [], f"{NETCONF_UNMARSHAL} array into Go struct field NetConf.capabilities of type map[string]bool"),
    (("capabilities", "mac"), "yes", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.capabilities of type bool"),
    (("bridge",), 5, f"{NETCONF_UNMARSHAL} number into Go struct field NetConf.bridge of type string"),
    (("ipMasqBackend",), True, f"{NETCONF_UNMARSHAL} bool into Go struct field NetConf.ipMasqBackend of type string"),
    (("mtu",), "1500", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.mtu of type int"),
    (("mtu",), 1.5, f"{NETCONF_UNMARSHAL} number 1.5 into Go struct field NetConf.mtu of type int"),
    (("vlan",), "7", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.vlan of type int"),
    (("vlanTrunk",), {}, f"{NETCONF_UNMARSHAL} object into Go struct field NetConf.vlanTrunk of type []*main.VlanTrunk"),
    (("vlanTrunk", 0), 5, f"{NETCONF_UNMARSHAL} number into Go struct field NetConf.vlanTrunk of type main.VlanTrunk"),
    (("vlanTrunk", 0, "id"), "5", f"{NETCONF_UNMARSHAL} string into Go struct field VlanTrunk.vlanTrunk.id of type int"),
    (("vlanTrunk", 1, "minID"), 1.5, f"{NETCONF_UNMARSHAL} number 1.5 into Go struct field VlanTrunk.vlanTrunk.minID of type int"),
    (("vlanTrunk", 1, "maxID"), True, f"{NETCONF_UNMARSHAL} bool into Go struct field VlanTrunk.vlanTrunk.maxID of type int"),
    (("ipam",), "host-local", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.ipam of type types.IPAM"),
    (("ipam", "type"), 1, f"{NETCONF_UNMARSHAL} number into Go struct field IPAM.ipam.type of type string"),
    (("dns",), [], f"{NETCONF_UNMARSHAL} array into Go struct field NetConf.dns of type types.DNS"),
    (("dns", "nameservers"), "1.1.1.1", f"{NETCONF_UNMARSHAL} string into Go struct field DNS.dns.nameservers of type []string"),
    (("dns", "domain"), 5, f"{NETCONF_UNMARSHAL} number into Go struct field DNS.dns.domain of type string"),
    (("dns", "search"), {}, f"{NETCONF_UNMARSHAL} object into Go struct field DNS.dns.search of type []string"),
    (("dns", "options"), [1], f"{NETCONF_UNMARSHAL} number into Go struct field DNS.dns.options of type string"),
    (("args",), "x", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.args of type {ARGS_TYPE}"),
    (("args", "cni"), "x", f"{NETCONF_UNMARSHAL} string into Go struct field .args.cni of type main.BridgeArgs"),
    (("args", "cni", "mac"), 2, f"{NETCONF_UNMARSHAL} number into Go struct field BridgeArgs.args.cni.mac of type string"),
    (("runtimeConfig",), [], f"{NETCONF_UNMARSHAL} array into Go struct field NetConf.runtimeConfig of type {RT_TYPE}"),
    (("runtimeConfig", "mac"), {}, f"{NETCONF_UNMARSHAL} object into Go struct field .runtimeConfig.mac of type string"),
    (("prevResult",), "x", f"{NETCONF_UNMARSHAL} string into Go struct field NetConf.prevResult of type map[string]interface {{}}"),
]


@pytest.mark.parametrize("path,value,message", WRONG_TYPES, ids=[path_id(p) + "=" + repr(v) for p, v, _ in WRONG_TYPES])
def test_wrong_json_type_fails_with_gos_text(path, value, message):
    conf = dict(L3, prevResult={"cniVersion": "1.0.0"}) if path[0] == "prevResult" else L3
    assert load(replace(conf, path, value)) == ("error", 999, message)


# -- the mac capability and args, as runtimes send them ----------------------------------------


@pytest.mark.parametrize("runtime", [{"mac": "02:AA:00:00:00:01"}, {"Mac": "02:AA:00:00:00:01"}, {"MAC": "02-aa-00-00-00-01"}],
                         ids=["camelCase", "GoCase", "UPPER-dashes"])
def test_mac_capability_in_any_casing(runtime):
    conf = dict(L2, runtimeConfig=runtime)
    assert load_config(conf).mac == "02:aa:00:00:00:01"


def test_empty_runtime_mac_falls_back_to_args_then_cni_args():
    conf = dict(L2, runtimeConfig={"Mac": ""}, args={"CNI": {"MAC": ""}})
    assert load_config(conf, "IgnoreUnknown=1;MAC=02:00:00:00:00:09").mac == "02:00:00:00:00:09"
    conf["Args"] = {"Cni": {"Mac": "02:00:00:00:00:08"}}  # the later spelling of the key wins
    assert load_config(conf, "IgnoreUnknown=1;MAC=02:00:00:00:00:09").mac == "02:00:00:00:00:08"


def test_bridge_entries_of_runtime_conflists_in_go_casing():
    # containerd's and CRI-O's default conflists, respelled as a Go marshaller without tags would.
    entry = {"cniVersion": "1.0.0", "name": "containerd-net", "type": "bridge", "bridge": "cni0", "isGateway": True,
             "ipMasq": True, "promiscMode": True, "ipam": {"type": "host-local"}}
    assert load(recase_all(entry, SCHEMA, go_casing)) == load(entry)
