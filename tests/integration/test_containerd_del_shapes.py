"""The DELs containerd 2.x sends, on the runner in a throwaway node namespace: each succeeds and
leaves nothing (no reservation, nftables rule or map element, IFB, qdisc, veth, tuning backup,
cached result).

* Two DELs per pod: StopPodSandbox (cached ``prevResult``; ``CNI_NETNS=""`` when the netns is
  already gone), then RemovePodSandbox with ``CNI_NETNS=""``, no ``prevResult`` (the first DEL
  dropped the cache) and the full capability args again, Go-cased as go-cni marshals them.
* DEL with the *current* conflist: plugins added to the file after the ADD get a DEL for a pod
  they never saw, with the capability args of the sandbox (and a cached result of the older list).
* DEL after an ADD that never finished (containerd 2.3 sends one, errors ignored): a plugin
  killed with SIGKILL at several points of its ADD (its process group, so a delegated IPAM exec
  dies with it), or an ADD that failed part-way; then DEL without ``prevResult`` (nothing was
  cached) and with the partial result of the plugins that did finish.

The same shapes produced by a real containerd are in tests/runtime/test_containerd_del_shapes.py.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from cnichain.node.launchers import conflists_dir
from cnichain.tools.lab import isolate_conflist
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from tests.integration.footprint import footprint, leftovers

pytestmark = pytest.mark.integration

MBIT = 1_000_000
GO_BURST = 2 ** 32 - 1  # containerd's burst for a set direction (math.MaxUint32)
CNI_ARGS = [("K8S_POD_NAME", "web"), ("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", "default"),
            ("K8S_POD_INFRA_CONTAINER_ID", "ctrd-1"), ("K8S_POD_UID", "uid-1")]  # a Go map: any order


def containerd_caps(host_port: int = 18600) -> dict:
    """go-cni's capability args: struct field names as keys, zero values present."""
    return {"portMappings": [{"HostPort": host_port, "ContainerPort": 80, "Protocol": "tcp", "HostIP": ""},
                             {"HostPort": host_port + 1, "ContainerPort": 53, "Protocol": "udp", "HostIP": ""}],
            "bandwidth": {"IngressRate": 10 * MBIT, "IngressBurst": GO_BURST,
                          "EgressRate": 10 * MBIT, "EgressBurst": GO_BURST}}


def chain(version: str = "1.1.0", types: tuple[str, ...] = ()) -> dict:
    """The shipped default chain at ``version``, only the plugin ``types`` when given."""
    with open(os.path.join(conflists_dir(), "cnichain-default.conflist")) as fh:
        data = json.load(fh)
    data["cniVersion"] = version
    if types:
        data["plugins"] = [p for p in data["plugins"] if p["type"] in types]
    return data


def conflist(lab, data: dict) -> ConfList:
    return ConfList.from_dict(isolate_conflist(data, lab.workdir))


def assert_clean(lab) -> None:
    left = leftovers(footprint(lab))
    assert left == {}, left


def remove_sandbox_del(runtime, conf: ConfList, cid: str, caps: dict) -> None:
    """RemovePodSandbox's DEL: no netns, no cache left, the capability args recomputed."""
    runtime.delete(conf, Attachment(cid, "", "eth0", CNI_ARGS, caps))


@pytest.mark.parametrize("version", ["0.4.0", "1.0.0", "1.1.0"])
@pytest.mark.parametrize("netns_at_stop", ["alive", "gone"])
def test_two_dels_per_pod(lab, make_runtime, version, netns_at_stop):
    runtime = make_runtime()
    conf = conflist(lab, chain(version))
    pod = lab.netns("pod")
    caps = containerd_caps()
    runtime.add(conf, Attachment("ctrd-1", pod, "eth0", CNI_ARGS, caps))
    lab.run(pod, "ping", "-c1", "-W2", "10.22.0.1")
    if netns_at_stop == "gone":
        lab.delete_netns(pod)  # the sandbox's netns went first: containerd sends CNI_NETNS=""
    runtime.delete(conf, Attachment("ctrd-1", pod if netns_at_stop == "alive" else "", "eth0", CNI_ARGS, caps))
    assert_clean(lab)
    remove_sandbox_del(runtime, conf, "ctrd-1", caps)
    remove_sandbox_del(runtime, conf, "ctrd-1", caps)  # the kubelet may repeat it
    assert_clean(lab)


