"""The shared plugin skeleton: CNI_* environment and stdin in, result or error JSON out.

Every plugin is a :class:`Plugin` record of plain handler functions.  :func:`dispatch` takes the
environment and streams as arguments, so the same code runs as a fresh process
(:func:`run_plugin`), inside a test, or in a pre-forked worker of the node agent.  It is the only
place that turns exceptions into the spec's error JSON and an exit code.
"""

from __future__ import annotations

import os
import time

from . import gojson
from . import leanjson  # json.loads/json.dumps without importing json (and re, enum)
from . import version as versions
from .errors import CniError, Code
from .log import log
from .record import FrozenRecord, Record
from .types import DNS_SCHEMA, Result

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing and dataclasses cost ~9 ms per exec together
    from typing import Any, Callable, Mapping, Optional, TextIO

    Handler = Callable[["Request"], Optional[Result]]

COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
_REQUIRED_ENV = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),
    "GC": ("CNI_PATH",),
    "STATUS": (),
}
_MIN_VERSION = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_NAME_REST = _NAME_FIRST | frozenset("_.-")


def valid_name(text: str) -> bool:
    """libcni's ``^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`` (Go's ``$``: the end of the text, so a trailing
    newline is refused too), for container IDs and network names; checked without ``re``, whose
    import (with ``enum``) costs every exec milliseconds."""
    return bool(text) and text[0] in _NAME_FIRST and all(ch in _NAME_REST for ch in text)

# libcni's types.NetConf: the keys every plugin's config shares, decoded as Go does (containerd
# and operators may spell them in any letter case).  Each plugin decodes its own keys with its own
# schema; these are the ones the skeleton and the shared helpers need.
GC_ATTACHMENT = gojson.Struct("types.GCAttachment", [
    gojson.Field("containerID", gojson.STRING, "ContainerID"),
    gojson.Field("ifname", gojson.STRING, "IfName"),
])
NETCONF = gojson.Struct("types.NetConf", [
    gojson.Field("cniVersion", gojson.STRING, "CNIVersion"),
    ("name", gojson.STRING),
    ("type", gojson.STRING),
    ("capabilities", gojson.Map(gojson.BOOL)),
    gojson.Field("ipam", gojson.Struct("types.IPAM", [("type", gojson.STRING)]), "IPAM"),
    gojson.Field("dns", DNS_SCHEMA, "DNS"),
    ("prevResult", gojson.Map(gojson.ANY)),
    ("cni.dev/valid-attachments", gojson.List(GC_ATTACHMENT)),
])
# What libcni's skeleton itself decodes before calling the plugin: the name, then the version.
_NAME_ONLY = gojson.Struct("", [("name", gojson.STRING)])
_VERSION_ONLY = gojson.Struct("", [gojson.Field("cniVersion", gojson.STRING, "CNIVersion")])


class Request(Record):
    """One parsed plugin invocation: the CNI_* environment plus the decoded network config."""

    command: str
    container_id: str
    netns: str
    ifname: str
    args: str
    path: list[str]
    stdin: bytes
    conf: dict
    env: Mapping[str, str]

    def __init__(
        self,
        command: str,
        container_id: str,
        netns: str,
        ifname: str,
        args: str,
        path: list[str],
        stdin: bytes,
        conf: dict,
        env: Mapping[str, str] | None = None,
        _prev: Any = None,
        _net: Any = None,
    ) -> None:
        self.command = command
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = args
        self.path = path
        self.stdin = stdin
        self.conf = conf
        self.env = {} if env is None else env
        self._prev = _prev
        self._net = _net

    def _values(self) -> tuple:
        # The decoded prevResult cache takes part in ==, as it did as a dataclass field, but is
        # left out of repr (it repeats conf["prevResult"]).
        return super()._values() + (self._prev,)

    @property
    def netconf(self) -> dict:
        """The shared NetConf keys, decoded with Go's rules (see :data:`NETCONF`)."""
        if self._net is None:
            self._net = gojson.decode(self.conf, NETCONF)
        return self._net

    @property
    def cni_version(self) -> str:
        """The config's version; a config without one is 0.1.0, as libcni reads it."""
        try:
            return gojson.decode(self.conf, _VERSION_ONLY)["cniVersion"] or versions.DEFAULT
        except CniError as exc:
            raise CniError(Code.DECODING_FAILURE, f"decoding version from network config: {exc.msg}") from None

    @property
    def network_name(self) -> str:
        return gojson.decode(self.conf, _NAME_ONLY)["name"]

    @property
    def ipam_type(self) -> str:
        return self.netconf["ipam"]["type"]

    @property
    def prev_result(self) -> Optional[Result]:
        """``prevResult`` decoded (any version) into the 1.x shape, or None when absent."""
        if self._prev is None:
            raw = self.netconf["prevResult"]
            if raw is None:
                return None
            self._prev = parse_prev_result(raw, self.netconf["cniVersion"])
        return self._prev

    def require_prev_result(self, message: str = "must be called as chained plugin") -> Result:
        prev = self.prev_result
        if prev is None:
            raise CniError(Code.INVALID_NETWORK_CONFIG, message)
        return prev

    def valid_attachments(self) -> list[tuple[str, str]]:
        """GC's ``cni.dev/valid-attachments`` as (containerID, ifname) pairs.

        The key the spec-v1.1.0 text used, ``cni.dev/attachments``, is honoured when the current
        one is absent.
        """
        items = self.netconf["cni.dev/valid-attachments"]
        if items is None:
            items = gojson.decode(self.conf, _OLD_ATTACHMENTS)["cni.dev/attachments"] or []
        return [(a["containerID"], a["ifname"]) for a in items if a["containerID"]]


