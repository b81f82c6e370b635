"""The CRI pod calls of a kubelet, hand-encoded: RunPodSandbox, StopPodSandbox, RemovePodSandbox.

The kubelet turns a pod spec into ``RunPodSandbox``, and containerd's CRI plugin turns its
``port_mappings`` and ``kubernetes.io/*-bandwidth`` annotations into CNI capability args, so a pod
described here goes through exactly the path a real node's pods take.  The message carries what
the kubelet sends that matters to a sandbox: metadata, hostname, log directory, DNS config, port
mappings, labels and annotations, the Linux cgroup parent and namespace options.

No gRPC or protobuf library is needed (the bench runs where only the plugins' stack is
installed): the transport is :mod:`cnichain.podstate.grpc_unary`, readiness is
:func:`cnichain.podstate.cri.runtime_status`, and the few messages are encoded here (field numbers
from the CRI's api.proto; ``tests/unit/test_cri_pods.py`` checks them against stubs generated
from it).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field

from cnichain.podstate import grpc_unary
from cnichain.podstate.cri import CriError, fields, runtime_status

SERVICE = b"/runtime.v1.RuntimeService/"
IMAGE_STATUS = b"/runtime.v1.ImageService/ImageStatus"
CALL_TIMEOUT = 120.0  # the kubelet's default runtime-request timeout is 2 minutes
PROTOCOLS = {"TCP": 0, "UDP": 1, "SCTP": 2}  # runtime.v1 Protocol
NS_POD, NS_CONTAINER = 0, 1  # runtime.v1 NamespaceMode


@dataclass
class Port:
    """One hostPort of a pod spec (``host_ip`` empty = every node address)."""

    container_port: int
    host_port: int
    protocol: str = "TCP"
    host_ip: str = ""


@dataclass
class Pod:
    """The parts of a pod spec the kubelet passes to RunPodSandbox that matter to CNI."""

    name: str
    namespace: str = "default"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    ports: list[Port] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


# -- protobuf encoding (proto3: default values are left out, as every serializer does) -----------

def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # negative int32/int64 go out as ten-byte varints
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _bytes(number: int, value: bytes, keep_empty: bool = False) -> bytes:
    if not value and not keep_empty:
        return b""
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _str(number: int, value: str) -> bytes:
    return _bytes(number, value.encode())


def _map(number: int, entries: dict[str, str]) -> bytes:
    return b"".join(_bytes(number, _str(1, k) + _str(2, v), keep_empty=True) for k, v in sorted(entries.items()))


def pod_labels(pod: Pod) -> dict[str, str]:
    return {"io.kubernetes.pod.name": pod.name, "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid}


def pod_annotations(pod: Pod) -> dict[str, str]:
    return {"kubernetes.io/config.source": "api", "kubernetes.io/config.seen": "2026-01-01T00:00:00Z",
            **pod.annotations}


def sandbox_config(pod: Pod, cgroup_parent: str, log_root: str) -> bytes:
    """The ``PodSandboxConfig`` the kubelet would send for ``pod``."""
    metadata = _str(1, pod.name) + _str(2, pod.uid) + _str(3, pod.namespace)
    dns = (_str(1, "10.96.0.10") + b"".join(_str(2, s) for s in (f"{pod.namespace}.svc.cluster.local",
                                                                    "svc.cluster.local", "cluster.local"))
           + _str(3, "ndots:5"))
    ports = b"".join(_bytes(5, _int(1, PROTOCOLS[p.protocol.upper()]) + _int(2, p.container_port)
                            + _int(3, p.host_port) + _str(4, p.host_ip), keep_empty=True) for p in pod.ports)
    namespaces = _int(1, NS_POD) + _int(2, NS_CONTAINER) + _int(3, NS_POD)
    linux = _str(1, f"{cgroup_parent}/pod{pod.uid}") + _bytes(2, _bytes(1, namespaces, keep_empty=True),
                                                               keep_empty=True)
    return (_bytes(1, metadata) + _str(2, pod.name) + _str(3, log_directory(pod, log_root)) + _bytes(4, dns)
            + ports + _map(6, pod_labels(pod)) + _map(7, pod_annotations(pod)) + _bytes(8, linux))


def log_directory(pod: Pod, log_root: str) -> str:
    return os.path.join(log_root, f"{pod.namespace}_{pod.name}_{pod.uid}")


def run_pod_sandbox_request(pod: Pod, cgroup_parent: str, log_root: str) -> bytes:
    """``RunPodSandboxRequest{PodSandboxConfig config = 1}`` (the default runtime handler)."""
    return _bytes(1, sandbox_config(pod, cgroup_parent, log_root), keep_empty=True)


def sandbox_id_request(sandbox_id: str) -> bytes:
    """``StopPodSandboxRequest`` / ``RemovePodSandboxRequest``: ``pod_sandbox_id = 1``."""
    return _str(1, sandbox_id)


def image_status_request(image: str) -> bytes:
    """``ImageStatusRequest{ImageSpec image = 1 {string image = 1}}``."""
    return _bytes(1, _str(1, image), keep_empty=True)


def _first_string(buf: bytes, number: int) -> str:
    for n, value in fields(buf):
        if n == number and isinstance(value, bytes):
            return value.decode("utf-8", "replace")
    return ""


def parse_image_id(buf: bytes) -> str:
    """``ImageStatusResponse{Image image = 1 {string id = 1}}``: the id, "" when the image is unknown."""
    for n, value in fields(buf):
        if n == 1 and isinstance(value, bytes):
            return _first_string(value, 1)
    return ""


# -- the calls -----------------------------------------------------------------------------------

class CriPods:
    """The kubelet's pod calls against one runtime socket; every call bounded."""

    def __init__(self, socket_path: str, cgroup_parent: str, log_root: str) -> None:
        self.socket = socket_path
        self.cgroup_parent = cgroup_parent
        self.log_root = log_root

    def _call(self, method: bytes, request: bytes, timeout: float = CALL_TIMEOUT) -> bytes:
        try:
            return grpc_unary.call(self.socket, method, request, timeout)
        except grpc_unary.GrpcError as exc:
            raise CriError(f"CRI {method.rsplit(b'/', 1)[-1].decode()}: {exc}") from None

    def run_pod(self, pod: Pod) -> str:
        """RunPodSandbox: the sandbox id once the pod's network is up."""
        os.makedirs(log_directory(pod, self.log_root), mode=0o700, exist_ok=True)
        answer = self._call(SERVICE + b"RunPodSandbox", run_pod_sandbox_request(pod, self.cgroup_parent, self.log_root))
        sandbox_id = _first_string(answer, 1)
        if not sandbox_id:
            raise CriError("CRI RunPodSandbox answered without a sandbox id")
        return sandbox_id

    def stop_pod(self, sandbox_id: str) -> None:
        self._call(SERVICE + b"StopPodSandbox", sandbox_id_request(sandbox_id))

    def remove_pod(self, sandbox_id: str) -> None:
        self._call(SERVICE + b"RemovePodSandbox", sandbox_id_request(sandbox_id))

    def image_known(self, image: str) -> bool:
        return bool(parse_image_id(self._call(IMAGE_STATUS, image_status_request(image), timeout=10)))

    def wait_ready(self, image: str, timeout: float = 60.0) -> None:
        """Wait (bounded) until the CRI knows ``image`` and reports RuntimeReady and NetworkReady."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                status = runtime_status(self.socket, verbose=False, timeout=5)
                conditions = {t: c.status for t, c in status.conditions.items()}
                last = f"conditions {conditions}"
                if conditions.get("RuntimeReady") and conditions.get("NetworkReady") and self.image_known(image):
                    return
                last += f", image {image} known: {self.image_known(image)}"
            except CriError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise CriError(f"CRI runtime not ready after {timeout:.0f}s: {last}")
