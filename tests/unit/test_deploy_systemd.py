"""The systemd units in deploy/ agree with the code: the socket unit listens where the installer's
shims connect and the agent is told to serve, under the name the agent looks for, root-only; the
service is started by that socket and runs an agent command line the CLI accepts."""

from __future__ import annotations

import os
import shlex

from cnichain.node import native_shim
from cnichain.agent import AgentConfig
from cnichain.agent import activation
from cnichain.common import shim

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
SOCKET_UNIT, SERVICE_UNIT = "cnichain-agent.socket", "cnichain-agent.service"


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values in order]}} -- systemd allows a key more than once."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    with open(os.path.join(DEPLOY, name)) as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                current = sections.setdefault(line.strip("[]"), {})
                continue
            assert current is not None, f"{name}: {line!r} outside a section"
            key, sep, value = line.partition("=")
            assert sep, f"{name}: not a key=value line: {line!r}"
            current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(section: dict[str, list[str]], key: str) -> str:
    (value,) = section[key]
    return value


def words(section: dict[str, list[str]], key: str) -> list[str]:
    return [w for v in section.get(key, []) for w in v.split()]


def cli_options(*path: str) -> set[str]:
    """The options ``cnichain PATH...`` accepts: typer's, or the agent's own parser it forwards to."""
    import typer

    from cnichain.cli.app import app

    if path == ("agent",):
        from cnichain.agent.config import parser

        return {opt for action in parser()._actions for opt in action.option_strings}
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in p.opts}


def test_the_socket_is_where_shims_connect_named_as_the_agent_expects_and_root_only():
    sock = unit(SOCKET_UNIT)["Socket"]
    path = one(sock, "ListenStream")
    assert path == shim.DEFAULT_SOCKET and len(path.encode()) <= native_shim.MAX_SOCKET
    assert one(sock, "FileDescriptorName") == activation.NAME_CNI
    assert one(sock, "SocketMode") == "0600" and one(sock, "DirectoryMode") == "0700"
    assert one(sock, "Service") == SERVICE_UNIT and os.path.isfile(os.path.join(DEPLOY, SERVICE_UNIT))
    assert "Accept" not in sock or one(sock, "Accept").lower() in ("no", "false")  # one agent, not one per exec
    assert one(sock, "RemoveOnStop") == "yes"
    assert {"containerd.service", "crio.service"} <= set(words(unit(SOCKET_UNIT)["Unit"], "Before"))
    assert words(unit(SOCKET_UNIT)["Install"], "WantedBy") == ["sockets.target"]


def test_the_service_runs_an_agent_on_that_socket_that_the_cli_accepts():
    service = unit(SERVICE_UNIT)
    argv = shlex.split(one(service["Service"], "ExecStart"))
    assert argv[0].startswith("/") and argv[1] == "agent"
    options = {a: b for a, b in zip(argv[2:], argv[3:] + [""]) if a.startswith("--")}
    assert set(options) <= cli_options("agent")
    assert options["--socket"] == one(unit(SOCKET_UNIT)["Socket"], "ListenStream")
    # The metrics socket the agent derives stays in the directory systemd creates root-only.
    metrics = AgentConfig(socket_path=options["--socket"]).metrics_path
    assert os.path.dirname(metrics) == os.path.dirname(options["--socket"])
    assert SOCKET_UNIT in words(service["Unit"], "Requires") and SOCKET_UNIT in words(service["Unit"], "After")
    assert words(service["Install"], "Also") == [SOCKET_UNIT]
    assert one(service["Service"], "KillMode") == "mixed" and one(service["Service"], "Restart") == "always"
    for forbidden in ("PrivateNetwork", "PrivateMounts", "ProtectSystem", "RuntimeDirectory"):
        assert forbidden not in service["Service"], forbidden


def test_the_documented_commands_name_the_shipped_files():
    with open(os.path.join(DEPLOY, SOCKET_UNIT)) as fh:
        text = fh.read()
    assert f"deploy/{SOCKET_UNIT} deploy/{SERVICE_UNIT}" in text and f"enable --now {SOCKET_UNIT}" in text
    with open(os.path.join(DEPLOY, SERVICE_UNIT)) as fh:
        assert f"--unix-socket {AgentConfig().metrics_path} " in fh.read()