@pytest.mark.parametrize("added_with,version", [
    (("bridge",), "1.1.0"),
    (("bridge", "portmap"), "1.1.0"),
    (("bridge", "route-override"), "1.0.0"),  # the file was also moved from 1.0.0 to 1.1.0 meanwhile
], ids=["bridge-only", "bridge-portmap", "older-version"])
def test_del_with_the_current_conflist(lab, make_runtime, added_with, version):
    """bandwidth, tuning and (where not at ADD) portmap were added to the file after the ADD: their
    first call for this pod is a DEL, with the sandbox's capability args; it must succeed and leave
    nothing, and what the plugins from the ADD made is still removed."""
    runtime = make_runtime()
    pod = lab.netns("pod")
    caps = containerd_caps()
    runtime.add(conflist(lab, chain(version, added_with)), Attachment("ctrd-1", pod, "eth0", CNI_ARGS, caps))
    assert footprint(lab)["reservations"]
    current = conflist(lab, chain("1.1.0"))
    runtime.delete(current, Attachment("ctrd-1", pod, "eth0", CNI_ARGS, caps))
    assert_clean(lab)
    lab.delete_netns(pod)
    remove_sandbox_del(runtime, current, "ctrd-1", caps)
    assert_clean(lab)


# A stand-in for one plugin's ADD (other commands exec the real one): runs the real one in its own
# process group and SIGKILLs the group after $KILL_AFTER seconds (or once it is done, whichever is
# first).  Then ``THEN_DIE``: it dies of SIGKILL itself, so the runtime sees an ADD killed at that
# point with nothing on stdout; or ``THEN_RETRY``: it runs the real one again in its place with the
# same stdin, as the shim's cold fallback does after a worker died.  With ``once``, only the first
# ADD of a container is killed (later ones, such as bridge asking its IPAM again, exec the real one).
KILLED_ADD = """#!{python}
import os, signal, subprocess, sys
real = os.path.join({real!r}, os.path.basename(sys.argv[0]))
mark = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "killed-" + os.environ.get("CNI_CONTAINERID", ""))
if os.environ.get("CNI_COMMAND") != "ADD" or ({once} and os.path.exists(mark)):
    os.execv(real, [real])
open(mark, "w").close()
data = sys.stdin.buffer.read()
p = subprocess.Popen([real], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
p.stdin.write(data)
p.stdin.close()
try:
    p.wait(timeout=float(os.environ["KILL_AFTER"]))
except subprocess.TimeoutExpired:
    pass
try:
    os.killpg(p.pid, signal.SIGKILL)
except ProcessLookupError:
    pass
p.wait()
{then}
"""
THEN_DIE = "os.kill(os.getpid(), signal.SIGKILL)"
THEN_RETRY = "sys.exit(subprocess.run([real], input=data).returncode)"

# Where to kill, as multiples of the plugin's own ADD time measured on this machine just before
# (so the points fall around its work whatever the machine's speed and load); the last one lets
# it finish its work and kills it before it could print the result.  host-local is bridge's
# delegated IPAM exec: killing it fails bridge's ADD from inside.
KILL_FRACTIONS = {"bridge": (0.0, 0.4, 0.7, 1.0, 1.3, 1.6, 2.0), "host-local": (0.3, 0.6, 0.9, 1.2),
                  "portmap": (0.4, 0.7, 1.0, 1.3), "bandwidth": (0.4, 0.7, 1.0, 1.3), "tuning": (0.6, 1.0)}
AFTER_THE_WORK = 3.0


