"""The two CRI calls cnichain makes on the runtime's socket, with hand-encoded runtime.v1 messages.

* ``RuntimeService/Status`` (:func:`runtime_status`): which network config the runtime loaded and
  whether NetworkReady is true; ``cnichain node probe --runtime-endpoint SOCKET`` uses it, so a
  DaemonSet's readiness can mean "the runtime runs our chain", not only "our agent answers".
* ``RuntimeService/ListPodSandbox`` (:func:`list_pod_sandboxes`): which sandboxes the runtime
  still knows; the reconciler (:mod:`cnichain.podstate.sandboxes`) never collects those.

The image carries no gRPC or protobuf library (only the plugins' stack), and neither is needed:
the transport is :mod:`cnichain.podstate.grpc_unary` (one bounded unary call; a gRPC error status
is always an error, never an empty answer), and the messages are so small that they are encoded
here by hand (field numbers from the CRI's api.proto; ``tests/unit/test_node_cri.py`` checks them
against stubs generated from it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterator, Optional

from cnichain.podstate import grpc_unary

STATUS = b"/runtime.v1.RuntimeService/Status"
LIST_POD_SANDBOX = b"/runtime.v1.RuntimeService/ListPodSandbox"
SANDBOX_READY, SANDBOX_NOTREADY = 0, 1  # runtime.v1 PodSandboxState


class CriError(RuntimeError):
    """The runtime could not be asked, or did not answer the call with a well-formed message."""


@dataclass
class Condition:
    type: str = ""
    status: bool = False
    reason: str = ""
    message: str = ""


@dataclass
class RuntimeStatus:
    conditions: dict[str, Condition] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)  # verbose only; values are JSON texts (containerd)

    def network_ready(self) -> Condition:
        return self.conditions.get("NetworkReady") or Condition("NetworkReady", False, "NoCondition",
                                                                 "the runtime reported no NetworkReady condition")

    def loaded_networks(self) -> list[dict]:
        """containerd's ``cniconfig``: each loaded network's ``{"IFName", "Config": {"Name", "Source", ...}}``."""
        try:
            cniconfig = json.loads(self.info.get("cniconfig", "") or "{}")
        except ValueError:
            return []
        networks = cniconfig.get("Networks") if isinstance(cniconfig, dict) else None
        return [n for n in networks if isinstance(n, dict)] if isinstance(networks, list) else []

    def pod_network(self) -> Optional[dict]:
        """The network config behind the pods' ``eth0`` (containerd loads one, max_conf_num = 1)."""
        for net in self.loaded_networks():
            if net.get("IFName") == "eth0" and isinstance(net.get("Config"), dict):
                return net["Config"]
        return None


@dataclass(frozen=True)
class Sandbox:
    id: str
    state: int = SANDBOX_READY  # listed, ready or not: either way the runtime still owns it


# -- protobuf (the subset the two calls need) ----------------------------------------------------

def status_request(verbose: bool) -> bytes:
    """``StatusRequest{bool verbose = 1}``."""
    return b"\x08\x01" if verbose else b""


def fields(buf: bytes) -> Iterator[tuple[int, object]]:
    """(field number, int or bytes) of a protobuf message; fixed-width fields are skipped."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, value
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise CriError("truncated protobuf field")
            yield number, buf[pos:pos + length]
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > len(buf):
                raise CriError("truncated protobuf field")
        else:
            raise CriError(f"unsupported protobuf wire type {wire}")


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CriError("bad protobuf varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else ""


def parse_status_response(buf: bytes) -> RuntimeStatus:
    """``StatusResponse{RuntimeStatus status = 1; map<string, string> info = 2}``."""
    result = RuntimeStatus()
    for number, value in fields(buf):
        if number == 1 and isinstance(value, bytes):
            for n, cond_bytes in fields(value):  # RuntimeStatus{repeated RuntimeCondition conditions = 1}
                if n == 1 and isinstance(cond_bytes, bytes):
                    cond = Condition()
                    for cn, cv in fields(cond_bytes):
                        if cn == 1:
                            cond.type = _text(cv)
                        elif cn == 2:
                            cond.status = bool(cv)
                        elif cn == 3:
                            cond.reason = _text(cv)
                        elif cn == 4:
                            cond.message = _text(cv)
                    result.conditions[cond.type] = cond
        elif number == 2 and isinstance(value, bytes):
            entry = dict(fields(value))
            result.info[_text(entry.get(1, b""))] = _text(entry.get(2, b""))
    return result


def list_pod_sandbox_request() -> bytes:
    """``ListPodSandboxRequest{}``: no filter, every sandbox the runtime knows."""
    return b""


def parse_list_pod_sandbox_response(buf: bytes) -> list[Sandbox]:
    """``ListPodSandboxResponse{repeated PodSandbox items = 1}``; of each, ``id = 1`` and ``state = 3``."""
    items = []
    for number, value in fields(buf):
        if number == 1 and isinstance(value, bytes):
            sandbox_id, state = "", SANDBOX_READY
            for n, v in fields(value):
                if n == 1:
                    sandbox_id = _text(v)
                elif n == 3 and isinstance(v, int):
                    state = v
            items.append(Sandbox(sandbox_id, state))
    return items


# -- the calls -------------------------------------------------------------------------------------

def _call(socket_path: str, method: bytes, request: bytes, timeout: float) -> bytes:
    try:
        return grpc_unary.call(socket_path, method, request, timeout)
    except grpc_unary.GrpcError as exc:
        raise CriError(f"CRI {method.rsplit(b'/', 1)[-1].decode()} on {socket_path}: {exc}") from None


def runtime_status(socket_path: str, verbose: bool = True, timeout: float = 5.0) -> RuntimeStatus:
    """One CRI ``RuntimeService/Status`` call on the runtime's unix socket, bounded by ``timeout``."""
    return parse_status_response(_call(socket_path, STATUS, status_request(verbose), timeout))


def list_pod_sandboxes(socket_path: str, timeout: float = 5.0) -> list[Sandbox]:
    """One CRI ``RuntimeService/ListPodSandbox`` call (every sandbox), bounded by ``timeout``."""
    return parse_list_pod_sandbox_response(_call(socket_path, LIST_POD_SANDBOX, list_pod_sandbox_request(), timeout))
