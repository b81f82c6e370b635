"""CRI-O's way of calling CNI (CRI-O 1.36 over ocicni 0.5.0 and libcni 1.3.0), on the runner.

CRI-O is not packaged for Debian, so tests reproduce its call pattern here instead of running it.
What it does differently from containerd, and what this module does the same way:

* **Config loading** (:meth:`Crio.reload`): every ``.conf``/``.conflist``/``.json`` of the conf dir
  in lexical order; a file that does not parse, whose plugin is missing, or one of whose plugins
  does not list the conflist's ``cniVersion`` in its VERSION answer is skipped (never fatal);
  duplicate network names: the first wins; the default network is the first valid one (or the
  configured name).  VERSION runs for every plugin at every reload.
* **RunPodSandbox** (:meth:`Crio.run_pod`): ADD on the default network, then at once CHECK of the
  whole chain (conflist >= 0.4.0, not ``disableCheck``); a failed ADD or CHECK tears the pod down.
* **Capability args** (:func:`capability_args`): only ``bandwidth``, camelCase, with the unset
  direction present as zeros; ``portMappings`` is never sent (CRI-O programs hostPorts itself).
* **CNI_ARGS** (:func:`cni_args`): fixed order, ``IgnoreUnknown=1`` first.
* **StopPodSandbox** (:meth:`Crio.stop_pod`): one DEL with the conflist cached at ADD time; on
  failure the cache is dropped and the DEL never retried.
* **Restart** (:meth:`Crio.restart`): reload, STATUS on the default network until it first
  succeeds (bounded), CHECK for every running pod, then for every loaded network libcni's
  GCNetworkList: a DEL for each cached attachment not in the valid set, and GC (>= 1.1.0, not
  ``disableGC``) with the valid set -- the running pods on the default network, JSON ``null`` on
  every other network.

This module never imports typer.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Optional

from cnichain.common import atomic
from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, PluginFailed, Runtime
from cnichain.common.errors import CniError
from cnichain.common.version import at_least

LIBCNI_VERSION = "1.1.0"  # libcni 1.3.0's version.Current(): what it sends on VERSION's stdin
CONF_EXTENSIONS = (".conf", ".conflist", ".json")
STATUS_POLL_SECONDS = 0.5  # CRI-O polls STATUS on the default network every 500 ms until it succeeds
STATUS_POLL_ATTEMPTS = 20  # bounded here; CRI-O itself waits forever


@dataclass
class CrioPod:
    """A pod as CRI-O hands it to ocicni: sandbox ID, Kubernetes identity, netns, bandwidth limits."""

    sandbox_id: str
    name: str
    namespace: str
    uid: str
    netns: str
    ifname: str = "eth0"
    ingress_rate: int = 0  # bits/s from kubernetes.io/ingress-bandwidth; 0 = unset
    egress_rate: int = 0
    ingress_burst: int = 0  # CRI-O sends BURST for a set direction
    egress_burst: int = 0


# CRI-O's burst for a set direction, ``math.MaxUint32*8 - 1`` bits (server/sandbox_network.go):
# 34,359,738,359, the largest the reference bandwidth plugin accepts (it refuses burst/8 >= 2^32-1).
BURST = (2 ** 32 - 1) * 8 - 1


def cni_args(pod: CrioPod) -> list[tuple[str, str]]:
    """ocicni's CNI_ARGS, in its fixed order."""
    return [("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", pod.namespace), ("K8S_POD_NAME", pod.name),
            ("K8S_POD_INFRA_CONTAINER_ID", pod.sandbox_id), ("K8S_POD_UID", pod.uid)]


def capability_args(pod: CrioPod) -> dict:
    """What CRI-O puts under ``runtimeConfig``: bandwidth only, camelCase, zeros for the unset
    direction; never ``portMappings``."""
    if not (pod.ingress_rate or pod.egress_rate):
        return {}
    return {"bandwidth": {
        "ingressRate": pod.ingress_rate, "ingressBurst": pod.ingress_burst if pod.ingress_rate else 0,
        "egressRate": pod.egress_rate, "egressBurst": pod.egress_burst if pod.egress_rate else 0,
    }}


def attachment(pod: CrioPod) -> Attachment:
    return Attachment(pod.sandbox_id, pod.netns, pod.ifname, cni_args(pod), capability_args(pod))


class CheckPrinted(PluginFailed):
    """CHECK exited 0 but wrote to stdout: libcni would ignore it; we hold plugins to silence."""


