"""The checks of ``cnichain lint``: a conflist file in, findings out.  Pure apart from reading files.

One bad file in ``/etc/cni/net.d`` blocks every new pod on a node, so everything a runtime or one
of our plugins would refuse is an error here, and everything that silently does less than the
author meant (a key nobody reads, a capability nobody consumes) is a warning.  Plugin types we do
not know (calico, flannel, cilium-cni, ...) are checked only for the keys every plugin shares and
never produce an error on their own.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from cnichain.common.skel import valid_name
from cnichain.common.version import ALL as KNOWN_VERSIONS
from cnichain.common.version import parse as parse_version

from cnichain.tools.lint import catalog, parsers
from cnichain.tools.lint.findings import ERROR, WARNING, FileReport, Finding

# Extensions libcni loads from a conf dir.
CONF_EXTENSIONS = (".conf", ".conflist", ".json")


class Options:
    """What the operator told the linter about the node the files are meant for."""

    def __init__(self, bin_dirs: Optional[list[str]] = None, tuning_allowlist: Optional[list[str]] = None) -> None:
        self.bin_dirs = list(bin_dirs or [])
        self.tuning_allowlist = tuning_allowlist  # None: no allowlist file on the node


def read_tuning_allowlist(path: str) -> Optional[list[str]]:
    """The node's tuning sysctl allowlist file, read as the plugin reads it; ValueError when unusable."""
    from cnichain.common.errors import CniError
    from cnichain.plugins.tuning.config import read_allowlist

    if not os.path.isfile(path):
        raise ValueError(f"--tuning-allowlist {path}: no such file")
    try:
        return read_allowlist(path)
    except CniError as exc:
        raise ValueError(str(exc)) from None


class _Obj(dict):
    """A decoded JSON object that remembers which of its keys were written more than once."""

    dups: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj()
    dups = []
    for k, v in pairs:
        if k in obj and k not in dups:
            dups.append(k)
        obj[k] = v
    obj.dups = tuple(dups)
    return obj


# Fix hints for plugin messages, by a substring of the message.
_FIXES = (
    ("if rate is set, burst must also be set", "give the matching *Burst (bits), or drop the rate"),
    ("if burst is set, rate must also be set", "give the matching *Rate (bits/s), or drop the burst"),
    ("burst cannot be more than 4GB", "use a burst below 34359738360 bits"),
    ("invalid net sysctl key", "use a dotted key under net. (e.g. net.ipv4.conf.IFNAME.arp_filter)"),
    ("is not allowed. Only the following sysctls", "add a matching regex to the tuning allowlist or drop the key"),
    ("duplicated sysctl keys", "write each sysctl key once"),
    ("cannot unmarshal", "give the value the JSON type named after 'of type'"),
    ("overlap", "make the ranges disjoint"),
    ("not v4 nor v6", "give every range a subnet"),
    ("does not support more than 1 address per family", "use cniVersion 0.3.0 or later, or one range set per family"),
    ("no IP ranges specified", "give ipam.ranges (or subnet), or declare the ipRanges capability"),
    ("host bits set", "write the network address of the subnet"),
    ("too small to allocate from", "use a larger subnet (IPv4 /30 or shorter)"),
    ("not in network", "pick rangeStart/rangeEnd inside the subnet"),
    ('route is missing "dst"', 'give every route a "dst"'),
    ("destination has host bits set", "write the network address as dst"),
    ("iptables", "remove the iptables-only setting; cnichain's portmap programs nftables"),
    ("hairpin mode and promiscuous mode", "keep only one of hairpinMode and promiscMode"),
)


_REFUSED = "change the value: {} refuses this config at ADD, before touching the pod"


def _fix_for(message: str) -> str:
    for needle, fix in _FIXES:
        if needle in message:
            return fix
    return ""


def lint_paths(paths: list[str], options: Optional[Options] = None) -> list[FileReport]:
    """Lint files and directories (a directory: its .conf/.conflist/.json files, as libcni reads)."""
    options = options or Options()
    reports: list[FileReport] = []
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(CONF_EXTENSIONS))
            files = [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]
            if not files:
                report = FileReport(path)
                report.add(Finding(WARNING, "no .conf, .conflist or .json files in this directory"))
                reports.append(report)
            reports.extend(lint_file(f, options) for f in files)
        else:
            reports.append(lint_file(path, options))
    return reports


