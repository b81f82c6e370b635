"""The plugins' launchers: what every install path writes as an executable, and ``cnichain
install|uninstall``, which writes them (and a conflist) from this installation and removes exactly
those again.  (``cnichain node install`` of the bundled tree is :mod:`.bundle_install`.)

Each plugin gets a Python launcher: a few lines run by this installation's interpreter with
``-I -S`` (isolated mode, no ``site``): no shell, no venv activation, no scan of site-packages on
every exec.  The ``sys.path`` entries the plugin needs (where cnichain, pyroute2 and the distro's
nftables binding live) are resolved once, here, and written into the file.

When the native shim was built (``shim/``, see :mod:`cnichain.node.native_shim`) and an agent
socket is configured, the plugin's executable is a copy of that static binary instead, configured
for the plugin type, the socket and its cold path: the Python launcher, written without the agent
step to ``<bin_dir>/.cnichain-cold/<type>``.  The warm path then starts no interpreter at all.

A manifest next to the executables records what was written so ``uninstall`` removes only that.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from typing import Optional

from cnichain.common import atomic
from cnichain.node import native_shim
from cnichain.node.report import InstallReport
from cnichain.plugins import registry

# CNI type -> module under cnichain.plugins (see plugins/registry.py)
PLUGINS: dict[str, str] = dict(registry.MODULES)
MARKER = "# cnichain launcher"
MANIFEST = ".cnichain-install.json"
DEFAULT_AGENT_SOCKET = "/run/cnichain/agent.sock"


def available_plugins() -> dict[str, str]:
    """The plugin types whose package is present in this installation."""
    return {t: m for t, m in PLUGINS.items() if _has_module(f"cnichain.plugins.{m}.plugin")}


def _has_module(name: str) -> bool:
    # find_spec imports the parent packages and raises when one of them is missing (a plugin
    # package not written yet), which means "not available", not an error.
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def import_roots() -> list[str]:
    """Directories that must be on sys.path for a plugin run with ``-I -S``."""
    roots: list[str] = []
    import cnichain.common

    roots.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cnichain.common.__file__)))))
    for mod in ("pyroute2", "nftables"):
        spec = importlib.util.find_spec(mod)
        if spec is not None and spec.origin:
            roots.append(os.path.dirname(os.path.dirname(spec.origin)))
    seen: list[str] = []
    for r in roots:
        if r not in seen:
            seen.append(r)
    return seen


def launcher_source(
    module: str,
    python: Optional[str] = None,
    roots: Optional[list[str]] = None,
    agent_socket: Optional[str] = None,
    prefix_relative: bool = False,
) -> str:
    """The executable for one plugin: try the node agent first, else run the plugin in-process.

    ``prefix_relative``: ``roots`` are relative to the interpreter's tree (a bundled tree,
    node/bundle/), pinned to one version directory (see :func:`_pinned_prefix_path`).

    ``agent_socket`` is baked in (default: ``$CNICHAIN_AGENT_SOCKET`` at install time, else
    /run/cnichain/agent.sock); ``""`` writes a launcher that never contacts an agent.  Otherwise
    ``$CNICHAIN_AGENT_SOCKET`` at run time still overrides it ("off" disables).  The type name sent to the agent is derived from
    the module, so the agent runs the same plugin the cold path would.
    """
    python = python or sys.executable
    roots = import_roots() if roots is None else roots
    agent_socket = resolve_agent_socket(agent_socket)
    plugin_type = plugin_type_of(module)
    head = (
        f"#!{python} -IS\n"
        f"{MARKER} (written by 'cnichain install'; do not edit)\n"
        "import sys\n"
        + (_pinned_prefix_path(roots) if prefix_relative else f"sys.path[0:0] = {roots!r}\n")
    )
    # The cold tail leaves through os._exit once stdout/stderr are flushed: the interpreter's
    # teardown (module and object finalisation, ~1.5 ms of every exec) has nothing to do for a
    # plugin, which writes its files with os.write or closes them in with-blocks.  An exception
    # still takes the ordinary way out (traceback, full teardown).
    cold = (
        f"from cnichain.plugins.{module}.__main__ import main\n"
        "code = main()\n"
        "sys.stdout.flush()\n"
        "sys.stderr.flush()\n"
        "import os\n"
        "os._exit(code)\n"
    )
    if not agent_socket:
        return head + cold
    # The agent's answer is already on fds 1 and 2 (the shim writes them directly), so the warm
    # path leaves through posix._exit too: no interpreter teardown (~1 ms), and no ``os`` import.
    return head + (
        "from cnichain.common.shim import forward\n"
        f"code = forward({plugin_type!r}, {agent_socket!r})\n"
        "if code is not None:\n"
        "    import posix\n"
        "    posix._exit(code)\n"
    ) + cold


def _pinned_prefix_path(roots: list[str]) -> str:
    """Import path lines for a launcher whose interpreter is reached through a ``current`` symlink.

    The symlink is read once, at start, and every import path (stdlib included) is pinned to the
    version directory it named then, so a plugin running while an upgrade switches the symlink
    keeps importing from one version only.  ``posix`` is built in and already loaded: no cost.
    """
    return (
        "import posix\n"
        "p = sys.prefix\n"
        "try:\n"
        "    t = posix.readlink(p)\n"
        "    v = t if t[:1] == '/' else p.rsplit('/', 1)[0] + '/' + t\n"
        "    sys.path[:] = [v + e[len(p):] if e[:len(p) + 1] == p + '/' else e for e in sys.path]\n"
        "except OSError:\n"
        "    v = p\n"
        f"sys.path[0:0] = [v + '/' + r for r in {roots!r}]\n"
    )


def resolve_agent_socket(agent_socket: Optional[str]) -> str:
    """The socket baked into executables: as given, else ``$CNICHAIN_AGENT_SOCKET``, else the default."""
    if agent_socket is None:
        return os.environ.get("CNICHAIN_AGENT_SOCKET", DEFAULT_AGENT_SOCKET)
    return agent_socket


def plugin_type_of(module: str) -> str:
    return {m: t for t, m in PLUGINS.items()}.get(module, module.replace("_", "-"))


def python_launcher(executable: str) -> str:
    """The Python launcher behind an installed executable: the native shim's cold launcher, or the
    executable itself when it is a launcher (what ``-X importtime`` measurements must run)."""
    with open(executable, "rb") as fh:
        data = fh.read(4 << 20)
    config = native_shim.read_config(data) if data.startswith(b"\x7fELF") else None
    return config.fallback if config is not None else executable


def conflists_dir() -> str:
    import cnichain.conflists

    return os.path.dirname(os.path.abspath(cnichain.conflists.__file__))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _load_manifest(bin_dir: str) -> dict[str, str]:
    try:
        with open(os.path.join(bin_dir, MANIFEST), "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {}


def _save_manifest(bin_dir: str, files: dict[str, str]) -> None:
    path = os.path.join(bin_dir, MANIFEST)
    if not files:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    atomic.write_file(path, json.dumps({"files": files}, indent=2, sort_keys=True).encode(), 0o600)


def _owned(path: str, manifest: dict[str, str]) -> bool:
    """True when ``path`` is a file we wrote and nobody changed since."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return manifest.get(path) == _digest(data)


