"""NetworkReady under a runtime that polls CRI Status, and config delivery it can see.

containerd 2.1+ runs CNI STATUS on every plugin of the chain on every CRI Status call (the
kubelet polls about every 5 s) and reports NetworkReady=false on any failure: the node goes
NotReady and its pods are evicted.  A poller thread here calls Status (verbose off, as the
kubelet does) back to back while the node goes through pod churn, a /29 range filled until
RunPodSandbox fails with host-local's exhaustion error, and the node agent stopped, restarted and
killed with SIGKILL at arbitrary moments (the shims must then answer cold, bounded).  NetworkReady
must be true on every poll.  On 1.6 and 1.7 (no STATUS exec) the same sequence must hold too; on
2.1 the agent's counters prove that containerd really ran STATUS through our chain.

The second case rewrites the conflist with ``cnichain install`` while containerd runs: the
installer writes a temporary file inside the conf dir and renames it, the only way containerd's
watcher (which ignores Create events) reloads; verbose Status must then show the new chain.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
import time
from contextlib import ExitStack
from types import ModuleType
from typing import Iterator, Optional

import grpc
import pytest

from cnichain.agent.control import RunningAgent, running_agent

from . import leftovers
from .conftest import CriNode
from .containerd import LOG_NAME, Release, log_tail, start_with_cri
from .cri_client import CriClient, PodSpec
from .statuspoll import Poller
from .node import CONFLIST, Node, cnichain_cli

pytestmark = [pytest.mark.runtime, pytest.mark.integration]

SUBNET = "10.22.0.0/29"  # gateway .1, pod addresses .2-.6 (route-override routes via .1)
POD_ADDRESSES = 5
_STATUS_SAMPLE = re.compile(r'^cnichain_agent_requests_total\{plugin="([^"]+)",command="STATUS",outcome="ok"\} (\d+)$',
                            re.M)


def status_requests(agent: RunningAgent) -> dict[str, int]:
    """plugin -> STATUS requests the agent served successfully."""
    return {p: int(n) for p, n in _STATUS_SAMPLE.findall(agent.metrics())}


def narrow_range(node: Node, subnet: str) -> None:
    """The node's conflist copy with a small range (before the runtime starts)."""
    with open(node.conflist_path) as fh:
        conflist = json.load(fh)
    conflist["plugins"][0]["ipam"]["ranges"] = [[{"subnet": subnet}]]
    with open(node.conflist_path, "w") as fh:
        json.dump(conflist, fh, indent=2)


@pytest.fixture
def agent_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="cnirt-agent-")
    os.chmod(path, 0o700)
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False, timeout=60)


def test_network_ready_through_churn_full_range_and_agent_restarts(
        containerd_release: Release, agent_dir: str, cri_api: tuple[ModuleType, ModuleType],
        image_archive: tuple[str, str]) -> None:
    archive, image = image_archive
    socket_path = os.path.join(agent_dir, "agent.sock")
    node = Node(agent_socket=socket_path)
    cri: Optional[CriClient] = None
    rng = random.Random(19)
    with ExitStack() as stack:
        stack.callback(node.close)
        try:
            narrow_range(node, SUBNET)
            agent = stack.enter_context(running_agent(socket_path, args=("--pool", "2")))
            containerd, cri = start_with_cri(containerd_release, node, cri_api, archive, image, node.bin_dir,
                                             node.conf_dir)
            stack.callback(cri.close)
            with Poller(cri) as poller:
                # (a) churn
                for i in range(3):
                    pod = cri.run_pod(PodSpec(name=f"churn{i}"))
                    cri.stop_pod(pod.id)
                    cri.remove_pod(pod.id)
                poller.wait_polls(5)
                # (b) a full range: the next pod fails with the exhaustion error, nothing else
                pods = [cri.run_pod(PodSpec(name=f"fill{i}")) for i in range(POD_ADDRESSES)]
                with pytest.raises(grpc.RpcError) as info:
                    cri.run_pod(PodSpec(name="one-too-many"))
                assert "no IP addresses available in range set" in str(info.value.details()), info.value
                view = json.loads(node.node_run(*cnichain_cli(), "inspect", "--json", "--cache-dir",
                                                os.path.dirname(leftovers.LIBCNI_CACHE_DIR)).stdout)
                assert [(p["range_set"], p["free"]) for p in view["pools"]] == [("10.22.0.1-10.22.0.6", 0)], view
                poller.wait_polls(10)
                if containerd_release.runs_status:
                    served = status_requests(agent)
                    # containerd ran STATUS on every plugin of the chain, warm; bridge's host-local
                    # STATUS runs inside bridge's worker (agent/delegates.py): no request of its own
                    assert {"bridge", "portmap", "bandwidth", "tuning", "route-override"} <= set(served), served
                # (c) the agent stopped (drained), started again, then killed at random moments
                agent.stop()
                poller.wait_polls(5)
                for _ in range(3):
                    with running_agent(socket_path, args=("--pool", "2")) as again:
                        poller.wait_polls(2)
                        time.sleep(rng.uniform(0.0, 0.3))
                        again.kill()
                    poller.wait_polls(3)
                for pod in pods:
                    cri.stop_pod(pod.id)
                    cri.remove_pod(pod.id)
                pod = cri.run_pod(PodSpec(name="after"))  # a freed address is usable again, cold
                cri.stop_pod(pod.id)
                cri.remove_pod(pod.id)
                poller.wait_polls(3)
            print(f"{containerd_release.label}: {poller.polls} Status polls, not ready: {poller.not_ready}")
            assert poller.not_ready == [], poller.not_ready
            assert leftovers.everything(node.node_run) == []
        except BaseException:
            print(f"containerd log tail:\n{log_tail(os.path.join(node.workdir, LOG_NAME))}")
            raise


