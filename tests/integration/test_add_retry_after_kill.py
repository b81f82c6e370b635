"""An ADD run again over what a killed ADD of the same request left: it succeeds, and DEL then
leaves nothing.

This is what the shims do when a warm worker dies mid-request (the kernel's OOM killer, an
operator): the agent closes the connection and the shim runs the very same request cold
(docs/agent.md).  Here each chained plugin's ADD is SIGKILLed -- its process group, so bridge's
delegated host-local dies with it -- at several points of its work, and the stand-in then execs the
real plugin with the same stdin and environment, as the shim does.  The runtime must see the chain's
ADD succeed (bridge finds its own half-made veth pair and IPAM reservation, bandwidth its own
qdiscs and IFB, portmap and tuning their own state), the pod must answer a ping through the
bridge, and its DEL must leave nothing behind.  A veth in the pod that is not ours still fails
bridge's ADD (tests/integration/test_bridge.py, test_interface_name_taken_leaves_nothing).
"""

from __future__ import annotations

import os
import sys

import pytest

from cnichain.tools.runtime import Attachment
from tests.integration.test_containerd_del_shapes import (CNI_ARGS, KILL_FRACTIONS, add_seconds, assert_clean,
                                                          chain, conflist, containerd_caps, remove_sandbox_del)

pytestmark = pytest.mark.integration

# The stand-in for one plugin: its first ADD of a container runs the real one in its own process
# group, SIGKILLs the group after $KILL_AFTER seconds (or once it is done), then runs the real one
# again in its place with the same stdin -- the shim's cold fallback after a worker died.  Other
# commands, and later ADDs of that container (bridge asking its IPAM again), exec it.
RETRY = """#!{python}
import os, signal, subprocess, sys
real = os.path.join({real!r}, os.path.basename(sys.argv[0]))
mark = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "killed-" + os.environ.get("CNI_CONTAINERID", ""))
if os.environ.get("CNI_COMMAND") != "ADD" or os.path.exists(mark):
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
again = subprocess.run([real], input=data)
sys.exit(again.returncode)
"""


def retry_dir(lab, plugin_dir: str, plugin: str) -> str:
    folder = lab.path("retry", "x").rsplit("/", 1)[0]
    path = os.path.join(folder, plugin)
    with open(path, "w") as fh:
        fh.write(RETRY.format(python=sys.executable, real=plugin_dir))
    os.chmod(path, 0o755)
    return folder


@pytest.mark.parametrize("plugin", sorted(KILL_FRACTIONS))
def test_add_again_after_a_kill_succeeds_and_del_cleans(lab, make_runtime, plugin_dir, plugin):
    conf = conflist(lab, chain("1.1.0"))
    took = add_seconds(make_runtime(), conf, lab, "bridge" if plugin == "host-local" else plugin)
    assert_clean(lab)
    runtime = make_runtime([retry_dir(lab, plugin_dir, plugin), plugin_dir])
    caps = containerd_caps()
    for n, after in enumerate([f * took for f in KILL_FRACTIONS[plugin]] + [3.0]):
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
