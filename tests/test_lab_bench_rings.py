"""Chapter 8's rings (labs/ddp/ring.py) inside the ``bench`` lab on real gloo ranks, where only their
correctness is asserted: a copy of the package with a broken pipelined ring is caught, and the ring
at N=4 matches the library. No timing is asserted here, so unlike test_lab_bench.py these tests need not
run alone (tests/parallel.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clean_env

import labs

pytestmark = pytest.mark.timeout(240)


def test_broken_pipelined_ring_is_caught(tmp_path):
    """A real wrong ring, not an edited number: a copy of the package whose pipelined ring forgets to
    add the last segment of every chunk. The lab run on real ranks must fail rings_match_library."""
    shutil.copytree(Path(labs.__file__).parent, tmp_path / "labs")
    ring = tmp_path / "labs" / "ddp" / "ring.py"
    correct = "        if t < n - 1:\n            seg = segments[chunk][k]\n"
    assert correct in ring.read_text()
    ring.write_text(ring.read_text().replace(correct, correct.replace("t < n - 1", "t < n - 1 and k + 1 < len(segments[chunk])")))
    env = clean_env(PYTHONPATH=str(tmp_path))  # a real run of the broken copy: no lab replay or recording
    out = subprocess.run([sys.executable, "-m", "labs", "run", "bench", "--nproc", "2", "--param", "sizes=64K",
                          "--param", "repeats=1", "--param", "ddp_steps=2"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=200)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[실패] rings_match_library" in out.stdout


def test_ring_on_four_ranks_and_oversubscribed_race_not_applicable():
    result = labs.run("bench", nproc=4, sizes=(4 << 10, 1 << 20), repeats=2, warmup=1, memcpy_mb=1, ddp_steps=2)
    assert result.checks["rings_match_library"].ok, result.report()
    assert result.checks["pipelined_bytes_on_socket"].ok, result.report()
    if result.data["oversubscribed"]:
        assert not result.checks["pipelined_vs_library"].applicable
