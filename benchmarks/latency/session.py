"""One bench run's state: the implementations under test and every timed exec they produced.

The phases drive plugins through each mode's :class:`~cnichain.podstate.runtime.Runtime`; the runtime's
``on_exec`` hook hands every exec's timing to :meth:`Bench.recorder`, which files it in the
calling thread's sink (so parallel pods never mix up their records), and :meth:`Bench.keep` turns
those records into :class:`Sample` rows that :mod:`cnichain.benchmarks.latency.summary` reduces.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cnichain.benchmarks.latency.options import Options
from cnichain.benchmarks.latency.progress import Progress
from cnichain.tools.lab import Lab
from cnichain.podstate.runtime import ConfList, ExecRecord, PluginFailed, Runtime
from cnichain.common.invoke import find_plugin

Records = list[tuple[str, ExecRecord]]  # (mode name, exec record)


@dataclass
class Sample:
    mode: str
    phase: str
    plugin: str
    command: str
    seconds: float
    code: int
    present: int = 0  # other pods present (growth phase)
    impl: str = ""  # "ours" or "reference": which binary actually ran


@dataclass
class Mode:
    """One implementation under test, isolated in its own node namespace."""

    name: str
    bin_dirs: list[str]
    node: str
    workdir: str
    runtime: Runtime
    conflist: Optional[ConfList] = None
    provenance: dict[str, str] = field(default_factory=dict)  # plugin type -> "ours"/"reference"
    skipped: dict[str, str] = field(default_factory=dict)  # plugin type -> why it is left out
    pods: list[str] = field(default_factory=list)
    kind: str = "ours"  # "ours" (cold, warm) or "reference"
    portmap_backend: Optional[str] = None  # the "backend" key this mode's portmap gets (None: its default)
    reference: str = ""  # reference modes: the --reference name this mode runs (several modes may share one)
    version: str = ""  # reference modes: the package version, when known

    @property
    def is_reference(self) -> bool:
        return self.kind == "reference"

    @property
    def chain(self) -> ConfList:
        """The conflist this mode runs; set up before any phase, so a phase never sees None."""
        if self.conflist is None:
            raise RuntimeError(f"bench mode {self.name!r} has no conflist yet")
        return self.conflist


class Bench:
    """The lab, the modes, and what the phases measured (samples, totals, batches, errors, notes)."""

    def __init__(self, options: Options, lab: Lab, progress: Optional[Callable[..., None]] = None) -> None:
        self.o = options
        self.lab = lab
        self.progress = progress or Progress(options.quiet)
        self.samples: list[Sample] = []
        self.notes: list[str] = []
        self.parallel: list[dict] = []
        self.storm: list[dict] = []  # one row per storm batch (bench.storm)
        self.agent_cgroup: Any = None  # the warm agent's memory cgroup (tools/memcg.py), when limited
        self.agent: Any = None  # the warm agent (agent.RunningAgent)
        self.agent_pool = 0  # its --pool
        self.agent_idle: dict = {}  # its cgroup and metrics once its pool was warm
        self.chain_totals: list[dict] = []
        self.status_sweeps: list[dict] = []  # one row per STATUS sweep of a mode's chain (bench.status)
        self.errors: list[dict] = []
        self.loadavg: Optional[list] = None
        self._sink = threading.local()
        self._lock = threading.Lock()
        self.modes: dict[str, Mode] = {}
        self.our_bin = os.path.join(lab.workdir, "bin")
        self.cleanup: list[Any] = []  # context managers to exit when the bench ends (the agent)
        self.executables = ""  # "native shim" or "python launcher": what our installed plugins are
        self.primary_reference_dir = ""  # the first reference's plugins: fallback stand-ins, loopback
        self.pod_rows: list[dict] = []  # one row per pod of the pods phase (bench.pods)
        self.pods_runtime: dict = {}  # the pods phase's runtime: containerd's version, where it ran

    def recorder(self, mode: Mode) -> Callable[[ExecRecord], None]:
        """The ``on_exec`` hook for ``mode``'s runtimes."""
        def record(rec: ExecRecord) -> None:
            sink = getattr(self._sink, "records", None)
            if sink is not None:
                sink.append((mode.name, rec))

        return record

    def collect(self, fn: Callable[[], Any]) -> tuple[Any, Records, Optional[BaseException]]:
        """Run ``fn`` and return (its result, the execs it made, the plugin failure if any)."""
        self._sink.records = []
        try:
            out = fn()
            err = None
        except (PluginFailed, OSError, ValueError) as exc:
            out, err = None, exc
        finally:
            recs = self._sink.records
            self._sink.records = None
        return out, recs, err

    def keep(self, phase: str, recs: Records, present: int = 0) -> None:
        with self._lock:
            for mode_name, rec in recs:
                mode = self.modes[mode_name]
                self.samples.append(
                    Sample(mode_name, phase, rec.plugin, rec.command, rec.seconds, rec.code, present,
                           mode.provenance.get(rec.plugin, "reference" if mode.is_reference else "ours"))
                )

    def error(self, phase: str, mode: str, what: str, exc: BaseException) -> None:
        with self._lock:
            self.errors.append({"phase": phase, "mode": mode, "what": what, "error": str(exc)})

    def keep_outcome(self, phase: str, mode: str, what: str, recs: Records, err: Optional[BaseException],
                     present: int = 0) -> None:
        """:meth:`keep` the samples and, on failure, :meth:`error` -- what every timed step does."""
        self.keep(phase, recs, present)
        if err is not None:
            self.error(phase, mode, what, err)

    def ordered(self, i: int) -> list[Mode]:
        """The modes, first-to-last on even rounds and reversed on odd ones, so noise hits all alike."""
        modes = list(self.modes.values())
        return modes if i % 2 == 0 else modes[::-1]

    def reference_modes(self) -> list[Mode]:
        return [m for m in self.modes.values() if m.is_reference]

    def which(self, mode: Mode, ptype: str) -> Optional[str]:
        """"ours" or "reference": whose binary ``mode`` runs for ``ptype``; None when it has none."""
        try:
            path = find_plugin(ptype, mode.bin_dirs)
        except Exception:  # noqa: BLE001 - not found
            return None
        return "ours" if os.path.dirname(path) == self.our_bin else "reference"
