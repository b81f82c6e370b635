"""Python stubs for the CRI API (runtime.v1), generated from ``cri/api.proto`` at test time.

Generated code is never committed: the proto is the single source, and the stubs always match the
grpcio-tools/protobuf versions installed in the test environment.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cri")
PROTO = "api.proto"


def generate(out_dir: str) -> tuple[ModuleType, ModuleType]:
    """Run protoc (grpc_tools) into ``out_dir`` and import ``api_pb2`` and ``api_pb2_grpc``."""
    from grpc_tools import protoc  # imported here: only the runtime suite needs grpcio-tools

    os.makedirs(out_dir, exist_ok=True)
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    code = protoc.main([
        "grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}",
        f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", PROTO,
    ])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {PROTO}")
    # api_pb2_grpc imports "api_pb2" as a top-level module, so out_dir goes on sys.path.
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
