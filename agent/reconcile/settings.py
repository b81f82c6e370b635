"""The reconciler's settings: one dataclass, the command-line options that fill it, and the argv
that hands them to the reconciler's own process.

The agent's command line (:func:`cnichain.agent.config.parser`, which ``cnichain agent`` and
``python -m cnichain.agent`` share) adds these options through :func:`add_arguments`; the agent
then starts the reconciler process with :func:`to_argv` of the result, parsed back by :func:`parse`.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Optional

from cnichain.podstate.cache import LIBCNI_CACHE_DIR, RUNNER_CACHE_DIR

MODES = ("off", "dry-run", "on")
DEFAULT_CACHE_DIRS = (LIBCNI_CACHE_DIR, RUNNER_CACHE_DIR)
DEFAULT_GRACE = 60.0  # seconds an attachment must look dead before it is collected
DEFAULT_SWEEP = 10.0  # seconds between full sweeps (the backstop behind the event-driven repair)
STATUS_SUFFIX = ".reconcile.json"  # next to the agent's socket: what `cnichain agent status` reads


def status_path(socket_path: str) -> str:
    """Where the reconciler of the agent on ``socket_path`` keeps its view (root-only JSON)."""
    return socket_path + STATUS_SUFFIX


@dataclass
class ReconcileConfig:
    mode: str = "on"  # off | dry-run | on
    grace: float = DEFAULT_GRACE
    networks: list[str] = field(default_factory=list)  # empty: every network
    runtime_endpoint: str = ""  # CRI socket (unix path) listing the runtime's pod sandboxes
    sweep_interval: float = DEFAULT_SWEEP
    cache_dirs: list[str] = field(default_factory=lambda: list(DEFAULT_CACHE_DIRS))
    bin_dirs: list[str] = field(default_factory=list)  # empty: $CNI_PATH, else /opt/cni/bin
    mount_ns: str = ""  # a mount namespace to enter first (the host's, /proc/1/ns/mnt, from a pod)
    status_file: str = ""  # set by the agent from its socket path
    log_file: Optional[str] = None
    hints_fd: int = -1  # the agent's datagrams: each ADD it served (set by the agent's Process)
    settle: float = 0.2  # after a deletion event, before checking (coalesces a flush's burst)
    max_repairs: int = 5  # repairs of one thing within `repair_window` before backing off
    repair_window: float = 60.0

    def plugin_dirs(self) -> list[str]:
        from cnichain.podstate.runtime import plugin_dirs

        return plugin_dirs(self.bin_dirs)

    def in_scope(self, network: str) -> bool:
        return not self.networks or network in self.networks

    def validate(self) -> None:
        """Refuse settings that are not what they claim to be (ValueError), before anything runs."""
        from cnichain.podstate.cache import valid_id

        if self.mode not in MODES:
            raise ValueError(f"--reconcile {self.mode!r}: expected one of {', '.join(MODES)}")
        if not 0 <= self.grace <= 86400 * 7:
            raise ValueError(f"--grace {self.grace}: expected 0 to 604800 seconds")
        if not 0.2 <= self.sweep_interval <= 3600:
            raise ValueError(f"--sweep-interval {self.sweep_interval}: expected 0.2 to 3600 seconds")
        for name in self.networks:
            if not valid_id(name):
                raise ValueError(f"--network {name!r}: not a valid network name")
        for opt, paths in (("--cache-dir", self.cache_dirs), ("--bin-dir", self.bin_dirs),
                           ("--mount-ns", [self.mount_ns] if self.mount_ns else []),
                           ("--runtime-endpoint", [self.runtime_endpoint] if self.runtime_endpoint else [])):
            for path in paths:
                if not os.path.isabs(path.removeprefix("unix://")) or "\0" in path:
                    raise ValueError(f"{opt} {path!r}: must be an absolute path")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The reconciler's options on an agent command line."""
    p.add_argument("--reconcile", choices=MODES, default="on",
                   help="repair lost kernel state and collect leaked attachments (dry-run: only log)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                   help="how long an attachment must look dead before it is collected")
    p.add_argument("--network", action="append", default=[], metavar="NAME",
                   help="reconcile only this network (repeatable; default: every network)")
    p.add_argument("--runtime-endpoint", default="", metavar="PATH",
                   help="CRI socket whose ListPodSandbox keeps listed pods from being collected")
    p.add_argument("--sweep-interval", type=float, default=DEFAULT_SWEEP, metavar="SECONDS")
    p.add_argument("--cache-dir", action="append", default=[], metavar="DIR",
                   help=f"result cache root holding results/ (repeatable; default {', '.join(DEFAULT_CACHE_DIRS)})")
    p.add_argument("--bin-dir", action="append", default=[], metavar="DIR",
                   help="plugin directory for collecting DELs (repeatable; default $CNI_PATH or /opt/cni/bin)")
    p.add_argument("--mount-ns", default="", metavar="PATH",
                   help="mount namespace the reconciler enters first (in a pod: the host's, /proc/1/ns/mnt)")


def from_args(ns: argparse.Namespace) -> ReconcileConfig:
    return ReconcileConfig(
        mode=ns.reconcile, grace=ns.grace, networks=list(ns.network), runtime_endpoint=ns.runtime_endpoint,
        sweep_interval=ns.sweep_interval, cache_dirs=list(ns.cache_dir) or list(DEFAULT_CACHE_DIRS),
        bin_dirs=list(ns.bin_dir), mount_ns=ns.mount_ns,
    )


def to_argv(cfg: ReconcileConfig) -> list[str]:
    """The reconciler process's command line for ``cfg`` (what :func:`parse` reads back)."""
    argv = ["--reconcile", cfg.mode, "--grace", repr(cfg.grace), "--sweep-interval", repr(cfg.sweep_interval),
            "--status-file", cfg.status_file]
    if cfg.runtime_endpoint:
        argv += ["--runtime-endpoint", cfg.runtime_endpoint]
    if cfg.log_file:
        argv += ["--log-file", cfg.log_file]
    if cfg.hints_fd >= 0:
        argv += ["--hints-fd", str(cfg.hints_fd)]
    if cfg.mount_ns:
        argv += ["--mount-ns", cfg.mount_ns]
    for opt, items in (("--network", cfg.networks), ("--cache-dir", cfg.cache_dirs), ("--bin-dir", cfg.bin_dirs)):
        for item in items:
            argv += [opt, item]
    return argv


def parse(argv: Optional[list[str]] = None) -> ReconcileConfig:
    p = argparse.ArgumentParser(prog="cnichain-reconcile", description="The agent's reconciler process.")
    add_arguments(p)
    p.add_argument("--status-file", required=True)
    p.add_argument("--log-file", default=None)
    p.add_argument("--hints-fd", type=int, default=-1)
    ns = p.parse_args(argv)
    cfg = from_args(ns)
    cfg.status_file = ns.status_file
    cfg.log_file = ns.log_file
    cfg.hints_fd = ns.hints_fd
    cfg.validate()
    return cfg