def written_here(path: str, plugin_type: str) -> bool:
    """Whether ``path`` is one of our executables for ``plugin_type``: a launcher of ours (its
    marker line and the plugin's module, as ``install`` and ``node install`` write it), or a native
    shim configured for that type whose cold launcher is one.

    What the reconciler asks before it protects state it has not seen installed yet: a conflist
    that names ``portmap`` while the bin dir holds another implementation is not ours to repair.
    Reads at most a few MB of one file; any error means "not ours"."""
    module = PLUGINS.get(plugin_type)
    if module is None:
        return False
    try:
        with open(path, "rb") as fh:
            data = fh.read(8 << 20)
    except OSError:
        return False
    if data.startswith(b"#!"):
        head = data[:4096].decode("utf-8", "replace")
        return MARKER in head and f"cnichain.plugins.{module}.__main__" in head
    config = native_shim.read_config(data) if data.startswith(b"\x7fELF") else None
    if config is None or config.plugin_type != plugin_type or config.fallback == path:
        return False
    return written_here(config.fallback, plugin_type)


def _write(path: str, data: bytes, mode: int, manifest: dict[str, str], force: bool, report: InstallReport) -> None:
    if os.path.lexists(path):
        try:
            with open(path, "rb") as fh:
                if fh.read() == data and path in manifest:
                    report.unchanged.append(path)
                    return
        except OSError:
            pass
        if not force and not _owned(path, manifest):
            report.refused.append(path)
            return
    atomic.write_file(path, data, mode)
    manifest[path] = _digest(data)
    report.written.append(path)


