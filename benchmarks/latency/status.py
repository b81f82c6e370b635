"""The status phase: what a node pays for containerd 2.1's STATUS polling.

containerd 2.1+ sends STATUS to every plugin of the loaded chain (conflist at 1.1.0) on every CRI
Status call, which the kubelet makes about every 5 s, with no timeout.  A sweep here is one STATUS
exec per plugin of the mode's chain, at cniVersion 1.1.0, in chain order.  Every exec is timed and
counted whatever its exit status: Debian 12's reference (1.1.1) predates STATUS and fails it, but a
node running it pays that exec all the same (containerd would stop at the first failure; the bench
goes on, so both sides are charged the same number of execs).  Failures are listed per plugin in
the summary, not treated as errors of the run.
"""

from __future__ import annotations

import functools

from cnichain.benchmarks.latency.session import Bench, Mode
from cnichain.podstate.runtime import ConfList, PluginFailed

STATUS_VERSION = "1.1.0"  # containerd runs STATUS only for conflists at 1.1.0


def status_chain(mode: Mode) -> ConfList:
    """The mode's chain as containerd 2.1 would run it for STATUS: the same plugins at 1.1.0."""
    data = dict(mode.chain.raw)
    data["cniVersion"] = STATUS_VERSION
    return ConfList.from_dict(data)


def sweep(bench: Bench, mode: Mode, chain: ConfList) -> dict:
    """One STATUS per plugin of ``chain``: {"seconds", "plugins": {type: s}, "failed": {type: why}}."""
    per: dict[str, float] = {}
    failed: dict[str, str] = {}
    for plugin in chain.plugins:
        ptype = plugin["type"]
        conf = mode.runtime.plugin_config(chain, plugin, None, None)
        _, recs, err = bench.collect(functools.partial(mode.runtime.exec_plugin, ptype, "STATUS", None, conf))
        per[ptype] = sum(rec.seconds for _, rec in recs)
        if err is not None:
            failed[ptype] = str(err.error if isinstance(err, PluginFailed) else err)[:200]
    return {"mode": mode.name, "seconds": sum(per.values()), "plugins": per, "failed": failed}


def run_status(bench: Bench) -> None:
    """``status_sweeps`` sweeps per mode, the modes interleaved sweep by sweep."""
    chains = {name: status_chain(mode) for name, mode in bench.modes.items()}
    n = bench.o.status_sweeps
    for i in range(n):
        for mode in bench.ordered(i):
            row = sweep(bench, mode, chains[mode.name])
            row["sweep"] = i
            bench.status_sweeps.append(row)
        last = {r["mode"]: r["seconds"] for r in bench.status_sweeps[-len(bench.modes):]}
        bench.progress(f"[status] sweep {i + 1}/{n}  " + "  ".join(f"{m} {s * 1000:.0f} ms" for m, s in last.items()))
    bench.progress(f"[status] done: {n} sweeps", final=True)
