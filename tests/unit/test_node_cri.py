"""The hand-written CRI encoding (Status, ListPodSandbox) against stubs generated from the CRI's api.proto, and a real gRPC server."""

from __future__ import annotations

import json

import pytest

from cnichain.podstate import cri


@pytest.fixture(scope="module")
def pb2(tmp_path_factory):
    from tests.runtime import cri_stubs  # grpcio-tools: a test extra ./run installs; missing fails

    return cri_stubs.generate(str(tmp_path_factory.mktemp("cri-stubs")))[0]


@pytest.mark.parametrize("verbose", [True, False])
def test_status_request_bytes_match_protobuf(pb2, verbose):
    assert cri.status_request(verbose) == pb2.StatusRequest(verbose=verbose).SerializeToString()


def test_status_response_is_decoded(pb2):
    net = {"Name": "cnichain", "CNIVersion": "1.1.0", "Source": '{"x": "ü"}', "Plugins": [{"Network": {"type": "bridge"}}]}
    info = {"cniconfig": json.dumps({"Networks": [{"IFName": "lo", "Config": {"Name": "cni-loopback"}},
                                                  {"IFName": "eth0", "Config": net}]}),
            "lastCNILoadStatus": "OK", "big": "y" * 70000}
    resp = pb2.StatusResponse(status=pb2.RuntimeStatus(conditions=[
        pb2.RuntimeCondition(type="RuntimeReady", status=True),
        pb2.RuntimeCondition(type="NetworkReady", status=False, reason="NetworkPluginNotReady", message="boom"),
    ]), info=info)
    status = cri.parse_status_response(resp.SerializeToString())
    assert status.network_ready() == cri.Condition("NetworkReady", False, "NetworkPluginNotReady", "boom")
    assert status.conditions["RuntimeReady"].status is True
    assert status.info == info
    assert status.pod_network() == net


def test_missing_condition_and_bad_info_are_not_ready():
    status = cri.parse_status_response(b"")
    assert not status.network_ready().status and status.pod_network() is None
    assert cri.RuntimeStatus(info={"cniconfig": "not json"}).loaded_networks() == []


def test_truncated_protobuf_is_an_error():
    with pytest.raises(cri.CriError):
        cri.parse_status_response(b"\x0a\x05ab")


def test_unreachable_runtime_is_an_error(tmp_path):
    with pytest.raises(cri.CriError, match="CRI Status on"):
        cri.runtime_status(str(tmp_path / "none.sock"), timeout=1.0)


def test_list_pod_sandbox_request_bytes_match_protobuf(pb2):
    assert cri.list_pod_sandbox_request() == pb2.ListPodSandboxRequest().SerializeToString()


def test_list_pod_sandbox_response_is_decoded(pb2):
    meta = pb2.PodSandboxMetadata(name="web", uid="u-1", namespace="default", attempt=2)
    resp = pb2.ListPodSandboxResponse(items=[
        pb2.PodSandbox(id="a" * 64, metadata=meta, state=pb2.SANDBOX_READY, created_at=1 << 62,
                       labels={"app": "web"}, annotations={"x": "ü" * 200}, runtime_handler="runc"),
        pb2.PodSandbox(id="b" * 64, state=pb2.SANDBOX_NOTREADY),
    ])
    assert cri.parse_list_pod_sandbox_response(resp.SerializeToString()) == [
        cri.Sandbox("a" * 64, cri.SANDBOX_READY), cri.Sandbox("b" * 64, cri.SANDBOX_NOTREADY)]
    assert (cri.SANDBOX_READY, cri.SANDBOX_NOTREADY) == (pb2.SANDBOX_READY, pb2.SANDBOX_NOTREADY)
    assert cri.parse_list_pod_sandbox_response(pb2.ListPodSandboxResponse().SerializeToString()) == []


@pytest.fixture
def grpc_runtime(tmp_path):
    """A real gRPC server (grpcio) on a unix socket answering ListPodSandbox with what a test sets."""
    import grpc  # a test extra ./run installs
    from concurrent import futures

    answer: dict = {}

    def list_pod_sandbox(request: bytes, context) -> bytes:
        if "abort" in answer:
            context.abort(*answer["abort"])
        return answer["reply"]

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("runtime.v1.RuntimeService", {
        "ListPodSandbox": grpc.unary_unary_rpc_method_handler(list_pod_sandbox)}),))
    path = str(tmp_path / "grpc.sock")
    server.add_insecure_port(f"unix://{path}")
    server.start()
    try:
        yield grpc, path, answer
    finally:
        server.stop(grace=None)


def test_a_real_grpc_server_is_listed_and_its_error_status_is_an_error(pb2, grpc_runtime):
    from cnichain.podstate.sandboxes import CriSandboxes

    grpc, path, answer = grpc_runtime
    answer["reply"] = pb2.ListPodSandboxResponse(items=[pb2.PodSandbox(id="abc", state=pb2.SANDBOX_NOTREADY)]).SerializeToString()
    assert CriSandboxes(path, lambda _: None).listed() == {"abc"}
    answer["reply"] = b""
    assert CriSandboxes(path, lambda _: None).listed() == set()  # a real empty answer
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.DEADLINE_EXCEEDED):
        answer["abort"] = (code, "runtime not ready")
        with pytest.raises(cri.CriError, match="trailers-only"):
            cri.list_pod_sandboxes(path, timeout=5.0)
        assert CriSandboxes(path, lambda _: None).listed() is None
