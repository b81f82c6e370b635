"""``cnichain bench``: per-pod exec-to-exit latency of our plugins, side by side with the reference.

A node pays one plugin process per plugin per command per pod, so the number that matters is the
time from exec to exit, as the runtime sees it.  The bench drives the plugins exactly as a runtime
does (through :class:`cnichain.podstate.runtime.Runtime`: ADD in order with ``prevResult`` and
``runtimeConfig``, DEL in reverse with the cached result) inside throwaway namespaces, and times
every exec with the runner's ``on_exec`` hook.

Each implementation ("mode") gets its own node namespace, pod namespaces, IPAM directory and result
cache, so none sees another's bridges, rules or reservations; within one run the modes are
interleaved pod by pod (alternating which goes first) so machine noise hits all alike.  The modes
are ours (cold, warm) and one per reference and portmap backend (``ref-1.1.1``,
``ref-1.9.1-iptables``, ``ref-1.9.1-nft``; or the single ``reference`` of ``--reference-dir``).

Phases:

``floor``     a bare interpreter start (``python -I -S -c pass``) and every plugin's VERSION exec:
              the cost no plugin work can go below.
``chain``     N pods through the whole conflist, one after another.
``status``    STATUS to every plugin of the chain at 1.1.0, as containerd 2.1 does on each CRI
              Status poll (~5 s): the cost of one sweep, counted even where the reference fails it.
``parallel``  8 pods at once (ADD batch, then DEL batch): wall time per batch.
``growth``    host-local and portmap ADD/DEL with 0, 100, 1,000 other pods present.
``pods``      whole pods through containerd 2.x's CRI (RunPodSandbox, then StopPodSandbox and
              RemovePodSandbox), one throwaway containerd node per mode.

The result is a JSON document (``summary``), a terminal table and, when matplotlib is installed,
a PNG chart of latency against pods present.  This package never imports typer; ``cnichain bench``
in :mod:`cnichain.cli.app` is a thin wrapper over :func:`main`.

The modules, one job each (pure ones marked):

``options``   the options, their defaults and validation: the one argparse declaration
``session``   one run's state: the modes, the samples, how execs are recorded
``references`` the references of a run: where, which version, which portmap backends
``modes``     setting up the implementations under test (launchers, namespaces, chains, the agent)
``phases``    the floor, chain and parallel phases
``growth``    the growth phase
``status``    the status phase
``pods``      the pods phase
``stats``     (pure) ratios and acceptance-target verdicts over the cells
              :mod:`cnichain.benchmarks.measure` computes (the one median and p95)
``summary``   (pure) the JSON result document from what the phases recorded
``render``    (pure) the terminal table
``chart``     the optional matplotlib PNG
``progress``  the status line on stderr
``runner``    run_bench and main: lab, phases in order, files, exit code
"""

from __future__ import annotations

from cnichain.benchmarks.latency.chart import write_chart
from cnichain.benchmarks.latency.modes import start_warm_agent, warm_unavailable
from cnichain.benchmarks.latency.options import DEFAULT_CONFLIST, DEFAULT_REFERENCE_DIR, MODES, PHASES, Options, options_from, parse_args
from cnichain.benchmarks.latency.progress import Progress
from cnichain.benchmarks.latency.render import LABEL, render_table
from cnichain.benchmarks.latency.runner import main, run_bench, write_outputs
from cnichain.benchmarks.latency.session import Bench, Mode, Sample
from cnichain.benchmarks.latency import stats  # the module (ratio, targets live there)
from cnichain.benchmarks.latency.summary import summarize

__all__ = [
    "Bench", "DEFAULT_CONFLIST", "DEFAULT_REFERENCE_DIR", "LABEL", "MODES", "Mode", "Options", "PHASES", "Progress",
    "Sample", "main", "options_from", "parse_args", "render_table", "run_bench", "stats", "start_warm_agent",
    "summarize", "warm_unavailable", "write_chart", "write_outputs",
]
