"""Build gates: a failing lab cell fails the build, unchanged chapters come from the cache,
and a change in labs/ invalidates that cache."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minibook import REPO, build, make_book, notebook  # noqa: E402

sys.path.insert(0, str(REPO / "book" / "_ext"))
from lab_cache import source_digest  # noqa: E402

INTRO = "# 소개\n\n시험용 책입니다.\n"


def test_failing_lab_check_fails_the_build(tmp_path):
    book = make_book(tmp_path, {"book/intro.md": INTRO, "book/ch.ipynb": notebook(
        "from labs.errors import LabCheckFailed\nraise LabCheckFailed('복제본이 다릅니다')")})
    proc = build(book)
    assert proc.returncode != 0, "a raising lab cell must fail the build"
    assert "LabCheckFailed" in proc.stdout + proc.stderr


def test_unchanged_chapter_is_not_executed_again(tmp_path):
    counter = tmp_path / "runs.txt"
    book = make_book(tmp_path, {"book/intro.md": INTRO, "book/ch.ipynb": notebook(
        f"open({str(counter)!r}, 'a').write('run\\n')")})
    assert build(book).returncode == 0
    assert build(book).returncode == 0
    assert counter.read_text().count("run") == 1, "the second build must come from the execution cache"


def test_changed_lab_code_reexecutes_unchanged_chapters(tmp_path):
    counter = tmp_path / "runs.txt"
    book = make_book(tmp_path, {"book/intro.md": INTRO, "book/ch.ipynb": notebook(
        f"open({str(counter)!r}, 'a').write('run\\n')")})
    (book / "labs").mkdir()
    (book / "labs" / "lesson.py").write_text("VALUE = 1\n")
    assert build(book).returncode == 0
    (book / "labs" / "lesson.py").write_text("VALUE = 2\n")  # the chapter itself is unchanged
    assert build(book).returncode == 0
    assert counter.read_text().count("run") == 2, "a change in labs/ must re-execute every chapter"


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
