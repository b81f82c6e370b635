"""An ADD run again over what a killed ADD of the same request left: it succeeds, and DEL then
leaves nothing.

This is what the shims do when a warm worker dies mid-request (the kernel's OOM killer, an
operator): the agent closes the connection and the shim runs the very same request cold
(docs/agent.md).  Here each chained plugin's ADD is SIGKILLed -- its process group, so bridge's
delegated host-local dies with it, and in the warm pass the agent's worker serving it (the one
holding the peer of the shim's connection, stopped first so it cannot finish: the retry follows a
dead worker) -- at several points of its work, and the stand-in then execs the real plugin with
the same stdin and environment, as the shim does.  Each point is recorded: how the plugin ended
(by SIGKILL, or done before the kill), which worker died, and what it had made in the kernel by
then.  The runtime must see the chain's ADD
succeed (bridge finds its own half-made veth pair and IPAM reservation, bandwidth its own qdiscs
and IFB, portmap and tuning their own state), the pod must answer a ping through the bridge, and
its DEL must leave nothing behind.  A veth in the pod that is not ours still fails bridge's ADD
(tests/integration/test_bridge.py, test_interface_name_taken_leaves_nothing).
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from cnichain.podstate.runtime import Attachment
from tests.integration.test_containerd_del_shapes import (CNI_ARGS, KILL_FRACTIONS, add_seconds, assert_clean, chain,
                                                          conflist, containerd_caps, remove_sandbox_del)

pytestmark = pytest.mark.integration

# host-local's points are fractions of bridge's ADD time (its delegate is not timed on its own);
# the shared ones (0.3 of bridge's time and later) found it done every time, so it gets earlier ones.
# Every plugin's first point is 0: killed before it could do anything, so each run has a kill that
# landed however fast the plugin is (a warm tuning ADD takes a few ms).
FRACTIONS = {plugin: (0.0,) + tuple(f for f in points if f) for plugin, points in
             dict(KILL_FRACTIONS, **{"host-local": (0.0, 0.1, 0.2, 0.3)}).items()}

# The stand-in for one plugin's first ADD of a container (other execs run the real one): the real
# plugin in its own process group, killed $KILL_AFTER seconds after it may start working unless it
# is done by then.  In the warm pass ($AGENT_SOCKET set) every worker of the agent is stopped
# before the request exists; the one the request reaches (holding the peer of the shim's
# connection, or with the agent's hand-over waiting in its channel) is the victim, the others go
# on, and the delay counts from the victim's resumption; at the kill point it is stopped, the shim
# killed and then the worker, so no shim runs the request cold.  One JSON line per kill goes to
# $KILL_RECORD; then the real plugin runs again with the same stdin, as the shim's cold fallback
# does after a worker died.
RECORDED_KILL = """#!{python}
import json, os, signal, subprocess, sys, threading, time
real = os.path.join({real!r}, os.path.basename(sys.argv[0]))
mark = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "killed-" + os.environ.get("CNI_CONTAINERID", ""))
if os.environ.get("CNI_COMMAND") != "ADD" or os.path.exists(mark):
    os.execv(real, [real])
open(mark, "w").close()

