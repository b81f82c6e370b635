"""The operator CLI end to end: the demo and `cnichain exec` as an operator would run them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cnichain.tools.lab import leftover_namespaces

pytestmark = pytest.mark.integration

CLI = [sys.executable, "-m", "cnichain.cli.app"]


def _env() -> dict:
    import cnichain.common

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cnichain.common.__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _run_id(output: str) -> str:
    match = re.search(r"state of run ([0-9a-f]+) removed", output)
    assert match, output
    return match.group(1)


def test_demo_runs_every_proof_and_leaves_nothing():
    proc = subprocess.run(CLI + ["demo"], capture_output=True, text=True, timeout=240, env=_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every proof passed" in proc.stdout
    assert "[FAIL]" not in proc.stdout
    assert leftover_namespaces(f"cnidemo-{_run_id(proc.stdout)}") == []


def test_exec_add_check_del_with_cli(lab, plugin_dir, tmp_path):
    conflist = tmp_path / "net.conflist"
    conflist.write_text(json.dumps({
        "cniVersion": "1.0.0",
        "name": "clinet",
        "plugins": [
            {"type": "bridge", "bridge": "clibr0", "isGateway": True,
             "ipam": {"type": "host-local", "subnet": "10.77.0.0/24", "dataDir": str(tmp_path / "ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }))
    pod = lab.netns("pod")
    common = ["--container-id", "cli-1", "--bin-dir", plugin_dir, "--cache-dir", str(tmp_path / "cache"), "--node-netns", lab.node]
    add = subprocess.run(CLI + ["exec", "ADD", str(conflist), "--netns", pod, *common,
                               "--cap", 'portMappings=[{"hostPort": 9090, "containerPort": 90, "protocol": "tcp"}]'],
                         capture_output=True, text=True, timeout=60, env=_env())
    assert add.returncode == 0, add.stderr
    result = json.loads(add.stdout)
    assert result["ips"][0]["address"].startswith("10.77.0.")
    check = subprocess.run(CLI + ["exec", "CHECK", str(conflist), "--netns", pod, *common], capture_output=True, text=True, timeout=60, env=_env())
    assert check.returncode == 0, check.stdout + check.stderr
    inspect = subprocess.run(CLI + ["inspect", "clinet", "--cache-dir", str(tmp_path / "cache")], capture_output=True, text=True, env=_env())
    assert "cli-1" in inspect.stdout and "alive" in inspect.stdout
    for _ in range(2):  # DEL twice: idempotent
        dele = subprocess.run(CLI + ["exec", "DEL", str(conflist), *common], capture_output=True, text=True, timeout=60, env=_env())
        assert dele.returncode == 0, dele.stdout + dele.stderr
    assert not os.listdir(tmp_path / "ipam" / "clinet") or os.listdir(tmp_path / "ipam" / "clinet") == ["lock"] or all(
        not n[0].isdigit() for n in os.listdir(tmp_path / "ipam" / "clinet"))


def test_exec_reports_plugin_error_json(lab, plugin_dir, tmp_path):
    conflist = tmp_path / "bad.conflist"
    conflist.write_text(json.dumps({"cniVersion": "1.0.0", "name": "bad", "plugins": [{"type": "missing-plugin"}]}))
    proc = subprocess.run(CLI + ["exec", "ADD", str(conflist), "--netns", lab.netns("p"), "--container-id", "c",
                                 "--bin-dir", plugin_dir, "--cache-dir", str(tmp_path)], capture_output=True, text=True, env=_env())
    assert proc.returncode == 1
    assert 'failed to find plugin "missing-plugin"' in proc.stderr


def test_demo_cleans_up_on_ctrl_c():
    """Interrupted mid-chain, the demo removes everything it made and exits 130.

    ``--pause`` holds the demo at each step until stdin says go on, so the interrupt lands while
    the demo is provably inside the ADD of pod1, however loaded the machine is. The demo gets
    SIGINT's default disposition whoever started pytest: a non-interactive shell's background job
    (``cmd &``, ``nohup``, many CI runners) inherits SIGINT as ignored, and a Python started that
    way installs no KeyboardInterrupt handler, so the signal would never reach the demo.
    """
    import signal
    import time

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(CLI + ["demo", "--pause"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env(),
                            preexec_fn=default_sigint)
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 120
    at_pod1 = False
    for line in proc.stdout:  # bounded by the deadline and the demo's own end
        seen.append(line)
        if line.startswith("== ADD pod1"):
            at_pod1 = True
        elif "paused" in line:
            if at_pod1:
                break
            proc.stdin.write("\n")
            proc.stdin.flush()
        if time.monotonic() > deadline:
            break
    assert at_pod1, "".join(seen)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    output = "".join(seen) + rest
    assert proc.returncode == 130, output
    assert "interrupted: cleaning up" in output and "cleaned up" in output
    assert leftover_namespaces(f"cnidemo-{_run_id(output)}") == []
