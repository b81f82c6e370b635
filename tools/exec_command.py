"""``cnichain exec``: one CNI command on a config list, from the values an operator typed.

The values arrive as text: capability arguments as ``NAME=JSON`` or a JSON file of them, CNI_ARGS
as ``K=V``, GC's live attachments as ``CID`` or ``CID/IFNAME``.  :func:`run` checks them, builds the
:class:`~cnichain.podstate.runtime.Attachment` and calls the one :class:`~cnichain.podstate.runtime.Runtime`
method the command names, the way containerd and CRI-O would.  Bad input is a
:class:`~cnichain.podstate.runtime.ConfigError` naming the option, raised before any plugin runs.
"""

from __future__ import annotations

import json
from typing import Optional

from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, Runtime, plugin_dirs

COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS")


def capability_args(caps: list[str], cap_files: list[str]) -> dict:
    """The capability arguments: each file's JSON object, then each ``NAME=JSON`` over them."""
    out: dict = {}
    for path in cap_files:
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--cap-file {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"--cap-file {path}: expected a JSON object of capability name -> value")
        out.update(data)
    for item in caps:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--cap {item!r}: expected NAME=JSON")
        try:
            out[name] = json.loads(raw)
        except ValueError as exc:
            raise ConfigError(f"--cap {name}: invalid JSON: {exc}") from None
    return out


def cni_args(items: list[str]) -> list[tuple[str, str]]:
    """``K=V`` texts as CNI_ARGS pairs."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--arg {item!r}: expected K=V")
        out.append((key, value))
    return out


def run(command: str, conflist: str, *, netns: str = "", container_id: str = "", ifname: str = "eth0",
        bin_dirs: Optional[list[str]] = None, cache_dir: str, caps: Optional[list[str]] = None,
        cap_files: Optional[list[str]] = None, args: Optional[list[str]] = None, valid: Optional[list[str]] = None,
        node_netns: str = "") -> Optional[dict]:
    """Run ``command`` on the config list at ``conflist``; the ADD result, else None.

    Raises ConfigError for bad input or config, PluginFailed when a plugin fails.
    """
    command = command.upper()
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
    conf = ConfList.load(conflist)
    runtime = Runtime(plugin_dirs(bin_dirs), cache_dir, node_netns=node_netns or None)
    pairs = cni_args(args or [])
    if command == "GC":
        runtime.gc(conf, [(cid, ifn or "eth0") for cid, _, ifn in (v.partition("/") for v in valid or [])])
        return None
    if command == "STATUS":
        runtime.status(conf)
        return None
    if not container_id:
        raise ConfigError("--container-id is required")
    if command != "DEL" and not netns:
        raise ConfigError("--netns is required")
    att = Attachment(container_id, netns, ifname, pairs, capability_args(caps or [], cap_files or []))
    if command == "ADD":
        return runtime.add(conf, att)
    if command == "DEL":
        runtime.delete(conf, att)
    else:
        runtime.check(conf, att)
    return None
