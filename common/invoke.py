"""Executing another CNI plugin (IPAM delegation) with the same exec contract a runtime uses."""

from __future__ import annotations

import json
import os
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only (typing costs milliseconds per exec)
    from typing import Mapping, Optional

from .errors import CniError, Code, plugin_error
from .types import Result

_PLUGIN_NAME_FORBIDDEN = ("/", "\0")


def find_plugin(name: str, paths: list[str]) -> str:
    """The first executable called ``name`` on ``paths``, with libcni's error texts."""
    if not name:
        raise plugin_error("no plugin name provided")
    if any(c in name for c in _PLUGIN_NAME_FORBIDDEN) or name in (".", ".."):
        raise plugin_error(f"invalid plugin name: {name}")
    if not paths:
        raise plugin_error("no paths provided")
    for directory in paths:
        candidate = os.path.join(directory, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise plugin_error(f'failed to find plugin "{name}" in path {paths}')


# Set only inside a node-agent worker (agent/): runs a delegate that is one of our own
# launchers in a forked process instead of an exec, with the same isolation and output.  Called as
# ``runner(binary, env, stdin)``; returns (exit code, stdout, stderr), or None to exec as usual.
delegate_runner = None


def exec_plugin(binary: str, command: str, env: Mapping[str, str], stdin: bytes) -> bytes:
    """Run ``binary`` for ``command``; return its stdout; raise its CNI error on failure."""
    child_env = dict(env)
    child_env["CNI_COMMAND"] = command
    ran = delegate_runner(binary, child_env, stdin) if delegate_runner is not None else None
    if ran is None:
        import subprocess

        proc = subprocess.run(
            [binary], input=stdin, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False
        )
        ran = (proc.returncode, proc.stdout, proc.stderr)
    code, out, err = ran
    if code != 0:
        raise error_from_output(out, err, code)
    return out


def error_from_output(stdout: bytes, stderr: bytes, returncode: int) -> CniError:
    """Turn a failed child's output into a CniError keeping its code and message."""
    try:
        data = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        data = None
    if isinstance(data, dict) and "code" in data:
        try:
            code = int(data.get("code", Code.INTERNAL))
        except (TypeError, ValueError):
            code = Code.INTERNAL
        return CniError(code, str(data.get("msg", "")), str(data.get("details", "") or ""))
    err_text = stderr.decode("utf-8", "replace").strip()
    if err_text:
        return plugin_error(f'netplugin failed: "{err_text}": exit status {returncode}')
    return plugin_error(f"netplugin failed with no error message: exit status {returncode}")


def delegate(
    plugin_type: str, command: str, env: Mapping[str, str], stdin: bytes, paths: list[str]
) -> Optional[Result]:
    """Delegate ``command`` to the plugin of ``plugin_type`` (usually the IPAM plugin).

    ADD returns the delegate's result; other commands return None.
    """
    binary = find_plugin(plugin_type, paths)
    out = exec_plugin(binary, command, env, stdin)
    if command != "ADD":
        return None
    try:
        data = json.loads(out)
    except ValueError as exc:
        raise CniError(Code.DECODING_FAILURE, f"failed to decode {plugin_type} result: {exc}") from None
    return Result.from_dict(data)


def delegate_ipam(req, command: Optional[str] = None) -> Optional[Result]:  # req: skel.Request
    """Run the config's ``ipam.type`` plugin with this request's environment and stdin."""
    return delegate(req.ipam_type, command or req.command, req.env, req.stdin, req.path)
