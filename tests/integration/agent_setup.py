"""What the agent's lab tests share: a private agent with warm and cold launchers of the real
installer plus the test-only ``probe`` plugin (tests/integration/agent_probe.py), and execs of
those launchers as a runtime does them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Optional

from cnichain.agent import running_agent
from cnichain.common import netns as netns_mod
from cnichain.node import launchers
from cnichain.node import native_shim

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROBE = "probe=tests.integration.agent_probe"
AGENT_ENV = {"PYTHONPATH": REPO, "CNICHAIN_TEST_AGENT_ONLY": "secret"}


def _probe_launcher(path: str, socket_path: str) -> None:
    roots = launchers.import_roots() + [REPO]
    src = (
        f"#!{sys.executable} -IS\n"
        "import sys\n"
        f"sys.path[0:0] = {roots!r}\n"
        "from cnichain.common.shim import forward\n"
        f"code = forward('probe', {socket_path!r})\n"
        "if code is not None:\n"
        "    sys.exit(code)\n"
        "from cnichain.common.skel import run_plugin\n"
        "from tests.integration.agent_probe import PLUGIN\n"
        "sys.exit(run_plugin(PLUGIN))\n"
    )
    with open(path, "w") as fh:
        fh.write(src)
    os.chmod(path, 0o755)


class Setup:
    def __init__(self, root: str) -> None:
        self.root = root
        self.sock = os.path.join(root, "run", "agent.sock")
        self.warm = os.path.join(root, "warm")
        self.cold = os.path.join(root, "cold")
        launchers.install(self.warm, agent_socket=self.sock)
        launchers.install(self.cold, agent_socket="")
        _probe_launcher(os.path.join(self.warm, "probe"), self.sock)
        _probe_launcher(os.path.join(self.cold, "probe"), "")
        self.native_probe = ""  # the probe behind the native shim, when it was built
        binary = native_shim.built_binary()
        if binary:
            self.native_probe = os.path.join(root, "native", "probe")
            os.makedirs(os.path.dirname(self.native_probe))
            with open(binary, "rb") as fh:
                config = native_shim.ShimConfig("probe", self.sock, os.path.join(self.cold, "probe"))
                data = native_shim.configure(fh.read(), config)
            with open(self.native_probe, "wb") as fh:
                fh.write(data)
            os.chmod(self.native_probe, 0o755)
        self.record = os.path.join(root, "record.jsonl")

    def agent(self, *args: str, preexec=None):
        return running_agent(self.sock, args=("--plugin", PROBE, *args), env=AGENT_ENV, preexec=preexec)

    def records(self) -> list[dict]:
        try:
            with open(self.record) as fh:
                return [json.loads(line) for line in fh if line.strip()]
        except FileNotFoundError:
            return []


def start(bin_dir: str, plugin: str, command: str, conf: object, node: Optional[str] = None,
          umask: int = -1, **env: str) -> subprocess.Popen:
    """Exec a launcher as a runtime does; with ``node``, from a thread inside that namespace."""
    base = {"CNI_COMMAND": command, "CNI_CONTAINERID": "agent-ctr", "CNI_NETNS": "/run/netns/none",
            "CNI_IFNAME": "eth0", "CNI_PATH": bin_dir, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    base.update(env)
    stdin = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
    kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base, umask=umask)
    if node:
        with netns_mod.entered(node):
            proc = subprocess.Popen([os.path.join(bin_dir, plugin)], **kw)
    else:
        proc = subprocess.Popen([os.path.join(bin_dir, plugin)], **kw)
    proc.stdin.write(stdin)
    proc.stdin.close()
    return proc


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, bytes, bytes]:
    out = proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout)
    return proc.returncode, out, err


def run(bin_dir: str, plugin: str, command: str, conf: object, node: Optional[str] = None, **env: str):
    return finish(start(bin_dir, plugin, command, conf, node, **env))


def probe_conf(setup: Setup, **extra) -> dict:
    return {"cniVersion": "1.0.0", "name": "probenet", "type": "probe", "record": setup.record, **extra}


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def ns_inode(path: str) -> int:
    return os.stat(path).st_ino


def _gauge(text: str, series: str) -> int:
    found = re.search(re.escape(series) + r" (\d+)$", text, re.M)
    return int(found.group(1)) if found else 0


def served_warm(agent, plugin: str, command: str) -> int:
    """How many ``command`` requests of ``plugin`` the agent has run to an ok outcome, from its own
    counters.  A cold fallback prints the same answer, so this is what proves a call was warm."""
    return _gauge(agent.metrics(),
                  f'cnichain_agent_requests_total{{plugin="{plugin}",command="{command}",outcome="ok"}}')


def answered(agent) -> int:
    """Every request the agent answered itself: run to any outcome, or rejected as invalid."""
    text = agent.metrics()
    runs = sum(int(n) for n in re.findall(r"^cnichain_agent_requests_total\{.*\} (\d+)$", text, re.M))
    return runs + _gauge(text, "cnichain_agent_rejected_total")


def workers(agent, state: str) -> int:
    """How many long-lived workers of ``agent`` are in ``state`` (warming, idle, busy, retiring)."""
    return _gauge(agent.metrics(), f'cnichain_agent_workers{{state="{state}"}}')


def settled(agent) -> None:
    """Wait until no worker of ``agent`` is busy.  A client gets its answer before its worker has
    checked that it is back home and told the agent so; a request arriving in between finds no idle
    worker and gets a new one at once (by design: never a queue).  Tests that count on one worker
    serving requests one after another wait for this between them."""
    wait_for(lambda: 'cnichain_agent_workers{state="busy"} 0' in agent.metrics())
