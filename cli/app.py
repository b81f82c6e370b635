"""The ``cnichain`` operator CLI.  The only module that imports typer; plugins never import it."""

from __future__ import annotations

import json
import os
from typing import List, Optional

import typer

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
    valid: List[str] = typer.Option([], "--valid", help="GC: a live attachment CONTAINERID[/IFNAME] (repeatable)"),
    node_netns: str = typer.Option("", "--node-netns", help="Run the plugins inside this namespace instead of the caller's"),
) -> None:
    """Run a CNI config list the way containerd / CRI-O do (ADD in order, DEL in reverse with the cached result)."""
    from cnichain.cli.runtime import Attachment, ConfigError, ConfList, PluginFailed, Runtime

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
    from cnichain.cli import install as inst

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
    from cnichain.cli import install as inst

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
    from cnichain.cli.install import conflists_dir

    for name in sorted(os.listdir(conflists_dir())):
        if name.endswith((".conflist", ".conf")):
            typer.echo(name)


@app.command()
def demo(
    conflist: str = typer.Option("", "--conflist", help="Conflist to demo (default: the shipped default chain)"),
    pods: int = typer.Option(2, "--pods", min=1, max=8, help="How many pod namespaces"),
) -> None:
    """Build a throwaway node + pods, run the chain, prove it works, tear everything down."""
    from cnichain.cli.demo import run_demo

    raise typer.Exit(run_demo(conflist or None, pods))


@app.command()
def inspect(
    network: str = typer.Argument(..., help="Network name"),
    cache_dir: str = typer.Option(DEFAULT_CACHE, "--cache-dir"),
) -> None:
    """Show the attachments the runner cached for a network, and whether their netns still exists."""
    from cnichain.cli.runtime import Runtime

    entries = Runtime([], cache_dir).cached_attachments(network)
    if not entries:
        typer.echo(f"no attachments cached for {network} in {cache_dir}")
        return
    for e in entries:
        netns = e.get("netns") or ""
        alive = "alive" if netns and os.path.exists(netns) else "gone"
        ips = [ip.get("address") for ip in (e.get("result") or {}).get("ips", [])]
        typer.echo(f"{e.get('containerId')}  {e.get('ifName')}  netns={netns or '-'} ({alive})  ips={','.join(ips)}")


@app.command()
def gc(
    conflist: str = typer.Argument(..., help="Path to the network's conflist"),
    cache_dir: str = typer.Option(DEFAULT_CACHE, "--cache-dir"),
    bin_dir: List[str] = typer.Option([], "--bin-dir"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be collected"),
) -> None:
    """DEL cached attachments whose netns is gone, then CNI GC with the live ones as valid attachments."""
    from cnichain.cli.runtime import Attachment, ConfigError, ConfList, PluginFailed, Runtime

    try:
        conf = ConfList.load(conflist)
    except ConfigError as exc:
        _fail(str(exc))
    dirs = bin_dir or [d for d in os.environ.get("CNI_PATH", "").split(":") if d] or DEFAULT_BIN_DIRS
    runtime = Runtime(dirs, cache_dir)
    live: list[tuple[str, str]] = []
    for e in runtime.cached_attachments(conf.name):
        cid, ifn, netns = str(e.get("containerId")), str(e.get("ifName")), str(e.get("netns") or "")
        if netns and os.path.exists(netns):
            live.append((cid, ifn))
            continue
        typer.echo(f"stale: {cid}/{ifn} (netns {netns or '-'} gone)")
        if not dry_run:
            try:
                runtime.delete(conf, Attachment(cid, "", ifn))
            except PluginFailed as exc:
                typer.secho(f"  DEL failed: {exc}", fg=typer.colors.YELLOW)
    if not dry_run:
        try:
            runtime.gc(conf, live)
        except PluginFailed as exc:
            _fail(str(exc))
    typer.echo(f"{len(live)} live attachment(s) kept")


@app.command()
def bench(
    pods: int = typer.Option(20, "--pods", min=1, help="Pods through the whole chain, one after another"),
    parallel: int = typer.Option(8, "--parallel", min=0, help="Pods per parallel batch (0 skips the phase)"),
    parallel_rounds: int = typer.Option(3, "--parallel-rounds", min=1),
    growth: str = typer.Option("0,100,1000", "--growth", help="Other pods present for the growth phase ('' skips it)"),
    growth_samples: int = typer.Option(10, "--growth-samples", min=1),
    floor_samples: int = typer.Option(30, "--floor-samples", min=1),
    modes: str = typer.Option("cold,reference", "--modes", help="Comma-separated subset of cold,warm,reference"),
    reference_dir: str = typer.Option("/usr/lib/cni", "--reference-dir", help="The reference Go plugins"),
    conflist: str = typer.Option("", "--conflist", help="Conflist to run (default: the shipped default chain)"),
    output_dir: str = typer.Option("benchmarks/results", "--output-dir", help="Where the JSON, table and PNG go"),
    phases: str = typer.Option("floor,chain,parallel,growth", "--phases"),
    no_fallback: bool = typer.Option(False, "--no-fallback", help="Do not stand in reference plugins for missing ones"),
    no_chart: bool = typer.Option(False, "--no-chart"),
    quiet: bool = typer.Option(False, "--quiet", help="No progress line"),
) -> None:
    """Per-pod exec-to-exit latency of the chain, side by side with the reference plugins."""
    from cnichain.cli import bench as bench_mod

    try:
        options = bench_mod.options_from(pods, parallel, parallel_rounds, growth, growth_samples, floor_samples, modes,
                                         reference_dir, conflist, output_dir, phases, not no_fallback, not no_chart, quiet)
    except ValueError as exc:
        _fail(str(exc), 2)
    raise typer.Exit(bench_mod.main(options=options))


@app.command()
def agent(
    socket_path: str = typer.Option("/run/cnichain/agent.sock", "--socket", envvar="CNICHAIN_AGENT_SOCKET", help="Unix socket the plugin shims connect to"),
    metrics_socket: Optional[str] = typer.Option(None, "--metrics-socket", help='Prometheus endpoint (HTTP on a unix socket); default "<socket>.metrics", "" disables'),
    metrics_port: int = typer.Option(0, "--metrics-port", help="Also serve /metrics on 127.0.0.1:PORT (opt-in)"),
    request_timeout: float = typer.Option(60.0, "--request-timeout", help="Seconds before a request's worker is killed"),
    max_workers: int = typer.Option(64, "--max-workers", help="Concurrent requests; more are sent back to the cold path"),
    log_file: str = typer.Option("", "--log-file", help="Request log (default: stderr)"),
    pool: int = typer.Option(6, "--pool", help="Workers forked and warmed ahead of demand (0: fork per request)"),
) -> None:
    """Run the node agent in the foreground: warm plugin handlers behind the installed shims."""
    from cnichain.cli.agent import serve

    raise typer.Exit(serve(socket_path, metrics_socket=metrics_socket, metrics_port=metrics_port,
                           request_timeout=request_timeout, max_workers=max_workers, log_file=log_file or None,
                           pool_size=max(0, pool)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