# cnichain's own optional per-network log file (see .log); not a reference key.
_LOG_ONLY = gojson.Struct("", [("log", gojson.ANY)])
_OLD_ATTACHMENTS = gojson.Struct("", [("cni.dev/attachments", gojson.List(GC_ATTACHMENT))])


def parse_prev_result(raw: dict, conf_version: str) -> Result:
    """libcni's ``ParsePrevResult``: the result is read as the *config's* version.

    A config without ``cniVersion`` cannot carry a prevResult (libcni looks up a result type for
    the empty version and finds none); a result without its own version takes the config's.
    """
    if not conf_version:
        raise CniError(Code.DECODING_FAILURE, 'could not parse prevResult: unsupported CNI result version ""')
    ver = gojson.decode(raw, _VERSION_ONLY)["cniVersion"] or conf_version
    if ver not in versions.ALL:
        raise CniError(
            Code.INCOMPATIBLE_VERSION,
            "could not parse prevResult: result type supports "
            f"{list(versions.ALL)} but unmarshalled CNIVersion is {ver!r}",
        )
    try:
        return Result.from_dict(raw, ver)
    except CniError as exc:
        raise CniError(exc.code, f"could not parse prevResult: {exc.msg}", exc.details) from None


_ALL_VERSIONS = versions.ALL  # the field "versions" below shadows the module inside the class


class Plugin(FrozenRecord):
    """A plugin is a name, its supported versions and one plain function per command.

    Immutable and hashable, as the frozen dataclass it replaces (see :mod:`.record` for why not
    ``dataclasses``).
    """

    name: str
    add: Handler
    delete: Handler
    check: Optional[Handler] = None
    gc: Optional[Handler] = None
    status: Optional[Handler] = None
    versions: tuple[str, ...] = _ALL_VERSIONS
    about: str = ""

    def handler(self, command: str) -> Optional[Handler]:
        return {
            "ADD": self.add,
            "DEL": self.delete,
            "CHECK": self.check,
            "GC": self.gc,
            "STATUS": self.status,
        }[command]


def version_json(plugin: Plugin) -> str:
    return leanjson.dumps(
        {"cniVersion": versions.CURRENT, "supportedVersions": list(plugin.versions)},
        separators=(",", ":"),
    )


def error_json(err: CniError) -> str:
    return leanjson.dumps(err.to_dict(), indent=4)


def validate_env(command: str, env: Mapping[str, str]) -> None:
    missing = [k for k in _REQUIRED_ENV[command] if not env.get(k)]
    if missing:
        raise CniError(Code.INVALID_ENV, f"required env variables [{','.join(missing)}] missing")
    cid = env.get("CNI_CONTAINERID", "")
    if cid and not valid_name(cid):
        raise CniError(Code.INVALID_ENV, "invalid characters in containerID", cid)
    if "CNI_IFNAME" in _REQUIRED_ENV[command]:
        validate_ifname(env["CNI_IFNAME"])


def validate_ifname(name: str) -> None:
    """The kernel's and libcni's rules for an interface name (code 4 on failure)."""
    if not name:
        raise CniError(Code.INVALID_ENV, "interface name is empty")
    if len(name) > 15:
        raise CniError(
            Code.INVALID_ENV,
            "interface name is too long",
            "interface name should be less than 16 characters",
        )
    if name in (".", ".."):
        raise CniError(Code.INVALID_ENV, "interface name is . or ..")
    for ch in name:
        if ch == "/" or ch == ":" or ch.isspace():
            raise CniError(
                Code.INVALID_ENV, "interface name contains / or : or whitespace characters", name
            )


