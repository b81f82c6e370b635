"""State no result-cache entry names, in lab namespaces: collected only when the runtime answers and
does not list its container; a listed pod's state never, whatever its cache says.

The reconciler lab node (bridge with ipMasq, host-local, portmap, bandwidth through the runner).
Three pods: ``cached`` keeps its cache entry, ``kept`` and ``lost`` lose theirs (a wiped cache).
The runtime listing is a real gRPC server on a unix socket (grpcio, the CRI's ``ListPodSandbox``
from stubs generated from the CRI's api.proto) that lists ``cached`` and ``kept``: ``lost`` is
the only leak.  While it answers with an error status nothing is collected; once it answers,
``lost``'s reservation, portmap chains, IFB and masquerade rule go, through each plugin's own
code, and ``kept`` keeps everything and still answers on its hostPort.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent import futures
from typing import Iterator

import pytest

from cnichain.plugins.bandwidth.config import ifb_name
from tests.runtime import leftovers
from tests.integration.reconciler_node import Node, masquerade_rules
from tests.polling import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def node(lab, make_runtime) -> Iterator[Node]:
    with Node(lab, make_runtime) as n:
        yield n


@pytest.fixture
def cri(lab, tmp_path):
    """A gRPC server answering ListPodSandbox with the sandboxes a test sets, or an error status."""
    import grpc

    from tests.runtime import cri_stubs

    pb2, _grpc = cri_stubs.generate(str(tmp_path / "stubs"))
    state: dict = {"ids": [], "abort": True}

    def list_pod_sandbox(_request: bytes, context) -> bytes:
        if state["abort"]:
            context.abort(grpc.StatusCode.UNAVAILABLE, "runtime not ready")
        return pb2.ListPodSandboxResponse(items=[pb2.PodSandbox(id=i, state=pb2.SANDBOX_READY)
                                                 for i in state["ids"]]).SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {
        "ListPodSandbox": grpc.unary_unary_rpc_method_handler(list_pod_sandbox)}),))
    path = lab.path("cri", "cri.sock")
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield path, state
    finally:
        server.stop(grace=None)


def held(node: Node, lab, cid: str) -> list[str]:
    """What ``cid`` holds: its reservations, portmap entries, IFB, masquerade rules."""
    ipam = os.path.join(lab.workdir, "ipam", node.conf.name)
    out = []
    for name in os.listdir(ipam) if os.path.isdir(ipam) else []:
        if name[0].isdigit():
            with open(os.path.join(ipam, name)) as fh:
                if fh.read().split()[0] == cid:
                    out.append(f"reservation {name}")
    if leftovers.portmap_held(lambda *argv, **kw: lab.run(lab.node, *argv, **kw), node.conf.name, cid):
        out.append("portmap")
    if ifb_name(node.conf.name, cid) in lab.run(lab.node, "ip", "-o", "link", "show", "type", "ifb").stdout:
        out.append("ifb")
    if cid in masquerade_rules(lab):
        out.append("masquerade")
    return out


def metric(agent, name: str) -> str:
    return next((line.split()[1] for line in agent.metrics().splitlines() if line.startswith(name + " ")), "")


def test_uncached_state_is_collected_only_for_a_container_the_runtime_answered_it_does_not_list(node, lab, cri):
    path, state = cri
    pods = {role: node.pod(role, port) for role, port in (("cached", 8101), ("kept", 8102), ("lost", 8103))}
    for role in ("kept", "lost"):  # the cache is wiped for these two; their pods live on
        os.unlink(os.path.join(node.cache_root, "results", f"{node.conf.name}-ctr-{role}-eth0"))
    before = held(node, lab, "ctr-lost")
    assert len(before) == 4, before  # a reservation, the portmap entries, the IFB, the masquerade rule
    state["ids"] = ["ctr-cached", "ctr-kept"]
    with node.agent("--runtime-endpoint", path, "--sweep-interval", "0.5", "--grace", "1") as agent:
        # An error status: cannot tell, so nothing is a leak, however long past the grace period.
        wait_for("sweeps past the grace period", lambda: int(metric(agent, "cnichain_agent_reconcile_sweeps_total")
                                                              or 0) >= 8, timeout=60)
        assert metric(agent, "cnichain_agent_reconcile_uncached_found_total") == "0"
        assert held(node, lab, "ctr-lost") == before
        state["abort"] = False
        plan = subprocess.run([sys.executable, "-m", "cnichain.cli.app", "gc",
                               "--runtime-endpoint", path, "--cache-dir", node.cache_root, "--node-netns", lab.node,
                               "--ipam-dir", os.path.join(lab.workdir, "ipam")],
                              capture_output=True, text=True, timeout=120).stdout
        assert f"would collect {node.conf.name}/ctr-lost" in plan and "collect rcnet/ctr-kept" not in plan
        wait_for("the lost pod's state to be collected", lambda: held(node, lab, "ctr-lost") == [], timeout=60)
        wait_for("the collection to be counted",
                 lambda: metric(agent, "cnichain_agent_reconcile_uncached_collected_total") == "1")
        assert metric(agent, "cnichain_agent_reconcile_uncached_found_total") == "1"
        assert len(held(node, lab, "ctr-kept")) == 4 and len(held(node, lab, "ctr-cached")) == 4
        assert node.fetch(8102) == "kept" and node.fetch(8101) == "cached"
    for role, (_ns, att, _result) in pods.items():
        node.runtime.delete(node.conf, att)  # DEL by ID still works without the cache entry
        assert held(node, lab, f"ctr-{role}") == []
