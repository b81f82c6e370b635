"""The ``cnichain`` operator CLI.  The only module that imports typer; plugins never import it."""

from __future__ import annotations

import json
import os
from typing import List, Optional

import typer

from cnichain.agent.reconcile import settings as reconcile_settings
from cnichain.plugins.host_local.config import DEFAULT_DATA_DIR as HOST_LOCAL_DATA_DIR
from cnichain.plugins.tuning.config import DEFAULT_DATA_DIR as TUNING_DATA_DIR

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Operate the cnichain CNI plugins: run conflists like a runtime, install onto a node, demo, inspect, GC.",
)

DEFAULT_BIN_DIRS = ["/opt/cni/bin"]
DEFAULT_CACHE = "/var/lib/cnichain/cache"
COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS")


def _fail(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _parse_caps(caps: List[str], cap_files: List[str]) -> dict:
    out: dict = {}
    for path in cap_files:
        try:
            with open(path, "rb") as fh:
                data = json.loads(fh.read())
        except (OSError, ValueError) as exc:
            _fail(f"--cap-file {path}: {exc}")
        if not isinstance(data, dict):
            _fail(f"--cap-file {path}: expected a JSON object of capability name -> value")
        out.update(data)
    for item in caps:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            _fail(f"--cap {item!r}: expected NAME=JSON")
        try:
            out[name] = json.loads(raw)
        except ValueError as exc:
            _fail(f"--cap {name}: invalid JSON: {exc}")
    return out


@app.command("exec")
def exec_cmd(
    command: str = typer.Argument(..., help="ADD, DEL, CHECK, GC or STATUS"),
    conflist: str = typer.Argument(..., help="Path to a .conflist (or single-plugin .conf)"),
    netns: str = typer.Option("", "--netns", help="Pod network namespace path (ADD/CHECK; optional for DEL)"),
    container_id: str = typer.Option("", "--container-id", help="Container ID (ADD/DEL/CHECK)"),
    ifname: str = typer.Option("eth0", "--ifname", help="Interface name inside the pod"),
    bin_dir: List[str] = typer.Option([], "--bin-dir", help="Plugin directory (repeatable); default $CNI_PATH or /opt/cni/bin"),
    cache_dir: str = typer.Option(DEFAULT_CACHE, "--cache-dir", help="Where ADD results are cached for DEL/CHECK"),
    cap: List[str] = typer.Option([], "--cap", help="Capability argument NAME=JSON, e.g. portMappings='[...]' (repeatable)"),
    cap_file: List[str] = typer.Option([], "--cap-file", help="JSON file with an object of capability args"),
    arg: List[str] = typer.Option([], "--arg", help="CNI_ARGS pair K=V (repeatable)"),
    valid: List[str] = typer.Option([], "--valid", help="GC: a live attachment CONTAINERID or CONTAINERID/IFNAME (repeatable)"),
    node_netns: str = typer.Option("", "--node-netns", help="Run the plugins inside this namespace instead of the caller's"),
) -> None:
    """Run a CNI config list the way containerd / CRI-O do (ADD in order, DEL in reverse with the cached result)."""
    from cnichain.tools.runtime import Attachment, ConfigError, ConfList, PluginFailed, Runtime

    command = command.upper()
    if command not in COMMANDS:
        _fail(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
    try:
        conf = ConfList.load(conflist)
    except ConfigError as exc:
        _fail(str(exc))
    dirs = bin_dir or [d for d in os.environ.get("CNI_PATH", "").split(":") if d] or DEFAULT_BIN_DIRS
    runtime = Runtime(dirs, cache_dir, node_netns=node_netns or None)
    cni_args = []
    for item in arg:
        k, sep, v = item.partition("=")
        if not sep:
            _fail(f"--arg {item!r}: expected K=V")
        cni_args.append((k, v))
    try:
        if command in ("ADD", "DEL", "CHECK"):
            if not container_id:
                _fail("--container-id is required")
            if command != "DEL" and not netns:
                _fail("--netns is required")
            att = Attachment(container_id, netns, ifname, cni_args, _parse_caps(cap, cap_file))
            if command == "ADD":
                typer.echo(json.dumps(runtime.add(conf, att), indent=4))
            elif command == "DEL":
                runtime.delete(conf, att)
            else:
                runtime.check(conf, att)
        elif command == "GC":
            pairs = []
            for item in valid:
                cid, _, ifn = item.partition("/")
                pairs.append((cid, ifn or "eth0"))
            runtime.gc(conf, pairs)
        else:
            runtime.status(conf)
    except PluginFailed as exc:
        typer.echo(json.dumps(exc.error.to_dict(), indent=4))
        _fail(str(exc))
    except ConfigError as exc:
        _fail(str(exc))
    except Exception as exc:  # missing plugin binary etc.
        _fail(str(exc))


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
    from cnichain.node import install as inst

    if conflist and not conf_dir:
        _fail("--conflist needs --conf-dir")
    try:
        report = inst.install(bin_dir, conf_dir or None, conflist or None, force=force,
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
    from cnichain.node import install as inst

    report = inst.uninstall(bin_dir)
    for path in report.removed:
        typer.echo(f"removed    {path}")
    for path in report.refused:
        typer.secho(f"kept       {path} (modified since install)", fg=typer.colors.YELLOW)
    if not report.removed and not report.refused:
        typer.echo("nothing to remove")


@app.command()
def conflists() -> None:
    """List the conflists shipped with cnichain."""
    from cnichain.node.install import conflists_dir

    for name in sorted(os.listdir(conflists_dir())):
        if name.endswith((".conflist", ".conf")):
            typer.echo(name)


@app.command()
def demo(
    conflist: str = typer.Option("", "--conflist", help="Conflist to demo (default: the shipped default chain)"),
    pods: int = typer.Option(2, "--pods", min=1, max=8, help="How many pod namespaces"),
) -> None:
    """Build a throwaway node + pods, run the chain, prove it works, tear everything down."""
    from cnichain.tools.demo import run_demo

    raise typer.Exit(run_demo(conflist or None, pods))


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

    allowlist = None
    if tuning_allowlist:
        from cnichain.plugins.tuning.config import read_allowlist

        if not os.path.isfile(tuning_allowlist):
            _fail(f"--tuning-allowlist {tuning_allowlist}: no such file", 2)
        try:
            allowlist = read_allowlist(tuning_allowlist)
        except Exception as exc:  # CniError: unreadable
            _fail(str(exc), 2)
    reports = lint_mod.lint_paths(paths, lint_mod.Options(bin_dirs=bin_dir, tuning_allowlist=allowlist))
    typer.echo(lint_mod.render_json(reports) if as_json else lint_mod.render_text(reports))
    raise typer.Exit(1 if lint_mod.failed(reports) else 0)


NODE_CACHE_DIRS = ["/var/lib/cni", DEFAULT_CACHE]


def _runtime_listing(endpoint: str) -> Optional[set]:
    """The sandbox IDs the runtime on ``endpoint`` lists; None without an endpoint (fails without an answer)."""
    if not endpoint:
        return None
    from cnichain.tools.podstate.sandboxes import CriSandboxes

    problems: list[str] = []
    ids = CriSandboxes(endpoint, problems.append).listed()
    if ids is None:
        _fail(problems[0] if problems else f"no answer from {endpoint}")
    return ids


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
    from cnichain.tools.podstate import render, view

    try:
        view.check_inputs(cache_dir, ipam_dir, tuning_dir, node_netns, [container, *live] if container else live, network)
    except ValueError as exc:
        _fail(str(exc), 2)
    src = view.Sources(cache_dirs=cache_dir, ipam_dirs=ipam_dir, tuning_dirs=tuning_dir,
                       node_netns=node_netns or None, live=set(live) if live else None,
                       listed=_runtime_listing(runtime_endpoint))
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

    DEL for each cached attachment without a live pod (its netns is gone, or it is not in --valid), with the conflist, result and arguments the runtime cached; then CNI GC per network (cniVersion 1.1.0) with the live attachments as valid. Shows the plan and changes nothing unless --apply.
    """
    from cnichain.tools.podstate import cache as cache_mod
    from cnichain.tools.podstate import gc as gc_mod
    from cnichain.tools.podstate import view
    from cnichain.tools.runtime import ConfigError, ConfList, Runtime

    pairs = gc_mod.parse_valid(valid)
    try:
        view.check_inputs(cache_dir, ipam_dir, tuning_dir, node_netns, [c for c, _ in pairs])
    except ValueError as exc:
        _fail(str(exc), 2)
    if any(i and not cache_mod.valid_ifname(i) for _, i in pairs):
        _fail("--valid: invalid interface name", 2)
    if apply and dry_run:
        _fail("--apply and --dry-run contradict each other", 2)
    conf_doc = None
    if conflist:
        try:
            conf_doc = ConfList.load(conflist).raw
        except ConfigError as exc:
            _fail(str(exc))
    entries = [e for d in cache_dir for e in cache_mod.read_cache(d)]
    if conf_doc is not None:
        entries = [e for e in entries if e.network == conf_doc.get("name")]
    listed = _runtime_listing(runtime_endpoint)
    src = view.Sources(cache_dirs=cache_dir, ipam_dirs=ipam_dir, tuning_dirs=tuning_dir, node_netns=node_netns or None,
                       listed=listed)
    node = view.collect(src, network=str(conf_doc.get("name")) if conf_doc else "")
    plan = gc_mod.build(entries, conf_doc, pairs if valid else None, node, listed)
    if not apply:
        typer.echo(gc_mod.render(plan))
        return
    dirs = bin_dir or [d for d in os.environ.get("CNI_PATH", "").split(":") if d] or DEFAULT_BIN_DIRS

    def runtime_for(entry):  # the cache root the entry lives in, so DEL finds its cached result
        root = os.path.dirname(os.path.dirname(entry.path)) if entry is not None else cache_dir[0]
        return Runtime(dirs, root, node_netns=node_netns or None)

    lines, ok = gc_mod.execute(plan, runtime_for)
    typer.echo(gc_mod.render(plan, lines))
    if not ok:
        raise typer.Exit(1)


@app.command()
def bench(
    pods: int = typer.Option(20, "--pods", min=1, help="Pods through the whole chain, one after another"),
    parallel: int = typer.Option(8, "--parallel", min=0, help="Pods per parallel batch (0 skips the phase)"),
    parallel_rounds: int = typer.Option(3, "--parallel-rounds", min=1),
    growth: str = typer.Option("0,100,1000", "--growth", help="Other pods present for the growth phase ('' skips it)"),
    growth_samples: int = typer.Option(10, "--growth-samples", min=1),
    floor_samples: int = typer.Option(30, "--floor-samples", min=1),
    status_sweeps: int = typer.Option(20, "--status-sweeps", min=0,
                                      help="STATUS sweeps of the whole chain at 1.1.0, as containerd 2.1 polls (0 skips)"),
    modes: str = typer.Option("cold,reference", "--modes", help="Comma-separated subset of cold,warm,reference"),
    reference_dir: str = typer.Option("/usr/lib/cni", "--reference-dir", help="The reference Go plugins"),
    conflist: str = typer.Option("", "--conflist", help="Conflist to run (default: the shipped default chain)"),
    output_dir: str = typer.Option("benchmarks/results", "--output-dir", help="Where the JSON, table and PNG go"),
    phases: str = typer.Option("floor,chain,status,parallel,growth", "--phases"),
    no_fallback: bool = typer.Option(False, "--no-fallback", help="Do not stand in reference plugins for missing ones"),
    no_chart: bool = typer.Option(False, "--no-chart"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line"),
) -> None:
    """Per-pod exec-to-exit latency of the chain, side by side with the reference plugins."""
    from cnichain.benchmarks import latency as bench_mod

    try:
        options = bench_mod.options_from(pods, parallel, parallel_rounds, growth, growth_samples, floor_samples, modes,
                                         reference_dir, conflist, output_dir, phases, not no_fallback, not no_chart, quiet,
                                         status_sweeps=status_sweeps)
    except ValueError as exc:
        _fail(str(exc), 2)
    raise typer.Exit(bench_mod.main(options=options))


agent_app = typer.Typer(help="The node agent: warm plugin handlers behind the installed shims, and the node's reconciler.")
app.add_typer(agent_app, name="agent")


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    socket_path: str = typer.Option("/run/cnichain/agent.sock", "--socket", envvar="CNICHAIN_AGENT_SOCKET", help="Unix socket the plugin shims connect to"),
    metrics_socket: Optional[str] = typer.Option(None, "--metrics-socket", help='Prometheus endpoint (HTTP on a unix socket); default "<socket>.metrics", "" disables'),
    metrics_port: int = typer.Option(0, "--metrics-port", help="Also serve /metrics on 127.0.0.1:PORT (opt-in)"),
    request_timeout: float = typer.Option(60.0, "--request-timeout", help="Seconds before a request's worker is killed"),
    max_workers: int = typer.Option(64, "--max-workers", help="Concurrent requests; more are sent back to the cold path"),
    log_file: str = typer.Option("", "--log-file", help="Request log (default: stderr)"),
    pool: int = typer.Option(6, "--pool", help="Long-lived workers kept ready at least; more stay after a burst (0: none ahead of demand)"),
    worker_requests: int = typer.Option(1000, "--worker-requests", help="A worker retires after this many requests (1: a fresh process each)"),
    worker_rss_growth: int = typer.Option(64, "--worker-rss-growth", help="A worker retires when its resident memory grew by more MiB than this (0: never)"),
    reconcile: str = typer.Option("on", "--reconcile", help="off | dry-run | on: re-install lost kernel state of live pods, collect leaked ones"),
    grace: float = typer.Option(reconcile_settings.DEFAULT_GRACE, "--grace", help="Seconds an attachment's netns must be gone before it is collected"),
    network: List[str] = typer.Option([], "--network", help="Reconcile only this network (repeatable; default all)"),
    runtime_endpoint: str = typer.Option("", "--runtime-endpoint", help="CRI socket: sandboxes ListPodSandbox lists are never collected"),
    sweep_interval: float = typer.Option(reconcile_settings.DEFAULT_SWEEP, "--sweep-interval", help="Seconds between full sweeps (behind the event-driven repair)"),
    cache_dir: List[str] = typer.Option([], "--cache-dir", help="Result cache root holding results/ (repeatable; default /var/lib/cni and our runner's)"),
    bin_dir: List[str] = typer.Option([], "--bin-dir", help="Plugin dir for collecting DELs (repeatable; default $CNI_PATH or /opt/cni/bin)"),
    mount_ns: str = typer.Option("", "--mount-ns", help="Mount namespace the reconciler enters first (in a pod: the host's, /proc/1/ns/mnt)"),
) -> None:
    """Run the node agent in the foreground: warm plugin handlers behind the installed shims, plus the reconciler."""
    if ctx.invoked_subcommand is not None:
        return
    from cnichain.agent import serve
    rc = reconcile_settings.ReconcileConfig(mode=reconcile, grace=grace, networks=list(network), runtime_endpoint=runtime_endpoint,
                         sweep_interval=sweep_interval, cache_dirs=list(cache_dir) or list(reconcile_settings.DEFAULT_CACHE_DIRS),
                         bin_dirs=list(bin_dir), mount_ns=mount_ns)
    try:
        rc.validate()
    except ValueError as exc:
        _fail(str(exc), 2)
    raise typer.Exit(serve(socket_path, metrics_socket=metrics_socket, metrics_port=metrics_port,
                           request_timeout=request_timeout, max_workers=max_workers, log_file=log_file or None,
                           pool_size=max(0, pool), worker_requests=max(1, worker_requests),
                           worker_rss_growth=max(0, worker_rss_growth) << 20, reconcile=rc))


@agent_app.command("status")
def agent_status(
    socket_path: str = typer.Option("/run/cnichain/agent.sock", "--socket", envvar="CNICHAIN_AGENT_SOCKET", help="The agent's socket"),
    as_json: bool = typer.Option(False, "--json", help="The reconciler's whole view as JSON"),
) -> None:
    """The reconciler's view: mode, last sweep, counters, each attachment's state, leaks and stale cache entries."""
    from cnichain.agent.reconcile import status as rstatus
    path = reconcile_settings.status_path(socket_path)
    doc = rstatus.read(path)
    if doc is None:
        _fail(f"no reconciler status at {path} (agent not running, or --reconcile off)")
        return
    typer.echo(json.dumps(doc, indent=2, sort_keys=True) if as_json else rstatus.render_text(doc))


@app.command()
def version(verbose: bool = typer.Option(False, "--verbose", "-v", help="Also every carried Debian package and Python distribution")) -> None:
    """Print cnichain's version; from a bundled tree, also what it was built from (see ./run bundle)."""
    from cnichain.node.bundle.manifest import describe, running_manifest

    for line in describe(running_manifest(), verbose):
        typer.echo(line)


node_app = typer.Typer(no_args_is_help=True, help="Install the bundled tree onto a node (the DaemonSet's init container), or remove it.")
app.add_typer(node_app, name="node")


def _node_config(host_root: str, prefix: str, bin_dir: str, conf_dir: str, mode: str, conf_name: str,
                 conflist: str, replace_foreign: bool, agent_socket: str):
    from cnichain.node.installer import NodeConfig

    return NodeConfig(host_root=host_root, prefix=prefix, bin_dir=bin_dir, conf_dir=conf_dir, mode=mode,
                      conf_name=conf_name, conflist=conflist, replace_foreign=replace_foreign, agent_socket=agent_socket)


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
    agent_socket: str = typer.Option("/run/cnichain/agent.sock", "--agent-socket", help='Socket the launchers try first ("" never)'),
    watch: bool = typer.Option(False, "--watch", help="chain mode: keep polling and rewrite ours when the primary changes"),
    interval: float = typer.Option(5.0, "--interval", min=0.1, max=300.0, help="--watch poll interval, seconds"),
) -> None:
    """Stage the tree in versions/<id>, switch 'current', write launchers, run them, write the conflist last."""
    from cnichain.node.bundle.layout import LayoutError
    from cnichain.node import installer
    from cnichain.node.chain import ChainError

    cfg = _node_config(host_root, prefix, bin_dir, conf_dir, mode, conf_name, conflist, replace_foreign, agent_socket)
    try:
        report = installer.install(cfg)
    except (installer.InstallError, ChainError, LayoutError, OSError, ValueError) as exc:
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
        raise typer.Exit(installer.watch(cfg, interval, log=typer.echo))


@node_app.command("uninstall")
def node_uninstall(
    host_root: str = typer.Option("/", "--host-root"),
    prefix: str = typer.Option("/opt/cni", "--prefix"),
    bin_dir: str = typer.Option("", "--bin-dir"),
    conf_dir: str = typer.Option("/etc/cni/net.d", "--conf-dir"),
    force: bool = typer.Option(False, "--force", help="Also remove our files that were changed since"),
) -> None:
    """Remove our conflist, launchers, 'current' and every version: the only command that removes the conflist."""
    from cnichain.node import installer

    cfg = _node_config(host_root, prefix, bin_dir, conf_dir, "own", "", "", False, "")
    try:
        report = installer.uninstall(cfg, force=force)
    except (installer.InstallError, OSError, ValueError) as exc:
        _fail(str(exc))
    for path in report.removed:
        typer.echo(f"removed    {path}")
    for note in report.notes:
        typer.secho(note, fg=typer.colors.YELLOW)


@node_app.command("probe")
def node_probe(
    socket_path: str = typer.Option("/run/cnichain/agent.sock", "--socket", help='The agent\'s socket ("" skips the agent)'),
    runtime_endpoint: str = typer.Option(
        "", "--runtime-endpoint", help="Also ask the container runtime's CRI socket (e.g. /run/containerd/containerd.sock) "
        "which network config it loaded and whether NetworkReady is true"),
    conflist: str = typer.Option("", "--conflist", help="With --runtime-endpoint: the loaded config must be this file's bytes"),
    timeout: float = typer.Option(5.0, "--timeout", min=0.1, max=60.0, help="Seconds for the CRI call"),
) -> None:
    """Readiness: exit 0 when the agent answers /metrics on ``<socket>.metrics`` (else: accepts on the socket).

    The metrics endpoint is asked first because a bare connect to the CNI socket is an incomplete
    request to the agent; it is served by the same event loop, so it answers only when requests would.
    With ``--runtime-endpoint`` the runtime must also report NetworkReady and have loaded a pod
    network (``--conflist``: exactly that file), i.e. the runtime runs our chain.
    """
    from cnichain.agent.control import fetch_metrics
    from cnichain.agent.sockets import answers

    notes = []
    if socket_path:
        metrics = socket_path + ".metrics"
        if os.path.exists(metrics):
            try:
                fetch_metrics(metrics, timeout=2.0)
            except (OSError, RuntimeError) as exc:
                _fail(f"agent metrics on {metrics}: {exc}")
        elif not answers(socket_path):
            _fail(f"no agent on {socket_path}")
        notes.append(f"agent {socket_path}")
    if runtime_endpoint:
        notes.append(_probe_runtime(runtime_endpoint, conflist, timeout))
    typer.echo(f"ready: {'; '.join(notes) or 'nothing asked'}")


def _probe_runtime(endpoint: str, conflist: str, timeout: float) -> str:
    """One line about the runtime's network state, or exit 1 saying what is wrong."""
    from cnichain.node import cri

    path = endpoint[len("unix://"):] if endpoint.startswith("unix://") else endpoint
    try:
        status = cri.runtime_status(path, verbose=True, timeout=timeout)
    except cri.CriError as exc:
        _fail(str(exc))
    ready = status.network_ready()
    if not ready.status:
        _fail(f"runtime {path}: NetworkReady=false ({ready.reason}): {ready.message}")
    found = status.pod_network()
    if found is None:
        _fail(f"runtime {path}: NetworkReady, but no pod network config is reported as loaded")
    net: dict = found or {}
    source = str(net.get("Source", ""))
    try:
        plugins = [str(p.get("Network", {}).get("type", "?")) for p in net.get("Plugins") or []]
    except AttributeError:
        plugins = []
    line = f"runtime {path}: NetworkReady, network {net.get('Name', '?')} ({net.get('CNIVersion', '?')}: {', '.join(plugins)})"
    if conflist:
        try:
            with open(conflist, "rb") as fh:
                wanted = fh.read()
        except OSError as exc:
            _fail(f"{conflist}: {exc.strerror}")
        if source.encode() != wanted:
            _fail(f"runtime {path} runs network {net.get('Name', '?')}, not the current bytes of {conflist}")
        line += f" = {conflist}"
    return line


def main() -> None:
    app()


if __name__ == "__main__":
    main()
