"""A libcni equivalent: run a network config list against a namespace as containerd / CRI-O do.

ADD runs the plugins in order, each getting the previous plugin's result as ``prevResult``;
``capabilities`` are replaced by ``runtimeConfig`` built from the capability arguments; the final
result is cached per (network, container ID, ifname) and fed back to every plugin on CHECK and,
in reverse order, on DEL.  Plugins are found on ``bin_dirs`` (ours, the reference Go plugins in a
distro's plugin directory, or any mix), so the same runner drives tests, benchmarks and the demo.
This module never imports typer: the CLI is a thin layer over it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cnichain.common import atomic
from cnichain.common import netns as netns_mod
from cnichain.common.errors import CniError
from cnichain.common.invoke import error_from_output, find_plugin
from cnichain.common.skel import valid_name
from cnichain.common.version import at_least


DEFAULT_BIN_DIR = "/opt/cni/bin"  # where runtimes look for plugins unless told otherwise


def plugin_dirs(given: Optional[list[str]] = None) -> list[str]:
    """The plugin directories to search: ``given``, else ``$CNI_PATH``, else :data:`DEFAULT_BIN_DIR`."""
    return list(given or []) or [d for d in os.environ.get("CNI_PATH", "").split(":") if d] or [DEFAULT_BIN_DIR]


class ConfigError(ValueError):
    """The config list cannot be used (missing file, bad JSON, no plugins)."""


class PluginFailed(RuntimeError):
    """One plugin exec failed.  ``partial_result`` is, for a failed ADD, the result of the plugins
    before it (None when the first plugin failed): what a runtime could hand to a DEL that follows."""

    def __init__(self, plugin_type: str, command: str, error: CniError) -> None:
        super().__init__(f"plugin {plugin_type} {command} failed: {error}")
        self.plugin_type = plugin_type
        self.command = command
        self.error = error
        self.partial_result: Optional[dict] = None


@dataclass
class ConfList:
    name: str
    cni_version: str
    plugins: list[dict]
    disable_check: bool = False
    disable_gc: bool = False
    raw: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<config>") -> "ConfList":
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: not a JSON object")
        if "plugins" not in data:
            if not data.get("type"):
                raise ConfigError(f"{source}: neither a config list (no 'plugins') nor a plugin config (no 'type')")
            # A single-plugin .conf: wrap it the way libcni's ConfListFromConf does.
            data = {"cniVersion": data.get("cniVersion", ""), "name": data.get("name", ""), "plugins": [data]}
        name = data.get("name")
        if not isinstance(name, str) or not valid_name(name):
            raise ConfigError(f"{source}: missing or invalid network 'name'")
        plugins = data.get("plugins")
        if not isinstance(plugins, list) or not plugins:
            raise ConfigError(f"{source}: 'plugins' must be a non-empty list")
        for idx, plugin in enumerate(plugins):
            if not isinstance(plugin, dict) or not isinstance(plugin.get("type"), str) or not plugin["type"]:
                raise ConfigError(f"{source}: plugin {idx} has no 'type'")
        return cls(
            name=name,
            cni_version=str(data.get("cniVersion") or "0.1.0"),
            plugins=plugins,
            disable_check=bool(data.get("disableCheck", False)),
            disable_gc=bool(data.get("disableGC", False)),
            raw=data,
        )

    @classmethod
    def load(cls, path: str) -> "ConfList":
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:
            raise ConfigError(f"{path}: invalid JSON: {exc}") from None
        return cls.from_dict(data, path)


@dataclass
class Attachment:
    """What the runtime knows about one pod's attachment to the network."""

    container_id: str
    netns: str
    ifname: str = "eth0"
    cni_args: list[tuple[str, str]] = field(default_factory=list)
    capability_args: dict = field(default_factory=dict)


@dataclass
class ExecRecord:
    plugin: str
    command: str
    seconds: float
    code: int


