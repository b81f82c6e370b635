"""The hand-encoded CRI pod calls (tools/containerd_node/cri_pods.py) against stubs generated from the CRI's api.proto."""

from __future__ import annotations

import pytest

from cnichain.tools.containerd_node import cri_pods


@pytest.fixture(scope="module")
def pb2(tmp_path_factory):
    from tests.runtime import cri_stubs  # grpcio-tools: a test extra ./run installs; missing fails

    return cri_stubs.generate(str(tmp_path_factory.mktemp("cri-stubs")))[0]


def _pod() -> cri_pods.Pod:
    return cri_pods.Pod(name="web-0", namespace="bench", uid="0b4d6c2e-1111-2222-3333-444455556666",
                        ports=[cri_pods.Port(80, 30080), cri_pods.Port(53, 30053, "udp", "203.0.113.1")],
                        annotations={"kubernetes.io/ingress-bandwidth": "100M", "kubernetes.io/egress-bandwidth": "10M"})


def test_run_pod_sandbox_request_is_what_the_kubelet_sends(pb2):
    pod = _pod()
    request = pb2.RunPodSandboxRequest.FromString(cri_pods.run_pod_sandbox_request(pod, "/cnib-x", "/logs"))
    config = request.config
    assert (config.metadata.name, config.metadata.uid, config.metadata.namespace, config.metadata.attempt) == (
        "web-0", pod.uid, "bench", 0)
    assert config.hostname == "web-0" and config.log_directory == f"/logs/bench_web-0_{pod.uid}"
    assert list(config.dns_config.servers) == ["10.96.0.10"] and list(config.dns_config.options) == ["ndots:5"]
    assert list(config.dns_config.searches) == ["bench.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert [(p.protocol, p.container_port, p.host_port, p.host_ip) for p in config.port_mappings] == [
        (pb2.TCP, 80, 30080, ""), (pb2.UDP, 53, 30053, "203.0.113.1")]
    assert dict(config.labels) == {"io.kubernetes.pod.name": "web-0", "io.kubernetes.pod.namespace": "bench",
                                   "io.kubernetes.pod.uid": pod.uid}
    assert config.annotations["kubernetes.io/ingress-bandwidth"] == "100M"
    assert config.annotations["kubernetes.io/config.source"] == "api"
    assert config.linux.cgroup_parent == f"/cnib-x/pod{pod.uid}"
    ns = config.linux.security_context.namespace_options
    assert (ns.network, ns.pid, ns.ipc) == (pb2.POD, pb2.CONTAINER, pb2.POD)
    # nothing protobuf could not place: re-encoding what it parsed gives as many bytes as were sent
    assert len(request.SerializeToString()) == len(cri_pods.run_pod_sandbox_request(pod, "/cnib-x", "/logs"))


def test_stop_remove_and_image_status_requests(pb2):
    assert cri_pods.sandbox_id_request("abc") == pb2.StopPodSandboxRequest(pod_sandbox_id="abc").SerializeToString()
    assert cri_pods.sandbox_id_request("abc") == pb2.RemovePodSandboxRequest(pod_sandbox_id="abc").SerializeToString()
    assert cri_pods.image_status_request("img:1") == pb2.ImageStatusRequest(
        image=pb2.ImageSpec(image="img:1")).SerializeToString()


def test_image_status_response_is_decoded(pb2):
    known = pb2.ImageStatusResponse(image=pb2.Image(id="sha256:beef", repo_tags=["img:1"], size=5))
    assert cri_pods.parse_image_id(known.SerializeToString()) == "sha256:beef"
    assert cri_pods.parse_image_id(pb2.ImageStatusResponse().SerializeToString()) == ""


def test_a_pod_without_ports_or_annotations_has_no_mappings(pb2):
    pod = cri_pods.Pod(name="plain")
    config = pb2.RunPodSandboxRequest.FromString(cri_pods.run_pod_sandbox_request(pod, "/p", "/l")).config
    assert list(config.port_mappings) == [] and "kubernetes.io/ingress-bandwidth" not in config.annotations