@dataclass
class Crio:
    """One CRI-O instance on a node: its conf dir, the networks it loaded, its runner."""

    runtime: Runtime
    conf_dir: str
    default_name: str = ""  # cni_default_network; "" = the first valid file's network
    networks: list[ConfList] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # file -> why it was not loaded
    version_calls: int = 0  # VERSION execs made by reloads

    # -- config --------------------------------------------------------------------------------
    def reload(self) -> None:
        """Load every valid conflist of the conf dir, running VERSION on each of its plugins."""
        self.networks, self.skipped = [], {}
        try:
            names = sorted(n for n in os.listdir(self.conf_dir) if n.endswith(CONF_EXTENSIONS))
        except OSError as exc:
            raise ConfigError(f"cannot read {self.conf_dir}: {exc.strerror}") from None
        seen: set[str] = set()
        for name in names:
            path = os.path.join(self.conf_dir, name)
            try:
                conflist = ConfList.load(path)
            except ConfigError as exc:
                self.skipped[name] = str(exc)
                continue
            why = self._validate(conflist)
            if why:
                self.skipped[name] = why
            elif conflist.name in seen:
                self.skipped[name] = f"network {conflist.name!r} already loaded from an earlier file"
            else:
                seen.add(conflist.name)
                self.networks.append(conflist)

    def _validate(self, conflist: ConfList) -> str:
        """libcni's ValidateNetworkList: VERSION of every plugin (all of them, even after a
        failure); "" when each lists the conflist's exact ``cniVersion``."""
        problems = []
        for plugin in conflist.plugins:
            ptype = plugin["type"]
            self.version_calls += 1
            try:
                info = self.runtime.version(ptype, LIBCNI_VERSION)
            except (PluginFailed, CniError, ValueError) as exc:
                problems.append(f"plugin {ptype}: {exc}")
                continue
            if conflist.cni_version not in (info.get("supportedVersions") or []):
                problems.append(f"plugin {ptype} does not support config version {conflist.cni_version!r}")
        return "; ".join(problems)

    @property
    def default(self) -> ConfList:
        for conflist in self.networks:
            if not self.default_name or conflist.name == self.default_name:
                return conflist
        raise ConfigError(f"no valid CNI network in {self.conf_dir}: {self.skipped or 'no config files'}")

    # -- pods ----------------------------------------------------------------------------------
    def run_pod(self, pod: CrioPod) -> dict:
        """ADD, then CHECK of the whole chain at once; either failing tears the pod down."""
        conflist = self.default
        att = attachment(pod)
        try:
            result = self.runtime.add(conflist, att)
            self.check_pod(conflist, pod)
        except (PluginFailed, ConfigError, CniError):
            try:
                self.stop_pod(pod)
            except (PluginFailed, ConfigError, CniError):
                pass
            raise
        return result

    def check_pod(self, conflist: ConfList, pod: CrioPod) -> None:
        """ocicni's GetPodNetworkStatus: CHECK when the conflist is >= 0.4.0 (``disableCheck``
        honoured by the runner); any output on stdout counts as a failure here."""
        if not at_least(conflist.cni_version, "0.4.0"):
            return
        for ptype, out in self.runtime.check(conflist, attachment(pod)):
            if out.strip():
                raise CheckPrinted(ptype, "CHECK", CniError(999, f"CHECK printed on stdout: {out[:200]!r}"))

    def stop_pod(self, pod: CrioPod) -> None:
        """One DEL with the conflist cached at ADD time (the loaded one if the cache is gone)."""
        att = attachment(pod)
        conflist = self.runtime.cached_conflist(self.default.name, att) or self.default
        try:
            self.runtime.delete(conflist, att)
        except PluginFailed:
            self.runtime.drop_cache(conflist.name, att)  # CRI-O never retries a failed DEL
            raise

    # -- start-up ------------------------------------------------------------------------------
    def wait_status(self) -> None:
        """STATUS on the default network until it first succeeds (bounded); raises the last error."""
        last: Optional[PluginFailed] = None
        for _ in range(STATUS_POLL_ATTEMPTS):
            try:
                self.runtime.status(self.default)
                return
            except PluginFailed as exc:
                last = exc
                time.sleep(STATUS_POLL_SECONDS)
        assert last is not None
        raise last

    def restart(self, running: list[CrioPod]) -> list[PluginFailed]:
        """CRI-O starting on a node with ``running`` pods: reload, STATUS, CHECK each running pod,
        then GC every network.  Returns the CHECK and GC failures (CRI-O logs them)."""
        self.reload()
        self.wait_status()
        failures: list[PluginFailed] = []
        default = self.default
        for pod in running:
            try:
                self.check_pod(default, pod)
            except PluginFailed as exc:
                failures.append(exc)
        for conflist in self.networks:
            valid = [(p.sandbox_id, p.ifname) for p in running] if conflist.name == default.name else None
            failures += self.runtime.gc_network_list(conflist, valid)
        return failures


def write_conflist(conf_dir: str, filename: str, data: dict) -> str:
    """Write ``data`` as ``filename`` in ``conf_dir`` the way an installer should (temp + rename)."""
    path = os.path.join(conf_dir, filename)
    atomic.write_file(path, json.dumps(data).encode(), 0o644)
    return path