class Runtime:
    def __init__(
        self,
        bin_dirs: list[str],
        cache_dir: str,
        node_netns: Optional[str] = None,
        on_exec: Optional[Callable[[ExecRecord], None]] = None,
        timeout: float = 120.0,
        extra_env: Optional[dict[str, str]] = None,
    ) -> None:
        self.bin_dirs = [d for d in bin_dirs if d]
        # Added to every plugin's environment (e.g. CNICHAIN_AGENT_SOCKET for the bench's modes).
        self.extra_env = dict(extra_env or {})
        self.cache_dir = cache_dir
        self.node_netns = node_netns
        self.on_exec = on_exec
        self.timeout = timeout

    # -- plugin exec -------------------------------------------------------------------------
    def exec_plugin(self, plugin_type: str, command: str, att: Optional[Attachment], conf: dict) -> bytes:
        binary = find_plugin(plugin_type, self.bin_dirs)
        env = {"CNI_COMMAND": command, "CNI_PATH": ":".join(self.bin_dirs), "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
        env.update(self.extra_env)
        if att is not None:
            env.update({"CNI_CONTAINERID": att.container_id, "CNI_NETNS": att.netns, "CNI_IFNAME": att.ifname})
            if att.cni_args:
                env["CNI_ARGS"] = ";".join(f"{k}={v}" for k, v in att.cni_args)
        stdin = json.dumps(conf).encode()
        started = time.perf_counter()
        if self.node_netns:
            # setns is per thread: only this thread (and the child it forks) moves.
            with netns_mod.entered(self.node_netns):
                proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        else:
            proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        try:
            out, err = proc.communicate(stdin, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        elapsed = time.perf_counter() - started
        if self.on_exec is not None:
            self.on_exec(ExecRecord(plugin_type, command, elapsed, proc.returncode))
        if proc.returncode != 0:
            raise PluginFailed(plugin_type, command, error_from_output(out, err, proc.returncode))
        return out

    def plugin_config(self, conflist: ConfList, plugin: dict, att: Optional[Attachment], prev: Optional[dict]) -> dict:
        conf = dict(plugin)
        conf["name"] = conflist.name
        conf["cniVersion"] = conflist.cni_version
        caps = conf.pop("capabilities", None)
        if isinstance(caps, dict) and att is not None:
            runtime_config = {k: att.capability_args[k] for k, on in caps.items() if on and k in att.capability_args}
            if runtime_config:
                conf["runtimeConfig"] = runtime_config
        if prev is not None:
            conf["prevResult"] = prev
        return conf

    # -- the result cache --------------------------------------------------------------------
    def cache_path(self, network: str, att: Attachment) -> str:
        return os.path.join(self.cache_dir, "results", f"{network}-{att.container_id}-{att.ifname}")

    def _save_cache(self, conflist: ConfList, att: Attachment, result: Optional[dict]) -> None:
        path = self.cache_path(conflist.name, att)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        entry = {
            "kind": "cniCacheV1",
            "containerId": att.container_id,
            "ifName": att.ifname,
            "networkName": conflist.name,
            "netns": att.netns,
            "cniArgs": att.cni_args,
            "capabilityArgs": att.capability_args,
            # libcni keeps the conflist the ADD ran with (Go marshals []byte as base64): CRI-O's
            # DEL runs that list, not the file on disk now, and the agent's reconciler repairs and
            # collects from it without the file it came from.
            "config": base64.b64encode(json.dumps(conflist.raw).encode()).decode(),
            "result": result,
        }
        atomic.write_file(path, json.dumps(entry).encode(), 0o600)

    def cached(self, network: str, att: Attachment) -> Optional[dict]:
        try:
            with open(self.cache_path(network, att), "rb") as fh:
                entry = json.loads(fh.read())
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def cached_conflist(self, network: str, att: Attachment) -> Optional[ConfList]:
        """The conflist the cached ADD of ``att`` ran with (libcni's GetNetworkListCachedConfig)."""
        entry = self.cached(network, att)
        if not entry or not isinstance(entry.get("config"), str):
            return None
        try:
            return ConfList.from_dict(json.loads(base64.b64decode(entry["config"])), "cached config")
        except (ValueError, ConfigError):
            return None

    def drop_cache(self, network: str, att: Attachment) -> None:
        try:
            os.unlink(self.cache_path(network, att))
        except FileNotFoundError:
            pass

    def cached_attachments(self, network: str) -> list[dict]:
        folder = os.path.join(self.cache_dir, "results")
        out = []
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return []
        for name in names:
            if not name.startswith(network + "-") or ".tmp" in name:
                continue
            try:
                with open(os.path.join(folder, name), "rb") as fh:
                    entry = json.loads(fh.read())
            except (OSError, ValueError):
                continue
            if isinstance(entry, dict) and entry.get("networkName") == network:
                out.append(entry)
        return out

    # -- operations ----------------------------------------------------------------------------
    def add(self, conflist: ConfList, att: Attachment) -> dict:
        prev: Optional[dict] = None
        for plugin in conflist.plugins:
            try:
                out = self.exec_plugin(plugin["type"], "ADD", att, self.plugin_config(conflist, plugin, att, prev))
            except PluginFailed as exc:
                exc.partial_result = prev
                raise
            try:
                prev = json.loads(out)
            except ValueError as exc:
                failed = PluginFailed(plugin["type"], "ADD", CniError(6, f"invalid result JSON: {exc}"))
                failed.partial_result = prev
                raise failed from None
        self._save_cache(conflist, att, prev)
        return prev or {}

    def delete(self, conflist: ConfList, att: Attachment, prev_result: Optional[dict] = None) -> None:
        """DEL in reverse order with the cached result as ``prevResult`` (or ``prev_result`` when
        given: a runtime holding a partial result), then drop the cache entry."""
        entry = self.cached(conflist.name, att)
        prev = prev_result if prev_result is not None else (entry.get("result") if entry else None)
        if entry and not att.capability_args:
            att.capability_args = dict(entry.get("capabilityArgs") or {})
        for plugin in reversed(conflist.plugins):
            self.exec_plugin(plugin["type"], "DEL", att, self.plugin_config(conflist, plugin, att, prev))
        self.drop_cache(conflist.name, att)

    def check(self, conflist: ConfList, att: Attachment) -> list[tuple[str, bytes]]:
        """CHECK the whole chain against the cached result; returns each plugin's stdout (which
        libcni ignores, and which a correct plugin leaves empty)."""
        if conflist.disable_check:
            return []
        entry = self.cached(conflist.name, att)
        if entry is None:
            raise ConfigError(f"no cached result for {conflist.name}/{att.container_id}/{att.ifname}: was it added?")
        if not att.capability_args:
            att.capability_args = dict(entry.get("capabilityArgs") or {})
        outputs = []
        for plugin in conflist.plugins:
            conf = self.plugin_config(conflist, plugin, att, entry.get("result"))
            outputs.append((plugin["type"], self.exec_plugin(plugin["type"], "CHECK", att, conf)))
        return outputs

    def gc(self, conflist: ConfList, valid: Optional[list[tuple[str, str]]]) -> None:
        """GC to every plugin.  ``valid`` None is sent as JSON ``null`` (what CRI-O sends for a
        network without pods); both keys libcni 1.3 injects are present (cni#1101)."""
        if conflist.disable_gc or not at_least(conflist.cni_version, "1.1.0"):
            return
        attachments = None if valid is None else [{"containerID": cid, "ifname": ifname} for cid, ifname in valid]
        for plugin in conflist.plugins:
            conf = self.plugin_config(conflist, plugin, None, None)
            conf["cni.dev/valid-attachments"] = attachments
            conf["cni.dev/attachments"] = attachments
            self.exec_plugin(plugin["type"], "GC", None, conf)

    def gc_network_list(self, conflist: ConfList, valid: Optional[list[tuple[str, str]]]) -> list[PluginFailed]:
        """libcni 1.3's GCNetworkList: a DEL for every cached attachment of this network that is not
        in ``valid`` (with its cached netns path, CNI_ARGS and capability args, and the conflist
        passed here, as libcni does), then :meth:`gc`.  Like libcni it carries on after a failure
        and returns every failure; nothing at all happens when the conflist sets ``disableGC``."""
        if conflist.disable_gc:
            return []
        keep = set(valid or [])
        failures: list[PluginFailed] = []
        for entry in self.cached_attachments(conflist.name):
            cid, ifname = str(entry.get("containerId", "")), str(entry.get("ifName", ""))
            if (cid, ifname) in keep:
                continue
            args = [(str(k), str(v)) for k, v in entry.get("cniArgs") or []]
            att = Attachment(cid, str(entry.get("netns") or ""), ifname, args, dict(entry.get("capabilityArgs") or {}))
            try:
                self.delete(conflist, att)
            except PluginFailed as exc:
                failures.append(exc)
        try:
            self.gc(conflist, valid)
        except PluginFailed as exc:
            failures.append(exc)
        return failures

    def status(self, conflist: ConfList) -> None:
        if not at_least(conflist.cni_version, "1.1.0"):
            return
        for plugin in conflist.plugins:
            self.exec_plugin(plugin["type"], "STATUS", None, self.plugin_config(conflist, plugin, None, None))

    def version(self, plugin_type: str, config_version: str = "") -> dict:
        """VERSION; libcni sends ``{"cniVersion": <its own version>}`` on stdin (``config_version``)."""
        stdin = {"cniVersion": config_version} if config_version else {}
        return json.loads(self.exec_plugin(plugin_type, "VERSION", None, stdin))
