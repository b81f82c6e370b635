"""Warm STATUS through a real agent: bridge's delegated host-local STATUS runs in bridge's own worker
(no second request to the agent), and every answer -- success, an exhausted range and a key STATUS
does not read (both still success: STATUS is node health), a version without STATUS, a store that
cannot be created -- is the cold exec's, byte for byte."""

from __future__ import annotations

import json
import os

import pytest

from tests.integration.agent_setup import Setup, run, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def setup(tmp_path) -> Setup:
    os.chmod(tmp_path, 0o700)
    return Setup(str(tmp_path))


def _requests(log: str) -> list[str]:
    with open(log) as fh:
        return [line for line in fh if " request plugin=" in line]


def test_bridge_status_warm_is_the_cold_answer_without_a_second_request(setup, lab):
    data = os.path.join(setup.root, "ipam")

    def conf(**ipam):
        return {"cniVersion": "1.1.0", "name": "stnet", "type": "bridge", "bridge": "cnist0",
                "ipam": {"type": "host-local", "subnet": "10.96.7.0/30", "dataDir": data, **ipam}}

    cases = [("free", conf()), ("bad subnet", conf(subnet="10.96.7.0/40")),
             ("old version", {**conf(), "cniVersion": "1.0.0"}), ("exhausted", conf()),
             ("store not creatable", conf(dataDir=os.path.join(setup.root, "not-a-dir", "ipam")))]
    env = {"CNI_CONTAINERID": "", "CNI_NETNS": "", "CNI_IFNAME": ""}
    with open(os.path.join(setup.root, "not-a-dir"), "w"):
        pass
    with setup.agent("--pool", "2") as agent:
        answers = []
        for name, c in cases:
            if name == "exhausted":
                os.makedirs(os.path.join(data, "stnet"), exist_ok=True)
                with open(os.path.join(data, "stnet", "10.96.7.2"), "w") as fh:
                    fh.write("ctr\r\neth0")
            warm = run(setup.warm, "bridge", "STATUS", c, lab.node, **env)
            cold = run(setup.cold, "bridge", "STATUS", c, lab.node, **env)
            assert warm == cold, name
            answers.append((name, warm[0], json.loads(warm[1])["code"] if warm[1] else 0))
        wait_for(lambda: len(_requests(agent.log_path)) == len(cases))
        served = _requests(agent.log_path)
        with open(agent.log_path) as fh:
            retired = [line for line in fh if "retired" in line]
    assert not retired, retired  # the in-place delegate leaves the worker as it found it
    assert [a[1] for a in answers] == [0, 0, 1, 0, 1], answers
    assert answers[4][2] == 50, answers
    assert all("plugin=bridge command=STATUS" in line for line in served), served  # no host-local request
