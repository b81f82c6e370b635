"""The agent's pure parts, module by module: wire format agreement with the shim, framing, replies,
metrics over HTTP, worker verdicts, config defaults.  No root, no sockets, no forks."""

from __future__ import annotations

import inspect
import os
import signal

import pytest

from cnichain.agent import config, metrics, protocol, worker
from cnichain.common import shim

KNOWN = {"probe"}


# -- the shim and the agent speak one format ------------------------------------------------------


def test_the_agent_takes_its_framing_from_the_shim_not_a_copy():
    """One owner of the wire format: the agent's modules define no magic, version or kinds."""
    for module in (protocol, metrics, worker):
        src = inspect.getsource(module)
        assert "CNIA" not in src and "MAGIC" not in src
    assert protocol.REQUEST_FIXED.size == 8 + 8 + 4 + 2 + 4 + 4


@pytest.mark.parametrize("umask", [0, 0o022, 0o777])
@pytest.mark.parametrize("stdin", [b"", b"{}", b"\xff" * 70000])
def test_every_request_the_shim_encodes_decodes_to_the_same_values(umask, stdin):
    env = {"CNI_COMMAND": "DEL", "A": "", "B": "x=y=z", "PATH": "/usr/bin:/bin"}
    frame = shim.encode_request("probe", env, stdin, (2**64 - 1, 12345), umask)
    buf = bytearray(frame)
    version, kind, payload = protocol.take_frame(buf)
    assert (version, kind, buf) == (shim.VERSION, shim.REQUEST, bytearray())
    req = protocol.decode_request(payload, KNOWN)
    assert (req.plugin_type, req.env, req.stdin, req.netns_id, req.umask) == ("probe", env, stdin, (2**64 - 1, 12345), umask)


# -- framing -----------------------------------------------------------------------------------------


def test_take_frame_waits_for_whole_messages_and_keeps_the_rest():
    one, two = shim.header(shim.GO, 0), shim.encode_result(0, b"out", b"")
    buf = bytearray()
    for byte in one[:-1]:
        buf.append(byte)
        assert protocol.take_frame(buf) is None
    buf += one[-1:] + two[:5]
    assert protocol.take_frame(buf) == (shim.VERSION, shim.GO, b"")
    assert bytes(buf) == two[:5]
    buf += two[5:]
    assert protocol.take_frame(buf)[1] == shim.RESULT and not buf


def test_take_frame_refuses_oversize_from_the_header_alone():
    buf = bytearray(shim.header(shim.REQUEST, 1 << 30))
    with pytest.raises(protocol.RequestError, match="exceeds the limit"):
        protocol.take_frame(buf, max_request=1024)
    with pytest.raises(ValueError):
        protocol.take_frame(bytearray(b"GET / HTTP/1.1\r\n"))


def test_ack_carries_the_limit_in_ms_and_refusal_is_truncated():
    frame = protocol.ack(2.5)
    assert shim.parse_header(frame[:12]) == (shim.VERSION, shim.ACK, 4)
    assert int.from_bytes(frame[12:], "big") == 2500
    refused = protocol.refusal("é" * 2000)
    _, kind, length = shim.parse_header(refused[:12])
    assert kind == shim.REFUSED and length == protocol.MAX_REFUSAL == len(refused) - 12


def test_output_frame_keeps_undecodable_bytes_and_read_result_inverts_it():
    text = b"\xff\xfe ok".decode("utf-8", "surrogateescape")
    frame = protocol.output_frame(7, text, "warn\n")
    assert protocol.read_result(frame) == (7, b"\xff\xfe ok", b"warn\n")
    assert protocol.read_result(b"") is None
    assert protocol.read_result(shim.header(shim.ACK, 4) + b"\0\0\0\1") is None
    assert protocol.read_result(frame[:-1]) is None


# -- metrics over HTTP -----------------------------------------------------------------------------------