def out(*argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout or "[]"

def state():
    links = [f"{{(l.get('linkinfo') or {{}}).get('info_kind')}} {{l['ifname']}}"
             for l in json.loads(out("ip", "-j", "-d", "link", "show"))
             if (l.get("linkinfo") or {{}}).get("info_kind") in ("veth", "ifb", "bridge")]
    pod = os.environ.get("CNI_NETNS", "")
    links += ["pod " + l["ifname"] for l in json.loads(out("nsenter", "--net=" + pod, "ip", "-j", "link", "show"))
              if l["ifname"] != "lo"] if pod else []
    qdiscs = [f"{{q['kind']}} on {{q.get('dev')}}" for q in json.loads(out("tc", "-j", "qdisc", "show"))
              if q.get("kind") in ("tbf", "ingress", "clsact")]
    nft = json.loads(out("nft", "-j", "list", "ruleset") or "{{}}").get("nftables", [])
    rules = [f"rule {{r['rule']['table']}}/{{r['rule']['chain']}} #{{r['rule'].get('handle')}}" for r in nft if "rule" in r]
    elems = [f"map {{m['map']['name']}}: {{json.dumps(e)}}" for m in nft if "map" in m for e in m["map"].get("elem", [])]
    return sorted(links + qdiscs + rules + elems)

def ppid(pid):
    with open(f"/proc/{{pid}}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])

def agent_pids():
    # The agent and its workers (forks: the same command line), the agent first: the channels live
    # in its namespace, and a worker serving a request has entered another (pids wrap, so the
    # lowest is not necessarily the agent).
    sock = os.environ.get("AGENT_SOCKET", "")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc") if sock else []):
        try:
            with open(f"/proc/{{pid}}/cmdline", "rb") as fh:
                if sock.encode() in fh.read().split(b"\\0"):
                    found.append(int(pid))
        except OSError:
            pass
    def parent(pid):
        try:
            return ppid(pid)
        except OSError:
            return None
    return sorted(found, key=lambda pid: parent(pid) in found)

def agent_workers(agents):
    found = []
    for pid in agents:
        try:
            with open(f"/proc/{{pid}}/task/{{pid}}/children") as fh:
                found += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return found

def unix_sockets(net=None):
    # (inode, peer inode, queued) of every unix socket of a network namespace (ss lists its own).
    argv = ["ss", "-x", "-a", "-H"]
    rows = []
    for line in out(*(["nsenter", "--net=" + net] + argv if net else argv)).splitlines():
        cols = line.split()
        if len(cols) >= 8:
            rows.append((cols[5], cols[7], cols[2] != "0"))
    return rows

def sockets(pid):
    found = set()
    for fd in os.listdir(f"/proc/{{pid}}/fd"):
        try:
            link = os.readlink(f"/proc/{{pid}}/fd/{{fd}}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found

before = state()
stopped = set()

def stop_workers():
    # Every worker of the session agent is stopped before the request exists (and any it forks
    # meanwhile as soon as it is seen), so none can finish the request before it is caught.
    for pid in agent_workers(agents):
        if pid in stopped or pid in (os.getpid(), os.getppid()):  # a delegate's stand-in may be a worker's child
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
            stopped.add(pid)
        except ProcessLookupError:
            pass

def holding(shim):
    # The stopped worker this request went to: it holds the peer of the shim's connection, or the
    # agent's hand-over waits in its channel (tests run one at a time: no other request is queued).
    try:
        mine = sockets(shim)
    except OSError:
        mine = set()
    peers = {{peer for inode, peer, _ in unix_sockets() if inode in mine}}
    # The channels live in the agent's namespace, listed there.
    queued = {{inode for inode, _, waiting in unix_sockets(f"/proc/{{agents[0]}}/ns/net") if waiting}}
    for pid in list(stopped):
        try:
            if sockets(pid) & (peers | queued):
                return pid
        except OSError:
            pass
    return None

def stop_forks(halt):
    # A worker the agent forks for this request (none of the stopped ones was ready) serves it at
    # once: it is caught within a fraction of a millisecond, not after a search round (tens of ms).
    while not halt.is_set():
        stop_workers()
        time.sleep(0.0002)

agents = agent_pids()
warm = bool(agents)
halt = threading.Event()
stopper = threading.Thread(target=stop_forks, args=(halt,))
if warm:
    stop_workers()
    stopper.start()
data = sys.stdin.buffer.read()
p = subprocess.Popen([real], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
p.stdin.write(data)
p.stdin.close()
victim = None
searched = 0
started = time.monotonic()
deadline = started + 5.0
while warm and victim is None and p.poll() is None and time.monotonic() < deadline:
    victim = holding(p.pid)
    searched += 1
    time.sleep(0.001)
halt.set()
if warm:
    stopper.join()
search = {{"rounds": searched, "seconds": round(time.monotonic() - started, 3), "found": victim,
          "stopped": sorted(stopped), "done": p.poll()}}
for pid in stopped - {{victim}}:  # the stopper has left: nothing is added now
    os.kill(pid, signal.SIGCONT)
after = float(os.environ["KILL_AFTER"])
# The kill point counts from the moment the worker may work; at point 0 it never may: a warm
# tuning ADD takes about a millisecond, so a worker let go even for an instant could answer
# before the kill, and point 0 must land every time.
if victim and after > 0:
    os.kill(victim, signal.SIGCONT)
try:
    p.wait(timeout=after)
except subprocess.TimeoutExpired:
    pass
if p.poll() is not None:
    victim = None  # done before the kill: the worker that served it is not touched
elif victim:
    os.kill(victim, signal.SIGSTOP)  # it cannot finish while the shim dies
try:
    os.killpg(p.pid, signal.SIGKILL)
except ProcessLookupError:
    pass
dead = []
if victim:
    os.kill(victim, signal.SIGKILL)
    for _ in range(400):
        try:
            with open(f"/proc/{{victim}}/stat") as fh:
                gone = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:  # reaped by the agent
            gone = True
        if gone:
            dead.append(victim)
            break
        time.sleep(0.005)
status = p.wait()
made = sorted(set(state()) - set(before))
with open(os.environ["KILL_RECORD"], "a") as fh:
    fh.write(json.dumps({{"after": float(os.environ["KILL_AFTER"]), "exit": status, "workers_killed": dead,
                         "made": made, "search": search}}) + "\\n")
sys.exit(subprocess.run([real], input=data).returncode)
"""


def recorded_kill_dir(lab, plugin_dir: str, plugin: str) -> str:
    """A folder holding ``plugin`` as the :data:`RECORDED_KILL` stand-in for the one in ``plugin_dir``."""
    folder = lab.path("killed-add", "x").rsplit("/", 1)[0]
    path = os.path.join(folder, plugin)
    with open(path, "w") as fh:
        fh.write(RECORDED_KILL.format(python=sys.executable, real=plugin_dir))
    os.chmod(path, 0o755)
    return folder


@pytest.mark.parametrize("plugin", sorted(FRACTIONS))
def test_add_again_after_a_kill_succeeds_and_del_cleans(lab, make_runtime, plugin_dir, agent_socket, plugin):
    conf = conflist(lab, chain("1.1.0"))
    took = add_seconds(make_runtime(), conf, lab, "bridge" if plugin == "host-local" else plugin)
    assert_clean(lab)
    runtime = make_runtime([recorded_kill_dir(lab, plugin_dir, plugin), plugin_dir])
    record = lab.path("kills.jsonl")
    runtime.extra_env.update(KILL_RECORD=record, AGENT_SOCKET=agent_socket)
    caps = containerd_caps()
    points = [f * took for f in FRACTIONS[plugin]] + [3.0]
    for n, after in enumerate(points):
        cid = f"ctrd-r{n}"
        pod = lab.netns(f"r{n}")
        runtime.extra_env["KILL_AFTER"] = str(after)
        result = runtime.add(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps))
        assert [i["name"] for i in result["interfaces"] if i.get("sandbox")] == ["eth0"]
        assert len(result["ips"]) == 1
        lab.run(pod, "ping", "-c1", "-W2", "10.22.0.1")
        runtime.delete(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps))
        assert_clean(lab)
        lab.delete_netns(pod)
        remove_sandbox_del(runtime, conf, cid, caps)
        assert_clean(lab)
    with open(record) as fh:
        kills = [json.loads(line) for line in fh]
    for kill in kills:
        print(f"{plugin} killed after {kill['after']:.3f}s: exit {kill['exit']}, workers {kill['workers_killed']}, "
              f"made {kill['made']}, search {kill.get('search')}")
    assert len(kills) == len(points), kills  # each point's first ADD went through the stand-in
    interrupted = [k for k in kills if k["exit"] == -signal.SIGKILL]
    # The kills interrupted the plugin (it died of SIGKILL, with what it had made by then
    # recorded), at least once per plugin; the last point (3 s) is the control, a plugin done
    # before the kill.
    assert interrupted, kills
    assert kills[-1]["exit"] == 0 and kills[-1]["workers_killed"] == [], kills[-1]
    if agent_socket:  # warm: the retry followed a worker that died serving the request
        assert any(k["workers_killed"] for k in interrupted), kills