def lint_file(path: str, options: Optional[Options] = None) -> FileReport:
    report = FileReport(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        report.add(Finding(ERROR, f"cannot read file: {exc.strerror}"))
        return report
    lint_bytes(data, report, options or Options())
    return report


def lint_bytes(data: bytes, report: FileReport, options: Options) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.add(Finding(ERROR, f"not UTF-8 text: {exc.reason} at byte {exc.start}"))
        return
    try:
        doc = json.loads(text, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        report.add(Finding(ERROR, f"invalid JSON: {exc.msg}", line=exc.lineno, column=exc.colno,
                           fix="fix the JSON syntax at that position"))
        return
    _Linter(report, options).run(doc)


class _Linter:
    def __init__(self, report: FileReport, options: Options) -> None:
        self.report = report
        self.options = options

    def add(self, severity: str, message: str, index: Optional[int] = None, ptype: str = "", key: str = "",
            fix: str = "") -> None:
        self.report.add(Finding(severity, message, index, ptype, key, fix))

    # -- the list -------------------------------------------------------------------------------
    def run(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            self.add(ERROR, "the top level must be a JSON object (a config list or a plugin config)",
                     fix='write {"cniVersion": ..., "name": ..., "plugins": [...]}')
            return
        if "plugins" not in doc:
            if not isinstance(doc.get("type"), str) or not doc.get("type"):
                self.add(ERROR, "neither a config list (no 'plugins') nor a plugin config (no 'type')",
                         fix='add "plugins": [...] or a "type"')
                return
            # A single-plugin .conf: libcni wraps it into a list of one.
            network = self._name(doc)
            version = self._version(doc)
            self._plugins([doc], network, version, single=True)
            return
        self._dups(doc, None, "", "")
        for key in doc:
            if key not in catalog.LIST_KEYS:
                self._unknown_key(key, catalog.LIST_KEYS, None, "", list_level=True)
        network = self._name(doc)
        version = self._version(doc)
        for key in ("disableCheck", "disableGC", "loadOnlyInlinedPlugins"):
            if key in doc and not isinstance(doc[key], bool):
                self.add(WARNING, f"{key} should be a JSON boolean, not {json.dumps(doc[key])}", key=key,
                         fix=f'write "{key}": true or false')
        plugins = doc.get("plugins")
        if not isinstance(plugins, list) or not plugins:
            self.add(ERROR, "'plugins' must be a non-empty list", key="plugins",
                     fix="list at least the plugin that creates the interface")
            return
        self._plugins(plugins, network, version, single=False)

    def _name(self, doc: dict) -> str:
        name = doc.get("name")
        if name is None or name == "":
            self.add(ERROR, "missing network name", key="name", fix='add "name": "<network>"')
            return "lint"
        if not isinstance(name, str) or not valid_name(name):
            self.add(ERROR, "invalid characters found in network name", key="name",
                     fix="use letters, digits, '_', '.' and '-' (starting with a letter or digit)")
            return "lint"
        return name

    def _version(self, doc: dict) -> Optional[str]:
        """The version the runtime will use, or None when the file has none usable."""
        raw = doc.get("cniVersion")
        version: Optional[str] = None
        if raw is None:
            self.add(WARNING, "cniVersion missing: libcni reads the config as 0.1.0", key="cniVersion",
                     fix='add "cniVersion": "1.0.0" (or the version your runtime supports)')
            version = "0.1.0"
        elif not isinstance(raw, str):
            self.add(ERROR, f"cniVersion must be a string, not {json.dumps(raw)}", key="cniVersion",
                     fix='write it quoted, e.g. "1.0.0"')
        else:
            version = self._one_version(raw, "cniVersion")
        many = doc.get("cniVersions")
        if many is not None:
            if not isinstance(many, list) or not all(isinstance(v, str) for v in many):
                self.add(ERROR, "cniVersions must be a list of version strings", key="cniVersions",
                         fix='write e.g. ["1.0.0", "1.1.0"]')
            else:
                usable = [v for v in many if self._one_version(v, "cniVersions") is not None]
                if usable:  # libcni takes the highest version in the list it supports
                    version = max(usable, key=parse_version)
        return version

    def _one_version(self, raw: str, key: str) -> Optional[str]:
        try:
            parse_version(raw)
        except Exception:  # CniError: not numbers, too many parts
            self.add(ERROR, f'malformed CNI version "{raw}"', key=key, fix="write major.minor.patch, e.g. 1.0.0")
            return None
        if raw not in KNOWN_VERSIONS:
            self.add(ERROR, f'unknown CNI version "{raw}"', key=key,
                     fix=f"use one of {', '.join(KNOWN_VERSIONS)}")
            return None
        return raw

    # -- the plugins ----------------------------------------------------------------------------
    def _plugins(self, plugins: list, network: str, version: Optional[str], single: bool) -> None:
        types: list[str] = []
        for i, entry in enumerate(plugins):
            index = None if single else i
            if not isinstance(entry, dict):
                self.add(ERROR, "a plugin entry must be a JSON object", index, fix='write {"type": ...}')
                types.append("")
                continue
            ptype = entry.get("type")
            if not isinstance(ptype, str) or not ptype:
                self.add(ERROR, "plugin has no 'type'", index, key="type", fix='add "type": "<plugin binary>"')
                types.append("")
                continue
            types.append(ptype)
            self._plugin(entry, index, ptype, network, version)
        self._order(types, single)
        if self.options.bin_dirs:
            self._binaries(plugins, types)

    def _plugin(self, entry: dict, index: Optional[int], ptype: str, network: str, version: Optional[str]) -> None:
        ours = catalog.is_ours(ptype)
        self._dups(entry, index, ptype, "")
        self._capabilities(entry, index, ptype)
        if ours:
            known = catalog.known_keys(ptype)
            runtime_only = catalog.runtime_only_keys(ptype)
            for key in entry:
                if key in runtime_only and catalog.matches_folded(key, known) is None:
                    self.add(WARNING, f"{key} is read only from runtimeConfig (capability {key}); "
                             "at the top level it is ignored", index, ptype, key,
                             fix=f'declare "capabilities": {{"{key}": true}} and let the runtime pass it')
                elif catalog.matches_folded(key, known) is None:
                    self._unknown_key(key, known, index, ptype)
            if version is not None:
                self._plugin_version(ptype, version, index)
        ipam = entry.get("ipam")
        ipam_type = ipam.get("type") if isinstance(ipam, dict) else None
        if ipam is not None and not isinstance(ipam, dict):
            sev = ERROR if ours else WARNING
            self.add(sev, f"ipam must be a JSON object, not {json.dumps(ipam)}", index, ptype, "ipam",
                     fix='write "ipam": {"type": ...}')
        if version is None:
            return
        conf = parsers.runtime_view(entry, network, version)
        problems: list[parsers.Problem] = []
        if ptype == "portmap":
            problems = parsers.check_portmap(conf)
        elif ptype == "bandwidth":
            problems = parsers.check_bandwidth(conf)
        elif ptype == "route-override":
            problems = parsers.check_route_override(conf)
        elif ptype == "tuning":
            sysctl = entry.get("sysctl")
            dup = bool(getattr(sysctl, "dups", ()))
            problems = parsers.check_tuning(conf, self.options.tuning_allowlist, dup)
        elif ptype == "bridge":
            problems = parsers.check_bridge(conf)
        for p in problems:
            self.add(ERROR, p.message, index, ptype, p.key, _fix_for(p.message) or _REFUSED.format(ptype))
        if not problems and ptype == "route-override":
            for p in parsers.route_override_skipped(conf):
                self.add(WARNING, p.message, index, ptype, p.key, _fix_for(p.message) or "fix or remove the route")
        if not problems and ptype in ("portmap", "bridge"):
            for p in parsers.compat_notes(ptype, conf):
                self.add(WARNING, p.message, index, ptype, p.key, fix="none needed; remove the key to silence this")
        if ipam_type == "host-local" and (ptype in catalog.PASSES_IPAM_VERBATIM or ptype == "host-local"):
            self._host_local(entry, conf, index, ptype, version)

    def _host_local(self, entry: dict, conf: dict, index: Optional[int], ptype: str, version: str) -> None:
        ipam = entry["ipam"]
        for key in ipam:
            if catalog.matches_folded(key, catalog.HOST_LOCAL_IPAM_KEYS) is None:
                self._unknown_key(key, catalog.HOST_LOCAL_IPAM_KEYS, index, ptype, prefix="ipam.")
        caps = raw if isinstance(raw := entry.get("capabilities"), dict) else {}
        for p in parsers.check_host_local(conf, bool(caps.get("ipRanges"))):
            self.add(ERROR, p.message, index, ptype, p.key, _fix_for(p.message) or _REFUSED.format("host-local"))
        if "host-local" in catalog.OUR_TYPES:
            self._plugin_version("host-local", version, index, ptype)

    def _plugin_version(self, ptype: str, version: str, index: Optional[int], carrier: str = "") -> None:
        supported = catalog.supported_versions(ptype)
        if version not in supported:
            quoted = " ".join(f'"{v}"' for v in supported)
            self.add(ERROR, f'incompatible CNI versions: config is "{version}", {ptype} supports [{quoted}]',
                     index, carrier or ptype, "cniVersion",
                     fix=f"use cniVersion {supported[0]} or later"
                     if parse_version(version) < parse_version(supported[0])
                     else f"use a cniVersion {ptype} supports")
        elif ptype == "route-override" and version not in ("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"):
            self.add(WARNING, f"the reference route-override supports up to 1.0.0; cniVersion {version} "
                     "works only with cnichain's", index, ptype, "cniVersion",
                     fix="keep this node on cnichain's route-override, or use cniVersion 1.0.0")

    def _capabilities(self, entry: dict, index: Optional[int], ptype: str) -> None:
        caps = entry.get("capabilities")
        if caps is None:
            caps = {}
        if not isinstance(caps, dict):
            self.add(ERROR, "capabilities must be a JSON object of capability name -> true", index, ptype,
                     "capabilities", fix='write e.g. "capabilities": {"portMappings": true}')
            return
        ours = catalog.is_ours(ptype)
        consumed = set(catalog.CONSUMES.get(ptype, ()))
        ipam = entry.get("ipam")
        if isinstance(ipam, dict) and ipam.get("type") == "host-local" and ptype in catalog.PASSES_IPAM_VERBATIM:
            consumed |= set(catalog.CONSUMES["host-local"])
        for name, on in caps.items():
            key = f"capabilities.{name}"
            if not isinstance(on, bool):
                self.add(ERROR if ours else WARNING, f"capability {name} must be true or false, not {json.dumps(on)}",
                         index, ptype, key, fix=f'write "{name}": true')
                continue
            if name not in catalog.WELL_KNOWN_CAPABILITIES:
                guess = catalog.did_you_mean(name, catalog.WELL_KNOWN_CAPABILITIES)
                if guess:
                    self.add(ERROR if ours else WARNING,
                             f"unknown capability {name} (did you mean {guess}?): runtimes match capability "
                             "names exactly, so this plugin never receives it", index, ptype, key,
                             fix=f'rename it to "{guess}"')
                    continue
                if ours:
                    self.add(WARNING, f"capability {name} is not one {ptype} consumes", index, ptype, key,
                             fix="remove it")
                continue
            if ours and on and name not in consumed:
                hint = [t for t, c in catalog.CONSUMES.items() if name in c and t != "host-local"]
                self.add(WARNING, f"{ptype} does not consume capability {name}: the runtime's {name} "
                         "arguments go only to the plugin that declares it", index, ptype, key,
                         fix=f"declare it on the {' or '.join(hint)} entry instead" if hint else "remove it")
        if ptype == "portmap" and not caps.get("portMappings") and not _has_runtime(entry, "portMappings"):
            self.add(WARNING, "portmap without the portMappings capability never receives a pod's hostPorts",
                     index, ptype, "capabilities", fix='add "capabilities": {"portMappings": true}')
        if ptype == "bandwidth" and not caps.get("bandwidth") and not any(
                catalog.matches_folded(k, ("ingressRate", "ingressBurst", "egressRate", "egressBurst"))
                for k in entry):
            self.add(WARNING, "bandwidth has neither limits nor the bandwidth capability: it shapes nothing",
                     index, ptype, "capabilities", fix='add "capabilities": {"bandwidth": true}')

    def _unknown_key(self, key: str, known: tuple[str, ...], index: Optional[int], ptype: str,
                     prefix: str = "", list_level: bool = False) -> None:
        guess = catalog.did_you_mean(key, known)
        where = "the config list" if list_level else ptype
        if guess:
            self.add(ERROR, f"unknown key {key} (did you mean {guess}?): {where} ignores it", index, ptype,
                     prefix + key, fix=f'rename it to "{guess}"')
        else:
            self.add(WARNING, f"unknown key {key}: {where} ignores it", index, ptype, prefix + key,
                     fix="remove it unless another tool reads it")

    def _dups(self, obj: Any, index: Optional[int], ptype: str, prefix: str) -> None:
        """Keys written twice in one object (Go keeps the last, silently), at any depth."""
        if isinstance(obj, _Obj):
            for k in obj.dups:
                if prefix == "sysctl." and ptype == "tuning":
                    continue  # tuning refuses these itself (reported with its message)
                self.add(WARNING, f"key {k} is written more than once; the last one wins", index, ptype,
                         prefix + k, fix="keep one")
            for k, v in obj.items():
                if index is None and prefix == "" and k == "plugins":
                    continue  # entries are visited one by one with their index
                self._dups(v, index, ptype, f"{prefix}{k}.")
        elif isinstance(obj, list):
            for item in obj:
                self._dups(item, index, ptype, prefix)

    # -- the chain --------------------------------------------------------------------------------
    def _order(self, types: list[str], single: bool) -> None:
        if single:
            t = types[0]
            if t in catalog.META_TYPES:
                self.add(WARNING, f"a lone {t} config has no previous result: installed as it is, every ADD "
                         "fails with 'must be called as chained plugin'", None, t, "type",
                         fix="use it as an entry of a config list, after the plugin that creates the interface")
            return
        first_main = next((i for i, t in enumerate(types) if t and t not in catalog.META_TYPES), None)
        seen: dict[str, int] = {}
        for i, t in enumerate(types):
            if not t:
                continue
            if t in catalog.META_TYPES and (first_main is None or i < first_main):
                sev = ERROR if catalog.is_ours(t) else WARNING
                after = f"after plugins[{first_main}] ({types[first_main]})" if first_main is not None else \
                    "after a plugin that creates the interface (bridge, ptp, ...)"
                self.add(sev, f"{t} is a chained plugin and needs a previous result: "
                         "it fails with 'must be called as chained plugin' here", i, t, "type",
                         fix=f"move it {after}")
            if t in catalog.META_TYPES and t in seen:
                reason = catalog.TWICE_BREAKS.get(t)
                self.add(ERROR if reason else WARNING,
                         f"{t} appears twice (plugins[{seen[t]}] and plugins[{i}])" + (f": {reason}" if reason else ""),
                         i, t, "type", fix="merge the two entries into one")
            seen.setdefault(t, i)

    def _binaries(self, plugins: list, types: list[str]) -> None:
        from cnichain.common.invoke import find_plugin

        wanted: list[tuple[int, str, str]] = []
        for idx, (entry, t) in enumerate(zip(plugins, types)):
            if t:
                wanted.append((idx, t, "type"))
            ipam = entry.get("ipam") if isinstance(entry, dict) else None
            if isinstance(ipam, dict) and isinstance(ipam.get("type"), str) and ipam["type"]:
                wanted.append((idx, ipam["type"], "ipam.type"))
        for i, name, key in wanted:
            try:
                find_plugin(name, self.options.bin_dirs)
            except Exception as exc:  # CniError with libcni's text
                self.add(ERROR, str(exc), i, types[i], key,
                         fix=f"install {name} into {self.options.bin_dirs[0]} (cnichain install for ours)")


def _has_runtime(entry: dict, key: str) -> bool:
    rc = entry.get("runtimeConfig")
    return isinstance(rc, dict) and key in rc
