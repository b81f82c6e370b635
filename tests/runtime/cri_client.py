"""A small CRI (runtime.v1) client over gRPC, describing pods the way the kubelet does.

The kubelet is what turns a pod spec into ``RunPodSandbox``; containerd's CRI plugin then turns
``port_mappings`` and the ``kubernetes.io/*-bandwidth`` annotations into CNI capability args.
To test our plugins behind exactly that path, this client builds the same messages the kubelet
builds (metadata, hostname, log directory, DNS config, port mappings, labels and annotations, Linux
cgroup parent and namespace options) and calls the runtime and image services directly.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional

import grpc

# The pod spec records are the shared CRI client's (the bench times pods with them too).
from cnichain.tools.containerd_node.cri_pods import CALL_TIMEOUT
from cnichain.tools.containerd_node.cri_pods import Pod as PodSpec
from cnichain.tools.containerd_node.cri_pods import Port as Port


@dataclass
class Sandbox:
    """A running pod sandbox as the tests need it: its id, IP, pause pid and netns path."""

    id: str
    spec: PodSpec
    config: Any
    ip: str
    pid: int
    netns: str


class CriClient:
    """Runtime and image service calls against one containerd socket."""

    def __init__(self, pb2: ModuleType, pb2_grpc: ModuleType, socket_path: str, cgroup_parent: str, log_root: str):
        self.pb = pb2
        self.channel = grpc.insecure_channel(f"unix://{socket_path}")
        self.runtime = pb2_grpc.RuntimeServiceStub(self.channel)
        self.images = pb2_grpc.ImageServiceStub(self.channel)
        self.cgroup_parent = cgroup_parent
        self.log_root = log_root

    def close(self) -> None:
        self.channel.close()

    # -- readiness -----------------------------------------------------------------------------
    def version(self) -> Any:
        return self.runtime.Version(self.pb.VersionRequest(version="v1"), timeout=10)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait (bounded) until the runtime answers and reports RuntimeReady and NetworkReady."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                status = self.runtime.Status(self.pb.StatusRequest(), timeout=5)
                conditions = {c.type: c for c in status.status.conditions}
                last = {t: (c.status, c.reason, c.message) for t, c in conditions.items()}
                if all(conditions.get(t) and conditions[t].status for t in ("RuntimeReady", "NetworkReady")):
                    return
            except grpc.RpcError as exc:
                last = exc
            time.sleep(0.1)
        raise RuntimeError(f"CRI runtime not ready after {timeout:.0f}s: {last}")

    def status(self, timeout: float = 10.0) -> tuple[bool, str, str]:
        """``(status, reason, message)`` of the NetworkReady condition, from a non-verbose Status
        (what the kubelet polls about every 5 s; containerd 2.1+ runs CNI STATUS for it)."""
        resp = self.runtime.Status(self.pb.StatusRequest(verbose=False), timeout=timeout)
        for cond in resp.status.conditions:
            if cond.type == "NetworkReady":
                return bool(cond.status), cond.reason, cond.message
        return False, "NoCondition", "the runtime reported no NetworkReady condition"

    def status_info(self, timeout: float = 10.0) -> dict[str, Any]:
        """The verbose Status ``info`` map, each JSON value decoded (containerd: ``cniconfig``,
        ``lastCNILoadStatus``, ...)."""
        resp = self.runtime.Status(self.pb.StatusRequest(verbose=True), timeout=timeout)
        info: dict[str, Any] = {}
        for key, value in resp.info.items():
            try:
                info[key] = json.loads(value)
            except ValueError:
                info[key] = value
        return info

    def wait_image(self, image: str, timeout: float = 30.0) -> None:
        """Wait (bounded) until the CRI image store knows ``image`` (imports arrive as events)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            resp = self.images.ImageStatus(
                self.pb.ImageStatusRequest(image=self.pb.ImageSpec(image=image)), timeout=10)
            if resp.image.id:
                return
            time.sleep(0.1)
        raise RuntimeError(f"image {image} unknown to the CRI after {timeout:.0f}s")

    # -- pods ----------------------------------------------------------------------------------
    def sandbox_config(self, spec: PodSpec) -> Any:
        """The PodSandboxConfig the kubelet would send for ``spec``."""
        pb = self.pb
        log_dir = os.path.join(self.log_root, f"{spec.namespace}_{spec.name}_{spec.uid}")
        os.makedirs(log_dir, exist_ok=True)
        protocols = {"TCP": pb.TCP, "UDP": pb.UDP, "SCTP": pb.SCTP}
        labels = {
            "io.kubernetes.pod.name": spec.name,
            "io.kubernetes.pod.namespace": spec.namespace,
            "io.kubernetes.pod.uid": spec.uid,
        }
        annotations = {"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z"}
        annotations.update(spec.annotations)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=spec.name, uid=spec.uid, namespace=spec.namespace, attempt=0),
            hostname=spec.name,
            log_directory=log_dir,
            dns_config=pb.DNSConfig(
                servers=["10.96.0.10"],
                searches=[f"{spec.namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local"],
                options=["ndots:5"],
            ),
            port_mappings=[
                pb.PortMapping(protocol=protocols[p.protocol.upper()], container_port=p.container_port,
                               host_port=p.host_port, host_ip=p.host_ip)
                for p in spec.ports
            ],
            labels=labels,
            annotations=annotations,
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=f"{self.cgroup_parent}/pod{spec.uid}",
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD),
                ),
            ),
        )

    def run_pod(self, spec: PodSpec) -> Sandbox:
        """RunPodSandbox, then read back the IP, the pause pid and the netns path."""
        config = self.sandbox_config(spec)
        resp = self.runtime.RunPodSandbox(self.pb.RunPodSandboxRequest(config=config), timeout=CALL_TIMEOUT)
        status, info = self.pod_status(resp.pod_sandbox_id)
        netns = ""
        for ns in info.get("runtimeSpec", {}).get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network":
                netns = ns.get("path", "")
        return Sandbox(id=resp.pod_sandbox_id, spec=spec, config=config, ip=status.network.ip,
                       pid=int(info.get("pid", 0)), netns=netns)

    def pod_status(self, pod_id: str) -> tuple[Any, dict]:
        """The sandbox status and containerd's verbose ``info`` (pid, runtime spec)."""
        resp = self.runtime.PodSandboxStatus(
            self.pb.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True), timeout=30)
        return resp.status, json.loads(resp.info.get("info", "{}"))

    def stop_pod(self, pod_id: str) -> None:
        self.runtime.StopPodSandbox(self.pb.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=CALL_TIMEOUT)

    def remove_pod(self, pod_id: str) -> None:
        self.runtime.RemovePodSandbox(self.pb.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=CALL_TIMEOUT)

    def list_pods(self) -> list[Any]:
        return list(self.runtime.ListPodSandbox(self.pb.ListPodSandboxRequest(), timeout=30).items)

    # -- containers ----------------------------------------------------------------------------
    def start_container(self, sandbox: Sandbox, name: str, image: str, command: list[str],
                        args: Optional[list[str]] = None) -> str:
        """CreateContainer + StartContainer in ``sandbox``, as the kubelet does; the container id."""
        pb = self.pb
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name, attempt=0),
            image=pb.ImageSpec(image=image),
            command=command,
            args=args or [],
            working_dir="/",
            log_path=f"{name}/0.log",
            labels={"io.kubernetes.container.name": name, "io.kubernetes.pod.uid": sandbox.spec.uid},
            linux=pb.LinuxContainerConfig(
                security_context=pb.LinuxContainerSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.POD, pid=pb.CONTAINER, ipc=pb.POD),
                ),
            ),
        )
        created = self.runtime.CreateContainer(
            pb.CreateContainerRequest(pod_sandbox_id=sandbox.id, config=config, sandbox_config=sandbox.config),
            timeout=CALL_TIMEOUT)
        self.runtime.StartContainer(pb.StartContainerRequest(container_id=created.container_id), timeout=CALL_TIMEOUT)
        return created.container_id

    def container_state(self, container_id: str) -> int:
        """The container's CRI state (CONTAINER_CREATED, _RUNNING, _EXITED, _UNKNOWN)."""
        request = self.pb.ContainerStatusRequest(container_id=container_id)
        return self.runtime.ContainerStatus(request, timeout=30).status.state
