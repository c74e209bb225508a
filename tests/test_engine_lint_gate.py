"""The lint and type gate: `make test` runs `make lint` first (ruff, then mypy, both configured in pyproject.toml),
and each tool fails on what it is there to find, with the project's own configuration."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, cwd=REPO, timeout=300)


def test_make_test_runs_the_gate_before_anything_else():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    test_target = re.search(r"^test: (.*)$", makefile, flags=re.M)
    lint_target = re.search(r"^lint: .*\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert test_target and test_target[1].split()[0] == "lint", "make test는 lint부터 해야 합니다"
    assert lint_target and "ruff check labs tests book/_ext" in lint_target[1] and "mypy" in lint_target[1]


def test_a_lint_finding_fails_ruff(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom labs.launch import _stop_all\n\n\n\ndef f():\n    return 1\n", encoding="utf-8")
    found = _run("ruff", "check", "--config", str(REPO / "pyproject.toml"), "--no-cache", "--output-format=concise",
                 str(probe))
    assert found.returncode == 1, found.stdout
    for rule in ("unused-import", "too-many-blank-lines", "import-private-name"):  # F401, E303, PLC2701
        assert rule in found.stdout, (rule, found.stdout)


def test_a_type_error_fails_mypy(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def half(n: int) -> int:\n    return n / 2\n", encoding="utf-8")
    found = _run("mypy", "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                 str(probe))
    assert found.returncode == 1 and "Incompatible return value type" in found.stdout, found.stdout


def test_the_repository_itself_passes_the_gate():
    assert _run("ruff", "check", "labs", "tests", "book/_ext").returncode == 0
