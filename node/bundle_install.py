"""The order of a node install, and its undo.

install: copy the tree to ``versions/<id>`` (never over an existing one) -> switch ``current`` by
renaming a symlink -> write the executables (skipping byte-identical ones): the tree's Python
launchers under ``<bin>/.cnichain-cold/`` first, then the tree's native shim as each plugin's
executable (or the launchers themselves when the tree carries no shim) -> run every executable once
(VERSION) and, if one fails, switch ``current`` back and stop -> only then write the conflist,
last, atomically -> prune versions older than the previous one -> record what was written.
A restart or an upgrade runs the same steps: nothing is ever removed from the conf dir, so pods
keep starting during a restart.  Only :func:`uninstall` removes the conflist (and only ours).

All host paths are given as the host sees them; ``host_root`` is where the host's root is mounted
in this process (``/host`` in the init container, ``/`` on the node itself).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

from cnichain.node.bundle import executables, layout
from cnichain.node.bundle.manifest import running_manifest
from cnichain.node import native_shim
from cnichain.node import atomic, chain, verify
from cnichain.node.state import NAME as STATE_NAME
from cnichain.node.report import InstallReport
from cnichain.node.state import NodeState, digest

MODES = ("own", "chain")
DEFAULT_CONF_DIR = "/etc/cni/net.d"
DEFAULT_CONF_NAMES = {"own": "10-cnichain.conflist", "chain": "00-cnichain.conflist"}
DEFAULT_OWN_CONFLIST = "bridge-portmap"


class InstallError(RuntimeError):
    """The install stopped; what was already switched has been rolled back where possible."""


@dataclass
class NodeConfig:
    host_root: str = "/"
    prefix: str = layout.DEFAULT_PREFIX
    bin_dir: str = ""  # default <prefix>/bin
    conf_dir: str = DEFAULT_CONF_DIR
    mode: str = "own"
    conf_name: str = ""  # default per mode
    conflist: str = DEFAULT_OWN_CONFLIST  # own mode: a shipped conflist name or a file path
    replace_foreign: bool = False  # own mode: overwrite same-named plugins we did not write
    agent_socket: str = "/run/cnichain/agent.sock"
    source_tree: str = ""  # default: the tree this interpreter runs from
    keep_versions: int = 2  # current + previous (a running plugin may still import from it)

    def validated(self) -> "NodeConfig":
        if self.mode not in MODES:
            raise InstallError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        for what, path in (("prefix", self.prefix), ("bin dir", self.bin_path), ("conf dir", self.conf_dir)):
            layout.check_abs_path(path, what)
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.conflist", self.conf_file_name):
            raise InstallError(f"conf name {self.conf_file_name!r}: expected NAME.conflist")
        if not os.path.isdir(self.host_root):
            raise InstallError(f"host root {self.host_root!r} is not a directory")
        if self.keep_versions < 1:
            raise InstallError("keep_versions must be at least 1")
        return self

    @property
    def bin_path(self) -> str:
        return self.bin_dir or layout.bin_dir(self.prefix)

    @property
    def conf_file_name(self) -> str:
        return self.conf_name or DEFAULT_CONF_NAMES.get(self.mode, "")

    def real(self, host_path: str) -> str:
        return layout.under(self.host_root, host_path)

    @property
    def state_path(self) -> str:
        return self.real(layout.home(self.prefix) + "/" + STATE_NAME)


def launcher_names(mode: str) -> dict[str, str]:
    """executable name -> plugin module for a mode (chaining never takes the reference names)."""
    from cnichain.node.launchers import PLUGINS

    return {(chain.our_type(t) if mode == "chain" else t): m for t, m in sorted(PLUGINS.items())}


def planned_executables(cfg: NodeConfig, src: str) -> list[tuple[str, bytes, bool]]:
    """What goes into the bin dir, in write order: the source tree's native shim as each
    executable, its Python launcher (cold launchers first) as the fallback; see executables.py."""
    return executables.planned(cfg.prefix, cfg.bin_path, launcher_names(cfg.mode), cfg.agent_socket,
                               executables.tree_shim(src))


def _source(cfg: NodeConfig) -> tuple[str, dict]:
    src = os.path.realpath(cfg.source_tree or sys.prefix)
    manifest = running_manifest(src)
    if manifest is None:
        raise InstallError(f"{src} is not a bundled tree (build one with ./run bundle or use the image)")
    if manifest.get("prefix") != cfg.prefix:
        raise InstallError(f"this tree was built for prefix {manifest.get('prefix')!r}, not {cfg.prefix!r}; "
                           "build one with ./run bundle OUT --prefix " + cfg.prefix)
    return src, manifest


def own_conflist(cfg: NodeConfig) -> bytes:
    import json

    from cnichain.node.launchers import conflists_dir

    path = cfg.conflist if cfg.conflist.startswith("/") else os.path.join(
        conflists_dir(), cfg.conflist if cfg.conflist.endswith(".conflist") else cfg.conflist + ".conflist")
    with open(path, "rb") as fh:
        data = fh.read()
    conf = json.loads(data)
    if not isinstance(conf, dict) or not isinstance(conf.get("plugins"), list):
        raise InstallError(f"{path}: not a conflist")
    return data


def chained_conflist(cfg: NodeConfig, state: NodeState) -> tuple[bytes, str, bytes]:
    """(our conflist, primary host path, primary bytes) derived from the current primary."""
    real_dir = cfg.real(cfg.conf_dir)
    names = os.listdir(real_dir) if os.path.isdir(real_dir) else []
    ours = {cfg.conf_file_name} | ({os.path.basename(state.conflist)} if state.conflist else set())
    primary = chain.find_primary(names, ours)
    if primary is None:
        raise InstallError(f"no primary network config in {cfg.conf_dir} to chain into (yet)")
    chain.check_sorts_first(cfg.conf_file_name, primary)
    data = atomic.read_bytes(os.path.join(real_dir, primary))
    if data is None:
        raise InstallError(f"{cfg.conf_dir}/{primary} is not a regular file")
    derived = chain.derive(chain.load_primary(primary, data))
    return chain.render(derived), f"{cfg.conf_dir}/{primary}", data


def _check_ours(cfg: NodeConfig, state: NodeState, host_path: str, data: bytes) -> None:
    """Refuse to replace a file we did not write (absent, identical, recorded or marked is fine)."""
    from cnichain.node.launchers import MARKER

    existing = atomic.read_bytes(cfg.real(host_path))
    if existing in (None, data) or state.owns(host_path, existing) or cfg.replace_foreign:
        return
    if not host_path.endswith(".conflist") and MARKER.encode() in existing:
        return  # a launcher written by 'cnichain install'
    if not host_path.endswith(".conflist") and existing.startswith(b"\x7fELF") and \
            native_shim.read_config(existing) is not None:
        return  # a native shim written by 'cnichain install' (or by us, before the state was saved)
    raise InstallError(f"{host_path} exists and was not written by cnichain (use --replace-foreign)")


def _write(cfg: NodeConfig, host_path: str, data: bytes, mode: int, report: InstallReport) -> None:
    real = cfg.real(host_path)
    os.makedirs(os.path.dirname(real), mode=0o755, exist_ok=True)
    (report.written if atomic.write_file(real, data, mode) else report.unchanged).append(host_path)


def write_conflist(cfg: NodeConfig, state: NodeState, report: InstallReport) -> None:
    """Our conflist, last, atomically; for chaining also remember which primary it came from."""
    host_path = f"{cfg.conf_dir}/{cfg.conf_file_name}"
    if cfg.mode == "chain":
        data, primary, primary_data = chained_conflist(cfg, state)
        state.primary, state.primary_digest = primary, digest(primary_data)
    else:
        data = own_conflist(cfg)
    _check_ours(cfg, state, host_path, data)
    _write(cfg, host_path, data, 0o644, report)
    state.conflist, state.conflist_digest = host_path, digest(data)


def _prune(cfg: NodeConfig, keep: list[str], report: InstallReport) -> None:
    versions = cfg.real(layout.versions_dir(cfg.prefix))
    names = sorted(n for n in os.listdir(versions) if re.fullmatch(r"[0-9a-f]{16}", n))
    by_age = sorted(names, key=lambda n: os.stat(os.path.join(versions, n)).st_mtime, reverse=True)
    kept = [n for n in keep if n in names]
    for n in by_age:
        if len(kept) >= cfg.keep_versions:
            break
        if n not in kept:
            kept.append(n)
    for n in names:
        if n not in kept:
            shutil.rmtree(os.path.join(versions, n), ignore_errors=True)
            report.removed.append(f"{layout.versions_dir(cfg.prefix)}/{n}")


def install(cfg: NodeConfig, runner: Optional[verify.Runner] = None) -> InstallReport:
    """Install or upgrade (see the module docstring); raises InstallError and leaves the conf dir alone on failure."""
    cfg.validated()
    report = InstallReport()
    src, manifest = _source(cfg)
    tree_id = str(manifest["tree_id"])
    state = NodeState.load(cfg.state_path)
    target = cfg.real(layout.version_dir(cfg.prefix, tree_id))
    if os.path.realpath(src) != os.path.realpath(target):
        if atomic.copy_tree(src, target):
            report.written.append(layout.version_dir(cfg.prefix, tree_id))
        else:
            report.unchanged.append(layout.version_dir(cfg.prefix, tree_id))
    link = cfg.real(layout.current_link(cfg.prefix))
    previous = atomic.switch_symlink(link, f"versions/{tree_id}")
    if previous != f"versions/{tree_id}":
        report.written.append(f"{layout.current_link(cfg.prefix)} -> versions/{tree_id}")

    def rollback() -> None:
        if previous and previous != f"versions/{tree_id}":
            atomic.switch_symlink(link, previous)
            report.notes.append(f"switched {layout.current_link(cfg.prefix)} back to {previous}")

    try:
        planned = planned_executables(cfg, src)
        for host_path, data, _entry in planned:  # refuse before writing anything
            _check_ours(cfg, state, host_path, data)
        for host_path, data, _entry in planned:  # cold launchers before the shims that exec them
            _write(cfg, host_path, data, 0o755, report)
            state.launchers[host_path] = digest(data)
        run = runner or verify.version_in_root(cfg.host_root)
        for host_path, _data, entry in planned:
            if not entry:
                continue  # a cold launcher runs through its shim (which goes cold: no agent socket)
            ok, message = run(host_path)
            if not ok:
                raise InstallError(f"installed plugin failed its VERSION check: {message}")
            report.verified.append(message)
    except BaseException:
        rollback()
        state.save(cfg.state_path)
        raise
    state.mode, state.tree_id = cfg.mode, tree_id
    write_conflist(cfg, state, report)
    state.save(cfg.state_path)
    keep = [tree_id] + ([previous.rsplit("/", 1)[-1]] if previous else [])
    _prune(cfg, keep, report)
    return report


def refresh_chain(cfg: NodeConfig) -> Optional[InstallReport]:
    """Rewrite our chained conflist if the primary changed since we derived it; None when nothing to do."""
    state = NodeState.load(cfg.state_path)
    real_dir = cfg.real(cfg.conf_dir)
    names = os.listdir(real_dir) if os.path.isdir(real_dir) else []
    ours = {cfg.conf_file_name} | ({os.path.basename(state.conflist)} if state.conflist else set())
    primary = chain.find_primary(names, ours)
    if primary is None:
        return None  # never remove ours because the primary went away
    data = atomic.read_bytes(os.path.join(real_dir, primary))
    if data is None or (f"{cfg.conf_dir}/{primary}" == state.primary and digest(data) == state.primary_digest):
        return None
    report = InstallReport()
    write_conflist(cfg, state, report)
    state.save(cfg.state_path)
    return report


def watch(cfg: NodeConfig, interval: float = 5.0, rounds: Optional[int] = None,
          log: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> int:
    """Poll the conf dir every ``interval`` seconds (``rounds`` bounds it; None: until SIGTERM/SIGINT)."""
    cfg.validated()
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    if rounds is None:
        signal.signal(signal.SIGTERM, on_signal)
    n = 0
    while not stop["now"] and (rounds is None or n < rounds):
        n += 1
        try:
            report = refresh_chain(cfg)
        except (InstallError, chain.ChainError, OSError) as exc:
            log(f"chain: {exc}")
        else:
            if report is not None:
                for path in report.written:
                    log(f"rewrote {path} (primary changed)")
        sleep(max(0.1, min(interval, 300.0)))
    return 0


def uninstall(cfg: NodeConfig, force: bool = False) -> InstallReport:
    """Remove our conflist first (pods stop using us), then launchers, ``current`` and the versions."""
    cfg.validated()
    report = InstallReport()
    state = NodeState.load(cfg.state_path)
    # shims before the cold launchers they fall back to (a shim never points at a removed file)
    paths = ([state.conflist] if state.conflist else []) + sorted(
        state.launchers, key=lambda p: (f"/{native_shim.COLD_DIR}/" in p, p))
    for host_path in paths:
        real = cfg.real(host_path)
        existing = atomic.read_bytes(real)
        if existing is None:
            continue
        if state.owns(host_path, existing) or force:
            os.unlink(real)
            report.removed.append(host_path)
        else:
            report.notes.append(f"kept {host_path} (changed since cnichain wrote it)")
    link = cfg.real(layout.current_link(cfg.prefix))
    if os.path.islink(link):
        os.unlink(link)
        report.removed.append(layout.current_link(cfg.prefix))
    versions = cfg.real(layout.versions_dir(cfg.prefix))
    if os.path.isdir(versions):
        shutil.rmtree(versions)
        report.removed.append(layout.versions_dir(cfg.prefix))
    if os.path.exists(cfg.state_path):
        os.unlink(cfg.state_path)
    try:  # the cold launchers' directory, once it holds nothing more
        os.rmdir(cfg.real(f"{cfg.bin_path}/{native_shim.COLD_DIR}"))
    except OSError:
        pass
    home = cfg.real(layout.home(cfg.prefix))
    if os.path.isdir(home) and not os.listdir(home):
        os.rmdir(home)
    return report
