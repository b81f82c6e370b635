"""The native shim under AddressSanitizer + UndefinedBehaviorSanitizer, fuzzed with libFuzzer.

``shim/fuzz/build.sh`` builds two things with clang-14: ``shim-fuzzer``, the shim's main logic in a
libFuzzer harness (``shim/fuzz/harness.c``: argv, environment, stdin, the embedded config block and
a scripted agent all come from the input, and the outcome is checked against the protocol), and
``cnichain-shim-asan``, the real program sanitized.  Here: every corpus input (the seeds, and each
input that ever found a bug, kept as a regression input) replays clean; a bounded fuzz run from
that corpus finds nothing; and the protocol tests run against the sanitized program
(``tests/sanitized_shim.py``).  A long run by hand: docs/testing.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FUZZ = ROOT / "shim" / "fuzz"
CORPUS = FUZZ / "corpus"
# Bounded in count and in time, whichever comes first (a loaded 2-core machine reaches fewer runs).
FUZZ_RUNS = 60000
FUZZ_SECONDS = 30
PER_INPUT_TIMEOUT = 120  # libFuzzer's hang detector: no input waits that long unless the shim hangs


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert shutil.which("clang-14"), "clang-14 is missing (./run installs it with libclang-rt-14-dev)"
    out = tmp_path_factory.mktemp("shim-fuzz")
    proc = subprocess.run(["sh", str(FUZZ / "build.sh"), str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def fuzzer(built: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Run the fuzzer with its artifacts (crash-*, timeout-*, ...) kept in ``workdir``."""
    return subprocess.run([str(built / "shim-fuzzer"), f"-artifact_prefix={workdir}/",
                           f"-timeout={PER_INPUT_TIMEOUT}", *args],
                          cwd=workdir, capture_output=True, text=True, timeout=600)


def findings(proc: subprocess.CompletedProcess, workdir: Path) -> str:
    """What a run found, in words: its artifacts and the report's lines (empty: nothing)."""
    artifacts = sorted(p.name for p in workdir.iterdir() if re.match(r"(crash|leak|timeout|oom|slow-unit)-", p.name))
    reports = [line for line in proc.stderr.splitlines()
               if "ERROR:" in line or "runtime error" in line or "cnichain shim fuzz:" in line or "SUMMARY" in line]
    return "\n".join(artifacts + reports)


def test_every_corpus_input_replays_clean(built: Path, tmp_path: Path) -> None:
    """Each seed and each input that once found a bug (regress-*) runs once, without a finding."""
    inputs = sorted(CORPUS.iterdir())
    assert len(inputs) >= 20 and sum(p.name.startswith("regress-") for p in inputs) >= 4
    proc = fuzzer(built, tmp_path, *map(str, inputs))
    assert proc.returncode == 0 and not findings(proc, tmp_path), findings(proc, tmp_path) or proc.stderr[-3000:]
    assert len(re.findall(r"^Executed .* in \d+ ms$", proc.stderr, re.M)) == len(inputs), proc.stderr[-3000:]


def test_a_bounded_fuzz_run_finds_nothing(built: Path, tmp_path: Path) -> None:
    work = tmp_path / "corpus"
    shutil.copytree(CORPUS, work)
    proc = fuzzer(built, tmp_path, f"-runs={FUZZ_RUNS}", f"-max_total_time={FUZZ_SECONDS}", "-print_final_stats=1",
                  "-max_len=65536", str(work))
    assert proc.returncode == 0 and not findings(proc, tmp_path), findings(proc, tmp_path) or proc.stderr[-3000:]
    executed = re.search(r"^stat::number_of_executed_units:\s+(\d+)$", proc.stderr, re.M)
    assert executed, proc.stderr[-3000:]
    assert int(executed.group(1)) > len(os.listdir(CORPUS)), "the run never got past the seed corpus"


def test_the_protocol_tests_pass_against_the_sanitized_shim(built: Path) -> None:
    """test_shim_protocol.py's native-shim cases, with the sanitized program as the native shim."""
    env = {**os.environ, "CNICHAIN_SANITIZED_SHIM": str(built / "cnichain-shim-asan")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.sanitized_shim", "-p", "no:cacheprovider",
                           "-q", "-k", "native", "tests/unit/test_shim_protocol.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    served = re.search(rf"^sanitized shim: {re.escape(str(built / 'cnichain-shim-asan'))} served (\d+) times$",
                       proc.stdout, re.M)
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert served and passed, proc.stdout[-2000:]
    assert int(passed.group(1)) >= 20 and int(served.group(1)) >= int(passed.group(1)), proc.stdout[-2000:]
