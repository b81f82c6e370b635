"""``cnichain demo``: the default chain on a throwaway node, with a visible proof of each plugin.

It builds a node namespace, pod namespaces and an "outside" host wired to the node, installs this
checkout's plugins into a private bin dir, runs the default conflist through the runner exactly as
a runtime would, shows what each plugin did (results, pings, a hostPort reached from outside, a
measured rate, a sysctl read back, the pod's routes), runs CHECK and DEL, and removes everything,
also on Ctrl-C or SIGTERM.  No kernel object is created in the caller's own namespace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional

from cnichain.node import launchers
from cnichain.tools.lab import Lab, isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfigError, ConfList, PluginFailed, Runtime

DEFAULT_CONFLIST = "cnichain-default.conflist"
NODE_ADDR, OUTSIDE_ADDR = "198.18.0.1", "198.18.0.2"  # benchmark-test range, only inside the lab
HOST_PORT, POD_PORT = 8080, 80
DEMO_RATE = 20_000_000  # bits/s for the bandwidth proof
SERVER = (
    "import socket,sys\n"
    "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(8); s.settimeout(30)\n"
    "for _ in range(8):\n"
    "    try: c,a=s.accept()\n"
    "    except OSError: break\n"
    "    c.sendall(('hello from '+sys.argv[2]+', you are '+a[0]+'\\n').encode()); c.close()\n"
)
CLIENT = (
    "import socket,sys\n"
    "try:\n"
    "    c=socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3); print(c.recv(200).decode().strip())\n"
    "except OSError as e: print('connection failed:', e); sys.exit(1)\n"
)


def _say(text: str = "") -> None:
    print(text, flush=True)


class _Pacing:
    """Whether to wait for Enter after announcing each step (``--pause``).

    Walking through the demo step by step is also what makes an interrupt land at a known point:
    the Ctrl-C test signals the demo while it waits here, never after it has already finished.
    """

    pause = False


def _step(text: str) -> None:
    _say(f"\n== {text}")
    if _Pacing.pause:
        _say("  (paused: press Enter to go on)")
        if not sys.stdin.readline():  # end of input: go on without pausing again
            _Pacing.pause = False


def _ok(ok: bool, text: str) -> bool:
    _say(f"  [{'ok' if ok else 'FAIL'}] {text}")
    return ok


def _load_default(name: Optional[str]) -> tuple[str, dict]:
    path = name or os.path.join(launchers.conflists_dir(), DEFAULT_CONFLIST)
    if not os.path.exists(path):
        path = os.path.join(launchers.conflists_dir(), name or DEFAULT_CONFLIST)
    with open(path, "rb") as fh:
        return path, json.loads(fh.read())


def _chain_types(data: dict) -> list[str]:
    return [p.get("type") for p in data.get("plugins", [data])]


def run_demo(conflist: Optional[str] = None, pods: int = 2, pause: bool = False) -> int:
    """Run the demo; return 0 when every proof passed.  ``pause`` waits for Enter at each step."""
    _Pacing.pause = pause

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    lab = Lab(prefix="cnidemo")
    try:
        return _demo(lab, conflist, pods)
    except KeyboardInterrupt:
        _say("\ninterrupted: cleaning up")
        return 130
    except (ConfigError, OSError, ValueError) as exc:
        _say(f"error: {exc}")
        return 2
    finally:
        lab.close()
        signal.signal(signal.SIGTERM, previous)
        _say(f"\n== cleaned up: namespaces and state of run {lab.run_id} removed")


def _demo(lab: Lab, conflist_name: Optional[str], pods: int) -> int:
    path, raw = _load_default(conflist_name)
    bin_dir = lab.path("bin", "x").rsplit("/", 1)[0]
    launchers.install(bin_dir)
    available = set(launchers.available_plugins())
    wanted = _chain_types(raw)
    missing = [t for t in wanted if t not in available]
    if missing:
        if wanted and wanted[0] in missing:
            raise ConfigError(f"the chain's first plugin {wanted[0]!r} is not available in this installation")
        _say(f"note: {', '.join(missing)} not available in this installation; skipped in the demo")
        raw = dict(raw, plugins=[p for p in raw["plugins"] if p.get("type") in available])
    conf = ConfList.from_dict(isolate_conflist(raw, lab.workdir), path)
    types = [p["type"] for p in conf.plugins]
    _step(f"conflist {os.path.basename(path)}: network {conf.name!r}, cniVersion {conf.cni_version}, chain {' -> '.join(types)}")
    _say(f"  node namespace {os.path.basename(lab.node)}; plugins installed in {bin_dir}")

    timings: list[str] = []
    runtime = Runtime([bin_dir], lab.path("cache", "x").rsplit("/", 1)[0], node_netns=lab.node,
                      on_exec=lambda r: timings.append(f"{r.plugin} {r.command} {r.seconds * 1000:.0f} ms"))
    outside = lab.netns("outside")
    lab.wire(outside, [f"{OUTSIDE_ADDR}/24"], [f"{NODE_ADDR}/24"], "out")
    lab.run(outside, "ip", "route", "add", "default", "via", NODE_ADDR)

    ok = True
    atts: list[Attachment] = []
    results: list[dict] = []
    for i in range(pods):
        caps: dict = {}
        if i == 0:
            caps["portMappings"] = [{"hostPort": HOST_PORT, "containerPort": POD_PORT, "protocol": "tcp"}]
        if i == 1 % pods and "bandwidth" in types:
            caps["bandwidth"] = {"ingressRate": DEMO_RATE, "ingressBurst": DEMO_RATE // 8 // 10 * 8,
                                 "egressRate": DEMO_RATE, "egressBurst": DEMO_RATE // 8 // 10 * 8}
        att = Attachment(f"demo-{lab.run_id}-pod{i}", lab.netns(f"pod{i}"), "eth0", capability_args=caps)
        _step(f"ADD pod{i} (container {att.container_id}){' with ' + ', '.join(caps) if caps else ''}")
        timings.clear()
        try:
            result = runtime.add(conf, att)
        except PluginFailed as exc:
            _ok(False, str(exc))
            return 1
        atts.append(att)
        results.append(result)
        ips = [ip["address"] for ip in result.get("ips", [])]
        ifaces = [i_["name"] + (" (pod)" if i_.get("sandbox") else "") for i_ in result.get("interfaces", [])]
        _say(f"  result: ips {', '.join(ips)}; interfaces {', '.join(ifaces)}")
        _say(f"  exec times: {'; '.join(timings)}")

    pod_ips = [r["ips"][0]["address"].split("/")[0] for r in results]
    gateway = results[0]["ips"][0].get("gateway", "")

    _step("connectivity")
    if gateway:
        ok &= _ok(_ping(lab, atts[0].netns, gateway), f"pod0 -> gateway {gateway}")
    if len(atts) > 1:
        ok &= _ok(_ping(lab, atts[0].netns, pod_ips[1]), f"pod0 -> pod1 {pod_ips[1]}")
        ok &= _ok(_ping(lab, atts[1].netns, pod_ips[0]), f"pod1 -> pod0 {pod_ips[0]}")

    server = None
    if "portmap" in types:
        _step(f"portmap: hostPort {HOST_PORT} on the node -> pod0:{POD_PORT}")
        server = lab.popen(atts[0].netns, sys.executable, "-c", SERVER, str(POD_PORT), "pod0",
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        reply = _connect(lab, outside, NODE_ADDR, HOST_PORT)
        ok &= _ok(reply.startswith("hello from pod0"), f"outside {OUTSIDE_ADDR} -> node {NODE_ADDR}:{HOST_PORT}: {reply}")

    if "bandwidth" in types and len(atts) > 1:
        _step(f"bandwidth: pod1 shaped to {DEMO_RATE / 1e6:.0f} Mbit/s each way")
        for label, reverse in (("into pod1 (ingress)", False), ("out of pod1 (egress)", True)):
            rate = _measure(lab, atts[1].netns, outside, pod_ips[1], reverse)
            within = rate is not None and abs(rate - DEMO_RATE) <= 0.15 * DEMO_RATE
            shown = f"{rate / 1e6:.1f} Mbit/s" if rate is not None else "no measurement"
            ok &= _ok(within, f"{label}: measured {shown}")

    if "tuning" in types:
        tuning = next(p for p in conf.plugins if p["type"] == "tuning")
        _step("tuning: sysctls read back inside pod0")
        for key, value in (tuning.get("sysctl") or {}).items():
            got = lab.run(atts[0].netns, "sysctl", "-n", key.replace("IFNAME", "eth0"), check=False).stdout.strip()
            ok &= _ok(got == str(value), f"{key} = {got} (configured {value})")

    if "route-override" in types:
        _step("route-override: routes inside pod0")
        routes = lab.run(atts[0].netns, "ip", "route").stdout.strip().splitlines()
        for line in routes:
            _say(f"  {line}")
        for route in next(p for p in conf.plugins if p["type"] == "route-override").get("addroutes") or []:
            ok &= _ok(any(line.startswith(route["dst"]) for line in routes), f"added route {route['dst']} present")

    _step("CHECK every pod")
    for att in atts:
        try:
            runtime.check(conf, att)
            _ok(True, f"{att.container_id}")
        except PluginFailed as exc:
            ok &= _ok(False, f"{att.container_id}: {exc}")

    _step("DEL every pod (reverse chain order, cached results)")
    for att in atts:
        timings.clear()
        try:
            runtime.delete(conf, Attachment(att.container_id, att.netns, att.ifname))
            _say(f"  {att.container_id}: {'; '.join(timings)}")
        except PluginFailed as exc:
            ok &= _ok(False, f"{att.container_id}: {exc}")
    if server is not None:
        reply = _connect(lab, outside, NODE_ADDR, HOST_PORT)
        ok &= _ok(not reply.startswith("hello"), f"after DEL, node:{HOST_PORT} reaches nothing ({reply})")
        server.kill()
        server.wait()
    gone = "eth0" not in lab.run(atts[0].netns, "ip", "-o", "link").stdout
    ok &= _ok(gone, "pod interfaces removed")

    _step("result: " + ("every proof passed" if ok else "SOME PROOFS FAILED"))
    return 0 if ok else 1


def _ping(lab: Lab, ns: str, addr: str) -> bool:
    return lab.run(ns, "ping", "-c", "1", "-W", "2", addr, check=False).returncode == 0


def _connect(lab: Lab, ns: str, addr: str, port: int) -> str:
    proc = lab.run(ns, sys.executable, "-c", CLIENT, addr, str(port), check=False, timeout=10)
    return (proc.stdout or proc.stderr).strip()



def _measure(lab: Lab, pod_ns: str, client_ns: str, pod_ip: str, reverse: bool) -> Optional[float]:
    """Measured TCP rate in bits/s between the outside host and the pod, or None."""
    try:
        return lab.iperf(pod_ns, client_ns, pod_ip, seconds=3, omit=1, reverse=reverse)
    except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired):
        return None


__all__ = ["run_demo"]
