"""host-local as a real process: concurrency, crash safety, state shared with the reference plugin.

No namespaces are needed (host-local never touches the network); everything lives in a tmp dataDir.

As in the reference's host_local_test.go, the allocation cases run once per spec version
(``cni_version``; with the reference binary: the versions it speaks), checking the version's result
shape and CHECK rule (tests/specver.py).  Single on purpose: VERSION, and the two races (50
parallel ADDs, SIGKILL mid-allocation), which are about file state under concurrency and send the
same bytes whatever the version.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from typing import Optional

import pytest

import cnichain.common
from tests import required
from tests.specver import (
    REFERENCE_PLUGIN_VERSIONS,
    assert_check_refused,
    assert_cni_error,
    assert_result_shape,
    expects_check,
    result_ips,
)


@pytest.fixture(scope="session")
def module_path() -> str:
    """The directory holding the ``cnichain`` package under test (source tree or installed)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(cnichain.common.__file__))))


@pytest.fixture
def ours(module_path):
    cmd = [sys.executable, "-m", "cnichain.plugins.host_local"]
    return lambda *a, **kw: run(cmd, module_path, *a, **kw)


@pytest.fixture
def reference(any_reference):
    """The reference host-local, 1.1.1 and 1.9.1 in turn (same on-disk format in both)."""
    binary = os.path.join(any_reference[1], "host-local")
    required.executable(binary, "the reference host-local")
    return lambda *a, **kw: run([binary], "", *a, **kw)


def env_for(command: str, cid: str = "ctr1", ifname: str = "eth0", module_path: str = "", **extra) -> dict:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": cid,
        "CNI_NETNS": "/var/run/netns/hl-test",
        "CNI_IFNAME": ifname,
        "CNI_PATH": "/nonexistent",
    }
    if module_path:
        env["PYTHONPATH"] = module_path
    env.update(extra)
    return env


def run(cmd, module_path, command, conf, cid="ctr1", ifname="eth0", **extra):
    p = subprocess.run(
        cmd,
        input=json.dumps(conf).encode(),
        env=env_for(command, cid, ifname, module_path, **extra),
        capture_output=True,
        timeout=60,
    )
    text = p.stdout.decode()
    return p.returncode, (json.loads(text) if text.strip() else None)


def conf(data_dir, subnet="10.20.0.0/24", version="1.0.0") -> dict:
    return {
        "cniVersion": version,
        "name": "hlnet",
        "ipam": {"type": "host-local", "dataDir": str(data_dir), "ranges": [[{"subnet": subnet}]]},
    }


def reservations(data_dir) -> dict[str, bytes]:
    d = os.path.join(data_dir, "hlnet")
    return {
        n: open(os.path.join(d, n), "rb").read()
        for n in os.listdir(d)
        if n[0].isdigit() or ":" in n
    }


def test_version_command(ours):
    code, out = ours("VERSION", {})
    assert code == 0 and out["supportedVersions"][-1] == "1.1.0"