def add_seconds(runtime, conf: ConfList, lab, plugin: str) -> float:
    """One undisturbed ADD of the chain; how long ``plugin`` took (its DEL cleans up)."""
    seen: dict[str, float] = {}
    runtime.on_exec = lambda rec: seen.setdefault(f"{rec.plugin} {rec.command}", rec.seconds)
    pod = lab.netns("calib")
    try:
        runtime.add(conf, Attachment("ctrd-calib", pod, "eth0", CNI_ARGS, containerd_caps(18700)))
        runtime.delete(conf, Attachment("ctrd-calib", pod, "eth0", CNI_ARGS, containerd_caps(18700)))
    finally:
        runtime.on_exec = None
        lab.delete_netns(pod)
    return seen[f"{plugin} ADD"]


def killed_add_dir(lab, plugin_dir: str, plugin: str, then: str = THEN_DIE, once: bool = False) -> str:
    """A folder holding ``plugin`` as the :data:`KILLED_ADD` stand-in for the one in ``plugin_dir``."""
    folder = lab.path("killed-add", "x").rsplit("/", 1)[0]
    path = os.path.join(folder, plugin)
    with open(path, "w") as fh:
        fh.write(KILLED_ADD.format(python=sys.executable, real=plugin_dir, then=then, once=once))
    os.chmod(path, 0o755)
    return folder


@pytest.mark.parametrize("plugin", sorted(KILL_FRACTIONS))
def test_del_after_an_add_killed_mid_way(lab, make_runtime, plugin_dir, plugin):
    """At each kill point the DEL that follows alternates between no prevResult and the partial
    result of the plugins before the killed one; then RemovePodSandbox's DEL."""
    conf = conflist(lab, chain("1.1.0"))
    took = add_seconds(make_runtime(), conf, lab, "bridge" if plugin == "host-local" else plugin)
    assert_clean(lab)
    runtime = make_runtime([killed_add_dir(lab, plugin_dir, plugin), plugin_dir])
    caps = containerd_caps()
    for n, after in enumerate([f * took for f in KILL_FRACTIONS[plugin]] + [AFTER_THE_WORK]):
        cid = f"ctrd-k{n}"
        pod = lab.netns(f"k{n}")
        runtime.extra_env["KILL_AFTER"] = str(after)
        with pytest.raises(PluginFailed) as info:
            runtime.add(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps))
        assert info.value.plugin_type == ("bridge" if plugin == "host-local" else plugin)
        prev = info.value.partial_result if n % 2 else None
        assert runtime.cached(conf.name, Attachment(cid, pod, "eth0")) is None  # nothing was cached
        runtime.delete(conf, Attachment(cid, pod, "eth0", CNI_ARGS, caps), prev_result=prev)
        assert_clean(lab)
        lab.delete_netns(pod)
        remove_sandbox_del(runtime, conf, cid, caps)
        assert_clean(lab)


@pytest.mark.parametrize("with_prev", [False, True], ids=["no-prevResult", "partial-prevResult"])
def test_del_after_an_add_that_failed_part_way(lab, make_runtime, with_prev):
    """tuning fails (a sysctl that does not exist) after bridge, portmap and bandwidth set the pod up."""
    runtime = make_runtime()
    data = chain("1.1.0")
    next(p for p in data["plugins"] if p["type"] == "tuning")["sysctl"] = {"net.ipv4.conf.IFNAME.no_such_key": "1"}
    conf = conflist(lab, data)
    caps = containerd_caps()
    pod = lab.netns("pod")
    with pytest.raises(PluginFailed) as info:
        runtime.add(conf, Attachment("ctrd-f", pod, "eth0", CNI_ARGS, caps))
    assert info.value.plugin_type == "tuning" and info.value.partial_result
    runtime.delete(conf, Attachment("ctrd-f", pod, "eth0", CNI_ARGS, caps),
                   prev_result=info.value.partial_result if with_prev else None)
    assert_clean(lab)
    lab.delete_netns(pod)
    remove_sandbox_del(runtime, conf, "ctrd-f", caps)
    assert_clean(lab)
