"""The reference implementations a run compares against: where they are, which version, which modes.

A run may take several references (``--reference NAME=DIR``, e.g. Debian 12's 1.1.1 in
``/usr/lib/cni`` and sid's 1.9.1 that ``./run`` unpacked, ``debian:sid``), and each reference whose
portmap knows the ``backend`` key (1.6.0 and later) runs once per requested portmap backend
(``--reference-portmap-backends iptables,nftables``): ``ref-1.9.1-iptables``, ``ref-1.9.1-nft``.
A reference that predates the key runs once, on the only backend it has (iptables).  Whether the
key is known is asked of the binary itself, not guessed from a version: a DEL with an unknown
backend is refused by a portmap that reads the key and ignored by one that does not.  The probe
runs in the lab's own node namespace (an old portmap's DEL still runs iptables there).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from typing import Optional

from cnichain.benchmarks.latency.options import PORTMAP_BACKENDS, Options
from cnichain.tools import debcache
from cnichain.tools.lab import Lab

PROBE_BACKEND = "cnichain-probe-unknown-backend"


@dataclass(frozen=True)
class Reference:
    """One reference plugin set: its name, directory and package version ("" when unknown)."""

    name: str
    bin_dir: str
    version: str


@dataclass(frozen=True)
class Variant:
    """One reference mode: the mode name, the reference it runs, the portmap backend it sets."""

    mode: str
    reference: Reference
    portmap_backend: Optional[str]


def resolve(options: Options, notes: list[str]) -> list[Reference]:
    """The references of ``options`` that exist here, in order; a note for each one that does not."""
    found = []
    for name, spec in options.reference_specs():
        where = debcache.resolve_plugins_dir(spec)
        if where is None or not os.path.isfile(os.path.join(where, "bridge")):
            notes.append(f"reference {name} skipped: no reference plugins in {where or spec}")
            continue
        found.append(Reference(name, where, package_version(spec, where)))
    return found


def package_version(spec: str, where: str) -> str:
    """The Debian version of the plugins in ``where``: the deb cache's record, else dpkg's."""
    if spec.startswith(debcache.SUITE_PREFIX):
        return debcache.version(spec[len(debcache.SUITE_PREFIX):], "containernetworking-plugins") or ""
    try:
        owner = subprocess.run(["dpkg-query", "-S", os.path.join(os.path.realpath(where), "bridge")],
                               capture_output=True, text=True, timeout=30)
        package = owner.stdout.split(":", 1)[0].strip() if owner.returncode == 0 else ""
        if not package:
            return ""
        shown = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True,
                               timeout=30)
        return shown.stdout.strip() if shown.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def knows_portmap_backend(lab: Lab, bin_dir: str) -> bool:
    """True when this reference's portmap reads the ``backend`` key (it refuses an unknown one)."""
    portmap = os.path.join(bin_dir, "portmap")
    if not os.path.isfile(portmap):
        return False
    conf = {"cniVersion": "1.0.0", "name": "cnichain-probe", "type": "portmap", "backend": PROBE_BACKEND}
    env = {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": "cnichain-probe", "CNI_IFNAME": "eth0", "CNI_NETNS": "",
           "CNI_PATH": bin_dir, "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    proc = lab.run(lab.node, portmap, check=False, input=json.dumps(conf), env=env, timeout=30)
    return proc.returncode != 0 and "backend" in (proc.stdout + proc.stderr)


def variants(lab: Lab, options: Options, refs: list[Reference], notes: list[str]) -> list[Variant]:
    """The reference modes to run: one per reference, or one per backend where portmap has the key."""
    backends = options.reference_portmap_backends
    out = []
    for ref in refs:
        if not backends:
            out.append(Variant(ref.name, ref, None))
        elif knows_portmap_backend(lab, ref.bin_dir):
            out += [Variant(f"{ref.name}-{PORTMAP_BACKENDS[b]}", ref, b) for b in backends]
        else:
            out.append(Variant(ref.name, ref, None))
            notes.append(f"reference {ref.name}: its portmap has no 'backend' key; it runs once, on iptables")
    return out