def _loaded_chain(cri: CriClient) -> Optional[dict]:
    """The conflist (raw JSON) containerd's CRI loaded for its default network, from verbose Status."""
    networks = (cri.status_info().get("cniconfig") or {}).get("Networks") or []
    for net in networks:
        if net.get("IFName") == "eth0":
            return json.loads(net["Config"]["Source"])
    return None


def probe(cri_node: CriNode, conflist: str, ok: bool = True) -> str:
    """``cnichain node probe`` against this runtime only (no agent): its output (stderr when failing)."""
    proc = subprocess.run([*cnichain_cli(), "node", "probe", "--socket", "", "--runtime-endpoint",
                           cri_node.containerd.socket, "--conflist", conflist], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    return proc.stdout if ok else proc.stderr


def test_conflist_rewritten_by_the_installer_is_loaded_by_the_running_runtime(
        cri_node: CriNode, tmp_path) -> None:
    node, cri = cri_node.node, cri_node.cri
    assert _loaded_chain(cri) is not None
    with open(node.conflist_path) as fh:
        conflist = json.load(fh)
    conflist["plugins"] = [p for p in conflist["plugins"] if p["type"] != "tuning"]  # a visibly different chain
    source = tmp_path / f"{CONFLIST}.conflist"
    source.write_text(json.dumps(conflist, indent=2))
    assert "not the current bytes of" in probe(cri_node, str(source), ok=False)  # not loaded (yet)
    # --force: the matrix rewrote the installed copy's cniVersion, so it no longer matches the manifest
    proc = subprocess.run([*cnichain_cli(), "install", "--bin-dir", node.bin_dir, "--conf-dir", node.conf_dir,
                           "--conflist", str(source), "--force"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CNICHAIN_AGENT_SOCKET=""))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    deadline = time.monotonic() + 30
    loaded = _loaded_chain(cri)
    while time.monotonic() < deadline:  # bounded: until the runtime's watcher reloaded
        loaded = _loaded_chain(cri)
        if loaded is not None and [p["type"] for p in loaded["plugins"]] == [p["type"] for p in conflist["plugins"]]:
            break
        time.sleep(0.1)
    assert loaded == conflist, loaded
    assert cri.status()[0]
    assert "NetworkReady, network cnichain (" in probe(cri_node, node.conflist_path)
    assert [n for n in os.listdir(node.conf_dir) if not n.endswith(".conflist")] == []  # no temp file left
    pod = cri.run_pod(PodSpec(name="reloaded"))
    assert not leftovers.files_in(node.node_run, leftovers.TUNING_DIR)  # tuning is out of the chain now
    cri.stop_pod(pod.id)
    cri.remove_pod(pod.id)
