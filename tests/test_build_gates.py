"""Build gates: a failing lab cell fails the build, unchanged chapters come from the cache,
and a change in labs/ invalidates that cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
sys.path.insert(0, str(REPO / "book" / "_ext"))
from lab_cache import source_digest  # noqa: E402


def _notebook(*sources: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# 시험 장"]}]
    cells += [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [s]}
              for s in sources]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}}})


def _mini_book(tmp_path: Path, *sources: str) -> Path:
    """A copy of the real configuration with one chapter made of ``sources``."""
    book = tmp_path / "mini"
    (book / "book").mkdir(parents=True)
    shutil.copy(REPO / "_config.yml", book / "_config.yml")
    shutil.copytree(REPO / "book" / "_ext", book / "book" / "_ext")
    shutil.copy(REPO / "book" / "favicon.svg", book / "book" / "favicon.svg")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/ch\n")
    (book / "book" / "intro.md").write_text("# 소개\n\n시험용 책입니다.\n")
    (book / "book" / "ch.ipynb").write_text(_notebook(*sources))
    return book


def _build(book: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(JUPYTER_BOOK), "build", str(book), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True, timeout=300)


def test_failing_lab_check_fails_the_build(tmp_path):
    book = _mini_book(tmp_path, "from labs.errors import LabCheckFailed\n"
                                "raise LabCheckFailed('복제본이 다릅니다')")
    proc = _build(book)
    assert proc.returncode != 0, "a raising lab cell must fail the build"
    assert "LabCheckFailed" in proc.stdout + proc.stderr


def test_unchanged_chapter_is_not_executed_again(tmp_path):
    counter = tmp_path / "runs.txt"
    book = _mini_book(tmp_path, f"open({str(counter)!r}, 'a').write('run\\n')")
    assert _build(book).returncode == 0
    assert _build(book).returncode == 0
    assert counter.read_text().count("run") == 1, "the second build must come from the execution cache"


def test_lab_source_digest_tracks_labs_and_quizzes(tmp_path):
    (tmp_path / "labs").mkdir()
    (tmp_path / "book" / "quizzes").mkdir(parents=True)
    lab = tmp_path / "labs" / "x.py"
    quiz = tmp_path / "book" / "quizzes" / "q.yml"
    lab.write_text("A = 1\n")
    quiz.write_text("questions: []\n")
    first = source_digest(tmp_path)
    assert source_digest(tmp_path) == first
    lab.write_text("A = 2\n")
    second = source_digest(tmp_path)
    assert second != first
    quiz.write_text("questions: [1]\n")
    assert source_digest(tmp_path) != second
