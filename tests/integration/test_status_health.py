"""STATUS as containerd 2.1+ uses it: a node-health call on every plugin of the chain.

Each fault class that breaks every ADD until an operator acts fails STATUS with code 50 and a
message naming the fix: the IPAM store on a read-only file system (a read-only bind mount in a
private mount namespace, so nothing outside the test sees it), a store directory that cannot be
created, the delegated IPAM plugin missing from ``CNI_PATH``.  A full range is not such a fault:
STATUS of the whole shipped chain stays 0 and only the next ADD fails, with the exhaustion error.
Runs cold, and warm too when the suite runs with the session agent (its workers enter the
caller's mount namespace, so they see the read-only mount as a cold exec does).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Iterator

import pytest

from cnichain.node.launchers import conflists_dir
from cnichain.podstate.runtime import Attachment, ConfList, PluginFailed
from cnichain.common.errors import Code

pytestmark = pytest.mark.integration


def default_chain(lab, subnet: str) -> ConfList:
    """The shipped default conflist at 1.1.0 with this lab's range and IPAM store."""
    with open(os.path.join(conflists_dir(), "cnichain-default.conflist")) as fh:
        data = json.load(fh)
    data["cniVersion"] = "1.1.0"
    ipam = data["plugins"][0]["ipam"]
    ipam["ranges"], ipam["dataDir"] = [[{"subnet": subnet}]], lab.path("ipam")
    return ConfList.from_dict(data)


def test_full_range_keeps_status_ok_and_fails_the_next_add(lab, make_runtime, plugin_dir, reference_dir):
    runtime = make_runtime([plugin_dir, reference_dir])
    chain = default_chain(lab, "10.22.0.0/30")  # gateway .1 (route-override routes via it), one pod address
    runtime.status(chain)
    runtime.add(chain, Attachment("first", lab.netns("p1"), "eth0"))
    runtime.status(chain)  # every plugin of the chain, the ones without a STATUS handler included
    with pytest.raises(PluginFailed) as info:
        runtime.add(chain, Attachment("second", lab.netns("p2"), "eth0"))
    assert "no IP addresses available in range set: 10.22.0.1-10.22.0.2" in info.value.error.msg
    runtime.status(chain)
    runtime.delete(chain, Attachment("first", lab.path("gone"), "eth0"))
    runtime.add(chain, Attachment("third", lab.netns("p3"), "eth0"))


@pytest.fixture
def private_mounts() -> Iterator[int]:
    """The pid of a process in its own mount namespace (private propagation): mounts made there
    are seen by nothing else and vanish with it."""
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--", "sleep", "infinity"],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    mine = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + 10
    while True:  # bounded: until the exec'd sleep runs in its own mount namespace
        try:
            with open(f"/proc/{proc.pid}/comm") as fh:
                if fh.read().strip() == "sleep" and os.readlink(f"/proc/{proc.pid}/ns/mnt") != mine:
                    break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "unshare did not start"
        time.sleep(0.01)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def exec_in(pid: int, netns: str, binary: str, command: str, conf: dict, cni_path: str, cid: str = "") -> tuple[int, dict]:
    """Exec a plugin in ``pid``'s mount namespace and ``netns``: (exit code, error JSON or {})."""
    env = {"CNI_COMMAND": command, "CNI_PATH": cni_path, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if cid:
        env.update(CNI_CONTAINERID=cid, CNI_IFNAME="eth0", CNI_NETNS=netns)
    for key in ("CNICHAIN_AGENT_SOCKET",):
        if key in os.environ:
            env[key] = os.environ[key]
    proc = subprocess.run(["nsenter", "-t", str(pid), "-m", f"--net={netns}", "--", binary],
                          input=json.dumps(conf).encode(), env=env, capture_output=True, timeout=60)
    out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, out


def bridge_plugin(lab, version: str = "1.1.0", **keys) -> dict:
    conf = {"cniVersion": version, "name": "health", "type": "bridge", "bridge": "cnih0", "isGateway": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.78.0.0/24"}]], "dataDir": lab.path("ipam")}}
    conf.update(keys)
    return conf


def test_read_only_ipam_store_fails_status_with_code_50(lab, plugin_dir, private_mounts):
    conf = bridge_plugin(lab)
    store = os.path.join(lab.path("ipam"), "health")
    os.makedirs(store)
    bridge, host_local = os.path.join(plugin_dir, "bridge"), os.path.join(plugin_dir, "host-local")
    assert exec_in(private_mounts, lab.node, bridge, "STATUS", conf, plugin_dir) == (0, {})
    for argv in (["mount", "--bind", store, store], ["mount", "-o", "remount,bind,ro", store]):
        subprocess.run(["nsenter", "-t", str(private_mounts), "-m", "--", *argv], check=True, timeout=30)

    code, out = exec_in(private_mounts, lab.node, bridge, "STATUS", conf, plugin_dir)
    assert code == 1 and out["code"] == Code.NOT_AVAILABLE, out
    assert out["msg"] == (f"host-local: cannot store IP reservations: {store} is not writable (Read-only file system); "
                          "make the directory writable by root, or point ipam.dataDir at a writable one")
    # the fault class is real: every ADD fails there too
    ipam_conf = {"cniVersion": "1.1.0", "name": "health", "ipam": conf["ipam"]}
    code, out = exec_in(private_mounts, lab.node, host_local, "ADD", ipam_conf, plugin_dir, cid="c1")
    assert code == 1 and "read-only file system" in out["msg"].lower(), out
    # outside that mount namespace the same directory is fine
    assert exec_in(os.getpid(), lab.node, bridge, "STATUS", conf, plugin_dir) == (0, {})
    assert os.listdir(store) == []  # the probes left nothing


def test_uncreatable_ipam_store_fails_status(lab, plugin_dir):
    blocker = lab.path("not-a-dir")
    with open(blocker, "w") as fh:
        fh.write("x")
    conf = bridge_plugin(lab)
    conf["ipam"]["dataDir"] = os.path.join(blocker, "ipam")
    code, out = exec_in(os.getpid(), lab.node, os.path.join(plugin_dir, "bridge"), "STATUS", conf, plugin_dir)
    assert code == 1 and out["code"] == Code.NOT_AVAILABLE and f"{blocker} is not a directory" in out["msg"], out


def test_missing_ipam_plugin_fails_status(lab, plugin_dir):
    empty = lab.path("empty-bin")
    os.makedirs(empty)
    code, out = exec_in(os.getpid(), lab.node, os.path.join(plugin_dir, "bridge"), "STATUS", bridge_plugin(lab), empty)
    assert code == 1 and out["code"] == Code.NOT_AVAILABLE, out
    assert out["msg"].startswith('bridge: failed to find plugin "host-local" in path ') and empty in out["msg"]
    assert 'install "host-local" into one of the runtime\'s CNI bin directories' in out["msg"]


def test_status_never_fails_on_keys_it_does_not_need(lab, plugin_dir):
    """An ADD-refused config (bad mtu, vlan out of range, bad portmap backend) passes STATUS."""
    conf = bridge_plugin(lab, mtu="big", vlan=99999, ipMasq=True)
    assert exec_in(os.getpid(), lab.node, os.path.join(plugin_dir, "bridge"), "STATUS", conf, plugin_dir) == (0, {})
    portmap = {"cniVersion": "1.1.0", "name": "health", "type": "portmap", "backend": "bogus", "markMasqBit": 77}
    assert exec_in(os.getpid(), lab.node, os.path.join(plugin_dir, "portmap"), "STATUS", portmap, plugin_dir) == (0, {})