def install(
    bin_dir: str,
    conf_dir: Optional[str] = None,
    conflist: Optional[str] = None,
    force: bool = False,
    python: Optional[str] = None,
    plugins: Optional[list[str]] = None,
    agent_socket: Optional[str] = None,
    native: Optional[bool] = None,
) -> InstallReport:
    """``agent_socket``: see :func:`launcher_source` (None: the default; "": no agent).

    ``native``: None installs the native shim as each executable when it was built, False always
    writes Python launchers, True fails when the shim was not built.  Either way an install without
    an agent socket ("") writes Python launchers: there the shim would only add an exec.
    """
    report = InstallReport()
    os.makedirs(bin_dir, mode=0o755, exist_ok=True)
    manifest = _load_manifest(bin_dir)
    roots = import_roots()
    chosen = available_plugins()
    if plugins is not None:
        chosen = {t: m for t, m in chosen.items() if t in plugins}
    shim_binary = _native_binary(native, resolve_agent_socket(agent_socket))
    for plugin_type, module in sorted(chosen.items()):
        target = os.path.join(bin_dir, plugin_type)
        if shim_binary is None:
            source = launcher_source(module, python, roots, agent_socket).encode()
            _write(target, source, 0o755, manifest, force, report)
            continue
        # The cold launcher first, so an installed shim never points at a file not yet there.
        cold = native_shim.cold_launcher_path(bin_dir, plugin_type)
        os.makedirs(os.path.dirname(cold), mode=0o755, exist_ok=True)
        _write(cold, launcher_source(module, python, roots, "").encode(), 0o755, manifest, force, report)
        if cold in report.refused:
            report.refused.append(target)  # a shim must never fall back to a file we did not write
            continue
        config = native_shim.ShimConfig(plugin_type, resolve_agent_socket(agent_socket), cold)
        _write(target, native_shim.configure(shim_binary, config), 0o755, manifest, force, report)
    if conf_dir and conflist:
        src = os.path.join(conflists_dir(), conflist if conflist.endswith((".conflist", ".conf")) else conflist + ".conflist")
        with open(src, "rb") as fh:
            data = fh.read()
        json.loads(data)  # refuse to install a broken file
        os.makedirs(conf_dir, mode=0o755, exist_ok=True)
        _write(os.path.join(conf_dir, os.path.basename(src)), data, 0o644, manifest, force, report)
    _save_manifest(bin_dir, manifest)
    return report


def _native_binary(native: Optional[bool], agent_socket: str) -> Optional[bytes]:
    """The generic native shim's bytes when executables should be native shims, else None."""
    if native is False or not agent_socket:
        return None  # without an agent the shim would only add an exec in front of the launcher
    path = native_shim.built_binary()
    if path is None:
        if native:
            raise FileNotFoundError("the native shim was not built (shim/build.sh)")
        return None
    with open(path, "rb") as fh:
        return fh.read()


def uninstall(bin_dir: str) -> InstallReport:
    """Remove every file the manifest in ``bin_dir`` lists that is still as we wrote it."""
    report = InstallReport()
    manifest = _load_manifest(bin_dir)
    keep: dict[str, str] = {}
    for path, digest in sorted(manifest.items()):
        if not os.path.lexists(path):
            continue
        if _owned(path, manifest):
            os.unlink(path)
            report.removed.append(path)
        else:
            report.refused.append(path)
            keep[path] = digest
    _save_manifest(bin_dir, keep)
    try:  # the cold launchers' directory, once it holds nothing more
        os.rmdir(os.path.join(bin_dir, native_shim.COLD_DIR))
    except OSError:
        pass
    return report
