"""The ``cnichain`` operator CLI: argument parsing only, each command calling the component that does the work.

The only module that imports typer; plugins never import it.  Commands whose component has its own
command line (:data:`FORWARDED`: the agent, the bench) declare no options here: they hand their
arguments over untouched, so ``cnichain agent`` and ``python -m cnichain.agent`` accept, validate
and document (``--help``) exactly the same options.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import List

import typer

from cnichain.common.shim import DEFAULT_SOCKET
from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR as HOST_LOCAL_DATA_DIR
from cnichain.plugins.tuning.config import DEFAULT_DATA_DIR as TUNING_DATA_DIR
from cnichain.podstate.cache import LIBCNI_CACHE_DIR, RUNNER_CACHE_DIR

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Operate the cnichain CNI plugins: run conflists like a runtime, install onto a node, demo, inspect, GC.",
)

NODE_CACHE_DIRS = [LIBCNI_CACHE_DIR, RUNNER_CACHE_DIR]
# command -> (module whose main(argv) parses and runs it, the one line `cnichain --help` shows)
FORWARDED = {
    "agent": ("cnichain.agent.server", "The node agent: warm plugin handlers behind the installed shims, and the "
              "node's reconciler ('agent status': its view).  Options: cnichain agent --help."),
    "bench": ("cnichain.benchmarks.latency.runner", "Per-pod exec-to-exit latency of the chain, side by side with "
              "the reference plugins.  Options: cnichain bench --help."),
}
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _fail(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _forward(name: str, module: str, summary: str) -> None:
    def command(ctx: typer.Context) -> None:
        raise typer.Exit(importlib.import_module(module).main(list(ctx.args)))

    command.__doc__ = summary
    app.command(name, context_settings=PASS_THROUGH)(command)


for _name, (_module, _summary) in FORWARDED.items():
    _forward(_name, _module, _summary)


@app.command("exec")
def exec_cmd(
    command: str = typer.Argument(..., help="ADD, DEL, CHECK, GC or STATUS"),
    conflist: str = typer.Argument(..., help="Path to a .conflist (or single-plugin .conf)"),
    netns: str = typer.Option("", "--netns", help="Pod network namespace path (ADD/CHECK; optional for DEL)"),
    container_id: str = typer.Option("", "--container-id", help="Container ID (ADD/DEL/CHECK)"),
    ifname: str = typer.Option("eth0", "--ifname", help="Interface name inside the pod"),
    bin_dir: List[str] = typer.Option([], "--bin-dir", help="Plugin directory (repeatable); default $CNI_PATH or /opt/cni/bin"),
    cache_dir: str = typer.Option(RUNNER_CACHE_DIR, "--cache-dir", help="Where ADD results are cached for DEL/CHECK"),
    cap: List[str] = typer.Option([], "--cap", help="Capability argument NAME=JSON, e.g. portMappings='[...]' (repeatable)"),
    cap_file: List[str] = typer.Option([], "--cap-file", help="JSON file with an object of capability args"),
    arg: List[str] = typer.Option([], "--arg", help="CNI_ARGS pair K=V (repeatable)"),
    valid: List[str] = typer.Option([], "--valid", help="GC: a live attachment CONTAINERID or CONTAINERID/IFNAME (repeatable)"),
    node_netns: str = typer.Option("", "--node-netns", help="Run the plugins inside this namespace instead of the caller's"),
) -> None:
    """Run a CNI config list the way containerd / CRI-O do (ADD in order, DEL in reverse with the cached result)."""
    from cnichain.tools import exec_command
    from cnichain.podstate.runtime import PluginFailed

    try:
        result = exec_command.run(command, conflist, netns=netns, container_id=container_id, ifname=ifname,
                                  bin_dirs=bin_dir, cache_dir=cache_dir, caps=cap, cap_files=cap_file, args=arg,
                                  valid=valid, node_netns=node_netns)
    except PluginFailed as exc:
        typer.echo(json.dumps(exc.error.to_dict(), indent=4))
        _fail(str(exc))
    except Exception as exc:  # bad input or config, a missing plugin binary, ...
        _fail(str(exc))
    else:
        if result is not None:
            typer.echo(json.dumps(result, indent=4))


@app.command()
def install(
    bin_dir: str = typer.Option("/opt/cni/bin", "--bin-dir", help="Where the plugin executables go"),
    conf_dir: str = typer.Option("", "--conf-dir", help="Where the conflist goes (e.g. /etc/cni/net.d)"),
    conflist: str = typer.Option("", "--conflist", help="Name of a conflist shipped in conflists/ to install"),
    force: bool = typer.Option(False, "--force", help="Overwrite files that cnichain did not write"),
    python_launchers: bool = typer.Option(
        False, "--python-launchers", help="Write Python launchers as the executables even when the native shim is built"),
) -> None:
    """Install one executable per plugin type (and optionally a conflist) onto this node.

    Each executable first hands its request to the node agent (socket: $CNICHAIN_AGENT_SOCKET at
    install time, else /run/cnichain/agent.sock) and otherwise runs the plugin cold in Python.  When
    the static native shim was built (shim/build.sh, run by ./run) the executable is that shim,
    and the Python launcher it falls back to goes to BIN_DIR/.cnichain-cold/TYPE; otherwise the
    executable is the Python launcher itself.
    """
    from cnichain.node import launchers

    if conflist and not conf_dir:
        _fail("--conflist needs --conf-dir")
    try:
        report = launchers.install(bin_dir, conf_dir or None, conflist or None, force=force,
                              native=False if python_launchers else None)
    except FileNotFoundError as exc:
        _fail(f"no such conflist: {exc.filename}")
    except ValueError as exc:  # e.g. an agent socket path too long for a unix socket
        _fail(str(exc))
    for path in report.written:
        typer.echo(f"wrote      {path}")
    for path in report.unchanged:
        typer.echo(f"unchanged  {path}")
    for path in report.refused:
        typer.secho(f"refused    {path} (not written by cnichain; use --force)", fg=typer.colors.YELLOW)
    if report.refused:
        raise typer.Exit(1)


@app.command()
def uninstall(bin_dir: str = typer.Option("/opt/cni/bin", "--bin-dir")) -> None:
    """Remove exactly the files a previous install wrote (and left unmodified), cold launchers included."""
    from cnichain.node import launchers

    report = launchers.uninstall(bin_dir)
    for path in report.removed:
        typer.echo(f"removed    {path}")
    for path in report.refused:
        typer.secho(f"kept       {path} (modified since install)", fg=typer.colors.YELLOW)
    if not report.removed and not report.refused:
        typer.echo("nothing to remove")


@app.command()
def conflists() -> None:
    """List the conflists shipped with cnichain."""
    from cnichain.node.launchers import conflists_dir

    for name in sorted(os.listdir(conflists_dir())):
        if name.endswith((".conflist", ".conf")):
            typer.echo(name)


@app.command()
def demo(
    conflist: str = typer.Option("", "--conflist", help="Conflist to demo (default: the shipped default chain)"),
    pods: int = typer.Option(2, "--pods", min=1, max=8, help="How many pod namespaces"),
    pause: bool = typer.Option(False, "--pause", help="Wait for Enter after announcing each step (walk through it; Ctrl-C cleans up)"),
) -> None:
    """Build a throwaway node + pods, run the chain, prove it works, tear everything down."""
    from cnichain.tools.demo import run_demo

    raise typer.Exit(run_demo(conflist or None, pods, pause))


@app.command()
def lint(
    paths: List[str] = typer.Argument(..., help="Conflist files, or directories of them (e.g. /etc/cni/net.d)"),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable findings for CI"),
    bin_dir: List[str] = typer.Option([], "--bin-dir", help="Also report plugin types missing from this directory (repeatable)"),
    tuning_allowlist: str = typer.Option("", "--tuning-allowlist", help="The node's tuning sysctl allowlist file to check sysctl keys against"),
) -> None:
    """Check conflists before they reach a node: syntax, versions, keys, values, capabilities, chain order.

    Exits 1 when any file has an error; warnings alone exit 0.
    """
    from cnichain.tools import lint as lint_mod

    try:
        allowlist = lint_mod.read_tuning_allowlist(tuning_allowlist) if tuning_allowlist else None
    except ValueError as exc:
        _fail(str(exc), 2)
    reports = lint_mod.lint_paths(paths, lint_mod.Options(bin_dirs=bin_dir, tuning_allowlist=allowlist))
    typer.echo(lint_mod.render_json(reports) if as_json else lint_mod.render_text(reports))
    raise typer.Exit(1 if lint_mod.failed(reports) else 0)


@app.command()
def inspect(
    network: str = typer.Argument("", help="Only containers attached to this network"),
    container: str = typer.Option("", "--container", help="Only this container ID"),
    as_json: bool = typer.Option(False, "--json", help="The whole view as JSON"),
    cache_dir: List[str] = typer.Option(NODE_CACHE_DIRS, "--cache-dir", help="A result cache root holding results/ (repeatable): libcni's /var/lib/cni, our runner's"),
    ipam_dir: List[str] = typer.Option([HOST_LOCAL_DATA_DIR], "--ipam-dir", help="host-local dataDir (repeatable; dirs named in cached conflists are added)"),
    tuning_dir: List[str] = typer.Option([TUNING_DATA_DIR], "--tuning-dir", help="tuning dataDir (repeatable; dirs named in cached conflists are added)"),
    node_netns: str = typer.Option("", "--node-netns", help="Read kernel state in this namespace instead of the caller's"),
    live: List[str] = typer.Option([], "--live", help="A container ID that is alive (repeatable): every other one is an orphan"),
    runtime_endpoint: str = typer.Option("", "--runtime-endpoint", help="CRI socket: a sandbox ListPodSandbox lists is never stale"),
) -> None:
    """Show, per container, what our plugins hold on this node and flag orphans, whichever runtime made the pods.

    Reads host-local reservations, tuning backups, portmap mappings, bandwidth shaping and bridge masquerade rules from the kernel and the plugins' files, joined with the runtimes' result cache. A container is an orphan when it is not in --live (if given), has no cache entry, its cached netns is gone, or its IFB has lost its veth.
    """
    from cnichain.podstate import render, view
    from cnichain.podstate.sandboxes import required_listing

    try:
        view.check_inputs(cache_dir, ipam_dir, tuning_dir, node_netns, [container, *live] if container else live, network)
    except ValueError as exc:
        _fail(str(exc), 2)
    try:
        listed = required_listing(runtime_endpoint)
    except RuntimeError as exc:
        _fail(str(exc))
    src = view.Sources(cache_dirs=cache_dir, ipam_dirs=ipam_dir, tuning_dirs=tuning_dir,
                       node_netns=node_netns or None, live=set(live) if live else None, listed=listed)
    node = view.collect(src, network=network, container=container)
    typer.echo(render.render_json(node) if as_json else render.render_text(node))


@app.command()
def gc(
    conflist: str = typer.Argument("", help="The network's conflist: limits gc to that network and is used where the cache holds no config"),
    apply: bool = typer.Option(False, "--apply", help="Run the DELs and GCs (default: only show them)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show what would be collected (the default; kept for scripts)"),
    valid: List[str] = typer.Option([], "--valid", help="A live attachment CONTAINERID or CONTAINERID/IFNAME (repeatable); when given, every other one is collected"),
    cache_dir: List[str] = typer.Option(NODE_CACHE_DIRS, "--cache-dir", help="A result cache root holding results/ (repeatable)"),
    bin_dir: List[str] = typer.Option([], "--bin-dir", help="Plugin directory (repeatable); default $CNI_PATH or /opt/cni/bin"),
    node_netns: str = typer.Option("", "--node-netns", help="Run the plugins and read kernel state in this namespace"),
    ipam_dir: List[str] = typer.Option([HOST_LOCAL_DATA_DIR], "--ipam-dir", help="host-local dataDir to list what GC removes (repeatable)"),
    tuning_dir: List[str] = typer.Option([TUNING_DATA_DIR], "--tuning-dir", help="tuning dataDir (repeatable)"),
    runtime_endpoint: str = typer.Option("", "--runtime-endpoint", help="CRI socket: a sandbox ListPodSandbox lists is kept"),
) -> None:
    """Collect attachments of pods that no longer exist, from any runtime's result cache or a --valid list.

    DEL for each cached attachment without a live pod (its netns is gone, or it is not in --valid), with the conflist, result and arguments the runtime cached; then CNI GC per network (cniVersion 1.1.0) with the live attachments as valid; with --runtime-endpoint, also the state of our plugins that no cache entry names, of containers the runtime does not list (a lost cache's leaks). Shows the plan and changes nothing unless --apply.
    """
    from cnichain.podstate import gc as gc_mod
    from cnichain.podstate.runtime import ConfigError

    if apply and dry_run:
        _fail("--apply and --dry-run contradict each other", 2)
    try:
        text, ok = gc_mod.run(conflist, valid, cache_dir, bin_dir, node_netns, ipam_dir, tuning_dir,
                              runtime_endpoint, apply)
    except ConfigError as exc:  # the conflist
        _fail(str(exc))
    except ValueError as exc:  # the other options
        _fail(str(exc), 2)
    except RuntimeError as exc:  # the runtime did not list its sandboxes
        _fail(str(exc))
    typer.echo(text)
    if not ok:
        raise typer.Exit(1)


@app.command()
def version(verbose: bool = typer.Option(False, "--verbose", "-v", help="Also every carried Debian package and Python distribution")) -> None:
    """Print cnichain's version; from a bundled tree, also what it was built from (see ./run bundle)."""
    from cnichain.node.bundle.manifest import describe, running_manifest

    for line in describe(running_manifest(), verbose):
        typer.echo(line)


node_app = typer.Typer(no_args_is_help=True, help="Install the bundled tree onto a node (the DaemonSet's init container), or remove it.")
app.add_typer(node_app, name="node")


@node_app.command("install")
def node_install(
    host_root: str = typer.Option("/", "--host-root", help="Where the host's / is mounted in this container"),
    prefix: str = typer.Option("/opt/cni", "--prefix", help="Host prefix the tree was built for (<prefix>/cnichain)"),
    bin_dir: str = typer.Option("", "--bin-dir", help="Host CNI bin dir (default <prefix>/bin)"),
    conf_dir: str = typer.Option("/etc/cni/net.d", "--conf-dir", help="Host CNI conf dir"),
    mode: str = typer.Option("own", "--mode", help="own: our bridge conflist; chain: our meta plugins chained into the primary's"),
    conf_name: str = typer.Option("", "--conf-name", help="Our conflist's file name (default 10-cnichain.conflist / 00-cnichain.conflist)"),
    conflist: str = typer.Option("bridge-portmap", "--conflist", help="own mode: shipped conflist name or a file path"),
    replace_foreign: bool = typer.Option(False, "--replace-foreign", help="own mode: overwrite same-named plugins cnichain did not write"),
    agent_socket: str = typer.Option(DEFAULT_SOCKET, "--agent-socket", help='Socket the launchers try first ("" never)'),
    watch: bool = typer.Option(False, "--watch", help="chain mode: keep polling and rewrite ours when the primary changes"),
    interval: float = typer.Option(5.0, "--interval", min=0.1, max=300.0, help="--watch poll interval, seconds"),
) -> None:
    """Stage the tree in versions/<id>, switch 'current', write launchers, run them, write the conflist last."""
    from cnichain.node import bundle_install
    from cnichain.node.bundle.layout import LayoutError
    from cnichain.node.chain import ChainError

    cfg = bundle_install.NodeConfig(host_root=host_root, prefix=prefix, bin_dir=bin_dir, conf_dir=conf_dir, mode=mode,
                               conf_name=conf_name, conflist=conflist, replace_foreign=replace_foreign,
                               agent_socket=agent_socket)
    try:
        report = bundle_install.install(cfg)
    except (bundle_install.InstallError, ChainError, LayoutError, OSError, ValueError) as exc:
        _fail(str(exc))
    for path in report.written:
        typer.echo(f"wrote      {path}")
    for path in report.unchanged:
        typer.echo(f"unchanged  {path}")
    for line in report.verified:
        typer.echo(f"verified   {line}")
    for path in report.removed:
        typer.echo(f"pruned     {path}")
    if watch and mode == "chain":
        raise typer.Exit(bundle_install.watch(cfg, interval, log=typer.echo))


@node_app.command("uninstall")
def node_uninstall(
    host_root: str = typer.Option("/", "--host-root"),
    prefix: str = typer.Option("/opt/cni", "--prefix"),
    bin_dir: str = typer.Option("", "--bin-dir"),
    conf_dir: str = typer.Option("/etc/cni/net.d", "--conf-dir"),
    force: bool = typer.Option(False, "--force", help="Also remove our files that were changed since"),
) -> None:
    """Remove our conflist, launchers, 'current' and every version: the only command that removes the conflist."""
    from cnichain.node import bundle_install

    cfg = bundle_install.NodeConfig(host_root=host_root, prefix=prefix, bin_dir=bin_dir, conf_dir=conf_dir, mode="own",
                               conf_name="", conflist="", replace_foreign=False, agent_socket="")
    try:
        report = bundle_install.uninstall(cfg, force=force)
    except (bundle_install.InstallError, OSError, ValueError) as exc:
        _fail(str(exc))
    for path in report.removed:
        typer.echo(f"removed    {path}")
    for note in report.notes:
        typer.secho(note, fg=typer.colors.YELLOW)


@node_app.command("probe")
def node_probe(
    socket_path: str = typer.Option(DEFAULT_SOCKET, "--socket", help='The agent\'s socket ("" skips the agent)'),
    runtime_endpoint: str = typer.Option(
        "", "--runtime-endpoint", help="Also ask the container runtime's CRI socket (e.g. /run/containerd/containerd.sock) "
        "which network config it loaded and whether NetworkReady is true"),
    conflist: str = typer.Option("", "--conflist", help="With --runtime-endpoint: the loaded config must be this file's bytes"),
    timeout: float = typer.Option(5.0, "--timeout", min=0.1, max=60.0, help="Seconds for the CRI call"),
) -> None:
    """Readiness: exit 0 when the agent answers /metrics on ``<socket>.metrics`` (else: accepts on the socket).

    With ``--runtime-endpoint`` the runtime must also report NetworkReady and have loaded a pod
    network (``--conflist``: exactly that file), i.e. the runtime runs our chain.
    """
    from cnichain.tools import probe

    try:
        notes = [probe.agent(socket_path)] if socket_path else []
        if runtime_endpoint:
            notes.append(probe.runtime(runtime_endpoint, conflist, timeout))
    except probe.NotReady as exc:
        _fail(str(exc))
    typer.echo(f"ready: {'; '.join(notes) or 'nothing asked'}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