def decode_config(stdin: bytes) -> dict:
    """The network config as JSON, with the checks libcni's skeleton makes before any plugin code."""
    try:
        conf = leanjson.loads(stdin)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CniError(Code.DECODING_FAILURE, f"error unmarshall network config: {exc}") from None
    if not isinstance(conf, dict):
        raise CniError(Code.DECODING_FAILURE, "error unmarshall network config: not a JSON object")
    try:
        name = gojson.decode(conf, _NAME_ONLY)["name"]
    except CniError as exc:
        raise CniError(Code.DECODING_FAILURE, f"error unmarshall network config: {exc.msg}") from None
    if not name:
        raise CniError(Code.INVALID_NETWORK_CONFIG, "missing network name")
    if not valid_name(name):
        raise CniError(Code.INVALID_NETWORK_CONFIG, "invalid characters found in network name", name)
    return conf


def check_version(plugin: Plugin, command: str, conf_version: str) -> None:
    if conf_version not in plugin.versions:
        supported = " ".join(f'"{v}"' for v in plugin.versions)
        raise CniError(
            Code.INCOMPATIBLE_VERSION,
            "incompatible CNI versions",
            f'config is "{conf_version}", plugin supports [{supported}]',
        )
    minimum = _MIN_VERSION.get(command)
    if minimum and not versions.at_least(conf_version, minimum):
        raise CniError(Code.INCOMPATIBLE_VERSION, f"config version does not allow {command}")


def _same_netns_as_self(path: str) -> bool:
    try:
        theirs = os.stat(path)
        ours = os.stat("/proc/thread-self/ns/net")
    except OSError:
        return False
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def build_request(command: str, env: Mapping[str, str], stdin: bytes) -> Request:
    validate_env(command, env)
    conf = decode_config(stdin)
    return Request(
        command=command,
        container_id=env.get("CNI_CONTAINERID", ""),
        netns=env.get("CNI_NETNS", ""),
        ifname=env.get("CNI_IFNAME", ""),
        args=env.get("CNI_ARGS", ""),
        path=[p for p in env.get("CNI_PATH", "").split(":") if p],
        stdin=stdin,
        conf=conf,
        env=env,
    )


def dispatch(plugin: Plugin, env: Mapping[str, str], stdin: bytes, stdout: TextIO, stderr: TextIO) -> int:
    """Run one CNI command; write the result or error to ``stdout``; return the exit code."""
    started = time.monotonic()
    command = env.get("CNI_COMMAND", "")
    if not command:
        about = plugin.about or f"CNI {plugin.name} plugin (cnichain)"
        stderr.write(f"{about}\nCNI protocol versions supported: {', '.join(plugin.versions)}\n")
        return 0
    req: Optional[Request] = None
    try:
        if command == "VERSION":
            stdout.write(version_json(plugin) + "\n")
            return 0
        if command not in _REQUIRED_ENV:
            raise CniError(Code.INVALID_ENV, f"unknown CNI_COMMAND: {command}")
        req = build_request(command, env, stdin)
        log.configure(gojson.decode(req.conf, _LOG_ONLY)["log"], plugin.name)
        check_version(plugin, command, req.cni_version)
        handler = plugin.handler(command)
        result = handler(req) if handler is not None else None
        if (
            command in ("ADD", "DEL")
            and req.netns
            and env.get("CNI_NETNS_OVERRIDE", "").lower() not in ("1", "true")
            and _same_netns_as_self(req.netns)
        ):
            raise CniError(Code.INVALID_NETNS, "plugin's netns and netns from CNI_NETNS should not be the same")
        if result is not None:
            stdout.write(leanjson.dumps(result.to_dict(req.cni_version), indent=4) + "\n")
        _log_done(command, req, started, 0)
        return 0
    except CniError as err:
        stdout.write(error_json(err) + "\n")
        _log_done(command, req, started, err.code, str(err))
        return 1
    except Exception as exc:  # noqa: BLE001 - the spec wants JSON, never a traceback
        import traceback

        internal = CniError(Code.INTERNAL, f"{plugin.name}: unexpected error: {exc}", type(exc).__name__)
        stdout.write(error_json(internal) + "\n")
        _log_done(command, req, started, internal.code, traceback.format_exc())
        return 1


def _log_done(command: str, req: Optional[Request], started: float, code: int, detail: str = "") -> None:
    if not log.path:
        return
    elapsed_ms = (time.monotonic() - started) * 1000
    cid = req.container_id if req else ""
    level = "info" if code == 0 else "error"
    msg = f"{command} container={cid} ifname={req.ifname if req else ''} code={code} elapsed_ms={elapsed_ms:.1f}"
    log.write(level, msg + (f" error={detail}" if detail else ""))


def run_plugin(plugin: Plugin) -> int:
    """Process entry point: real environment and streams."""
    import sys

    try:
        stdin = b"" if os.environ.get("CNI_COMMAND") == "VERSION" else sys.stdin.buffer.read()
    except OSError as exc:
        err = CniError(Code.IO_FAILURE, f"error reading from stdin: {exc}")
        sys.stdout.write(error_json(err) + "\n")
        return 1
    code = dispatch(plugin, os.environ, stdin, sys.stdout, sys.stderr)
    sys.stdout.flush()
    return code