def test_fifty_parallel_adds_get_distinct_addresses(tmp_path, module_path):
    c = json.dumps(conf(tmp_path)).encode()
    procs = []
    for i in range(50):
        p = subprocess.Popen(
            [sys.executable, "-m", "cnichain.plugins.host_local"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env_for("ADD", f"ctr{i}", module_path=module_path),
        )
        procs.append(p)
    addresses = []
    for p in procs:
        out, err = p.communicate(c, timeout=120)
        assert p.returncode == 0, (out, err)
        addresses.append(json.loads(out)["ips"][0]["address"])
    assert len(set(addresses)) == 50
    files = reservations(tmp_path)
    assert len(files) == 50
    assert sorted(files.values()) == sorted(f"ctr{i}\r\neth0".encode() for i in range(50))


def test_file_modes(tmp_path, ours, cni_version):
    code, out = ours("ADD", conf(tmp_path, version=cni_version))
    assert code == 0, out
    assert_result_shape(out, cni_version)
    d = tmp_path / "hlnet"
    for name in os.listdir(d):
        assert stat.S_IMODE(os.stat(d / name).st_mode) == 0o600, name


def test_crash_leftovers_do_not_block_addresses(tmp_path, ours, cni_version):
    """What a kill can leave: our temp file, or (the reference's window) an empty reservation."""
    d = tmp_path / "hlnet"
    d.mkdir()
    for ip in ("10.20.0.2", "10.20.0.3"):
        (d / ip).write_bytes(b"")
    (d / ".cnichain-tmp-4242-00000000").write_bytes(b"ctr7\r\neth0")
    small = conf(tmp_path, "10.20.0.0/29", version=cni_version)  # .2 .. .6 allocatable
    got = []
    for i in range(5):
        code, out = ours("ADD", small, cid=f"c{i}")
        assert code == 0, out
        assert_result_shape(out, cni_version)
        got.append(result_ips(out)[0]["address"])
    assert sorted(got) == [f"10.20.0.{n}/29" for n in range(2, 7)]
    assert not [n for n in os.listdir(d) if n.startswith(".cnichain-tmp-")]


def test_sigkill_mid_allocation_never_leaves_a_permanent_block(tmp_path, module_path):
    """Kill real ADDs at varying points; afterwards every address is either cleanly held or free."""
    small = conf(tmp_path, "10.20.0.0/28")  # .2 .. .14: 13 addresses
    payload = json.dumps(small).encode()
    cmd = [sys.executable, "-m", "cnichain.plugins.host_local"]
    for i in range(24):
        p = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=env_for("ADD", f"k{i}", module_path=module_path),
        )
        p.stdin.write(payload)
        p.stdin.close()
        time.sleep(0.004 * (i % 12))  # a plugin run takes ~30 ms: kill at every stage
        p.send_signal(signal.SIGKILL)
        p.wait()
    held = reservations(tmp_path) if (tmp_path / "hlnet").exists() else {}
    for name, data in held.items():
        assert data in {f"k{i}\r\neth0".encode() for i in range(24)}, (name, data)
    # the runtime DELs every attachment it thinks failed; then the whole pool must be usable
    for i in range(24):
        code, out = run(cmd, module_path, "DEL", small, cid=f"k{i}")
        assert code == 0, out
    got = set()
    for i in range(13):
        code, out = run(cmd, module_path, "ADD", small, cid=f"n{i}")
        assert code == 0, out
        got.add(out["ips"][0]["address"])
    assert len(got) == 13


def assert_check(outcome: tuple[int, Optional[dict]], version: str) -> None:
    """CHECK passed where the version has it, and was refused (code 1) below 0.4.0."""
    if expects_check(version):
        assert outcome == (0, None)
    else:
        assert_check_refused(*outcome)


@pytest.mark.parametrize("version", REFERENCE_PLUGIN_VERSIONS)
def test_reference_allocates_we_release(tmp_path, ours, reference, version):
    c = conf(tmp_path, version=version)
    code, out = reference("ADD", c, cid="refctr")
    assert code == 0, out
    assert_check(ours("CHECK", c, cid="refctr"), version)
    # our allocator continues the reference's round robin
    code, mine = ours("ADD", c, cid="ourctr")
    assert code == 0 and result_ips(mine)[0]["address"] == "10.20.0.3/24"
    assert_result_shape(mine, version)
    assert ours("DEL", c, cid="refctr") == (0, None)
    assert sorted(reservations(tmp_path)) == ["10.20.0.3"]


@pytest.mark.parametrize("version", REFERENCE_PLUGIN_VERSIONS)
def test_we_allocate_reference_releases(tmp_path, ours, reference, version):
    c = conf(tmp_path, version=version)
    assert ours("ADD", c, cid="ourctr")[0] == 0
    assert_check(reference("CHECK", c, cid="ourctr"), version)
    code, out = reference("ADD", c, cid="refctr")
    assert code == 0 and result_ips(out)[0]["address"] == "10.20.0.3/24"
    assert reference("DEL", c, cid="ourctr") == (0, None)
    assert sorted(reservations(tmp_path)) == ["10.20.0.3"]


@pytest.mark.parametrize("version", REFERENCE_PLUGIN_VERSIONS)
def test_reference_duplicate_check_sees_our_reservation(tmp_path, ours, reference, version):
    c = conf(tmp_path, version=version)
    assert ours("ADD", c, cid="same")[0] == 0
    code, out = reference("ADD", c, cid="same")
    assert code == 1
    assert_cni_error(out, 999, "failed to allocate for range 0: 10.20.0.2 has been allocated to same, "
                               "duplicate allocation is not allowed")


@pytest.mark.parametrize("version", REFERENCE_PLUGIN_VERSIONS)
def test_same_result_as_reference(tmp_path, ours, reference, version):
    """Same config, fresh dirs: identical output except libcni-version dns/field differences."""
    a, b = tmp_path / "a", tmp_path / "b"
    c_ref, c_ours = conf(a, version=version), conf(b, version=version)
    for c in (c_ref, c_ours):
        c["ipam"]["routes"] = [{"dst": "0.0.0.0/0", "gw": "10.20.0.1"}]
    ref = reference("ADD", c_ref)
    mine = ours("ADD", c_ours)
    assert_result_shape(mine[1], version)
    ref[1].pop("dns", None)
    mine[1].pop("dns", None)
    assert mine == ref