@pytest.mark.parametrize("buf,complete", [(b"GET /metrics HTTP/1.1\r\n", False), (b"GET / HTTP/1.0\r\n\r\n", True),
                                          (b"GET /\n\n", True), (b"x" * metrics.MAX_HTTP_REQUEST, True)])
def test_http_request_completion(buf, complete):
    assert metrics.http_request_complete(buf) is complete


def test_http_response_serves_metrics_and_404s_the_rest():
    m = metrics.Metrics()
    m.done("probe", "ADD", "ok", 0.01)
    ok = metrics.http_response(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", m)
    head, _, body = ok.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"version=0.0.4" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert metrics.parse_http_response(ok) == m.render()
    for request in (b"GET /other HTTP/1.1\r\n\r\n", b"POST /metrics HTTP/1.1\r\n\r\n", b"\r\n\r\n"):
        answer = metrics.http_response(request, m)
        assert answer.startswith(b"HTTP/1.1 404")
        with pytest.raises(RuntimeError):
            metrics.parse_http_response(answer)


def test_histogram_overflow_bucket_and_sum():
    h = metrics.Histogram()
    for seconds in (0.0005, 0.001, 61.0):
        h.observe(seconds)
    assert h.counts[0] == 2 and h.counts[-1] == 1 and sum(h.counts) == 3
    assert h.total == pytest.approx(61.0015)


# -- worker verdicts -------------------------------------------------------------------------------------


def _exited(code: int) -> int:
    return code << 8


@pytest.mark.parametrize(
    "status,killed,expected",
    [
        (_exited(worker.EXIT_OK), False, (0, "ok", "")),
        (_exited(worker.EXIT_CNI_ERROR), False, (1, "error", "")),
        (_exited(worker.EXIT_UNDELIVERED), False, (1, "undelivered", "")),
        (signal.SIGALRM, False, (1, "timeout", "")),
        (signal.SIGKILL, True, (1, "timeout", "")),
        (signal.SIGKILL, False, (1, "killed", f"signal {int(signal.SIGKILL)}")),  # the OOM killer: shim goes cold
        (signal.SIGSEGV, False, (1, "crashed", f"signal {int(signal.SIGSEGV)}")),
        (_exited(worker.EXIT_FAILED), False, (1, "crashed", "status 3")),
    ],
)
def test_outcome_of_wait_status(status, killed, expected):
    assert os.WIFEXITED(status) or os.WIFSIGNALED(status)
    assert worker.outcome_of(status, killed) == expected


def test_failure_messages_name_the_plugin_and_command():
    req = protocol.AgentRequest("probe", (1, 2), 0o22, {"CNI_COMMAND": "ADD"}, b"")
    assert worker.failure_message(req, "timeout", "", 2.5) == "cnichain agent: probe ADD did not finish within 2.5s"
    assert worker.failure_message(req, "crashed", "signal 11", 60) == "cnichain agent: probe ADD worker failed (signal 11)"


# -- config ---------------------------------------------------------------------------------------------


def test_config_derived_paths_and_limits():
    cfg = config.AgentConfig(socket_path="/run/x/a.sock", request_timeout=10)
    assert cfg.metrics_path == "/run/x/a.sock.metrics" and cfg.drain_limit == 10 + config.KILL_GRACE
    cfg = config.AgentConfig(socket_path="/run/x/a.sock", metrics_socket="", drain_timeout=1.5)
    assert cfg.metrics_path == "" and cfg.drain_limit == 1.5


def test_public_names_stay_importable_from_the_package():
    """What cli/app.py, the bench, tests/conftest.py and the agent's own argv import."""
    import cnichain.agent as agent

    for name in ("serve", "main", "running_agent", "fetch_metrics", "RunningAgent", "agent_command", "AgentConfig",
                 "parse_args", "decode_request", "error_result", "Metrics", "launcher_target", "DelegateRunner"):
        assert hasattr(agent, name), name
    assert agent.main is agent.server.main
