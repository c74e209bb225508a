"""The first cell of every notebook of the book: where the notebook must sit to run (one markdown cell).

A chapter downloaded alone from the site imports ``labs`` and reads ``quizzes/`` next to it, so it runs only from
the course's folder. Its first cell says so; the site hides it (tag ``remove-cell``), a reader who opens the
``.ipynb`` reads it first. The key box stays the first thing the site shows (``tests/test_book_chapter_key.py``).

    .venv/bin/python scripts/notebook_setup_cell.py           # insert or update the cell in book/*.ipynb
    .venv/bin/python scripts/notebook_setup_cell.py --check   # exit 1 if a notebook lacks it or has another text

Run it after adding a chapter. The edit is one inserted (or replaced) cell; nothing else in the file changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

BOOK = Path(__file__).resolve().parent.parent / "book"
TAG = "course-setup"
TAGS = ["remove-cell", TAG]
CELL_ID = "course-setup"


def setup_text(notebook: str) -> str:
    """The cell's Markdown for ``book/<notebook>``."""
    return (f"**이 노트북을 직접 실행하려면** 코스 전체가 필요합니다. 사이트 위쪽의 내려받기 단추에서 "
            f"\"코스 전체 (.zip)\"를 받아 압축을 풀면, 이 파일은 그 안의 `book/{notebook}`에 있습니다.\n"
            "\n"
            "그 폴더에서 `make venv`를 한 번 실행하고, 이 노트북을 그 자리(`book/`)에서 `.venv`의 파이썬 커널로 여세요. "
            "`import labs`는 그 폴더의 `labs/`를, 확인 문제는 옆의 `quizzes/`를 씁니다. "
            "명령줄에서는 `cd book && ../.venv/bin/jupyter execute " + notebook + "`로 끝까지 실행됩니다.\n")


def setup_cell(notebook: str) -> dict:
    return {"cell_type": "markdown", "id": CELL_ID, "metadata": {"tags": TAGS},
            "source": setup_text(notebook).splitlines(keepends=True)}


def is_setup_cell(cell: dict) -> bool:
    return TAG in cell.get("metadata", {}).get("tags", [])


def notebooks() -> list[Path]:
    return sorted(BOOK.glob("*.ipynb"))


def problems(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    if not cells or cells[0] != setup_cell(path.name):
        return [f"{path.name}: 첫 셀이 이 노트북의 실행 안내 셀이 아닙니다 (scripts/notebook_setup_cell.py로 넣으세요)"]
    if sum(map(is_setup_cell, cells)) != 1:
        return [f"{path.name}: 실행 안내 셀이 여러 개입니다"]
    return []


Edit = Callable[[list[dict], Path], list[dict]]  # a notebook's cells (and its path) → the cells it should have


def rewrite(path: Path, edit: Edit) -> bool:
    """Write the notebook with ``edit(cells, path)`` as its cells (the book's JSON layout); True when it changed."""
    text = path.read_text(encoding="utf-8")
    notebook = json.loads(text)
    notebook["cells"] = edit(notebook["cells"], path)
    new = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def cli(description: str, all_right: str, problems: Callable[[Path], list[str]], edit: Edit) -> None:
    """A notebook script's command line: fix every book/*.ipynb with ``edit``, or only check (``--check``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="고치지 않고 검사만 (문제가 있으면 종료 코드 1)")
    args = parser.parse_args()
    if args.check:
        found = [problem for path in notebooks() for problem in problems(path)]
        print("\n".join(found) or all_right)
        sys.exit(1 if found else 0)
    changed = [path.name for path in notebooks() if rewrite(path, edit)]
    print(f"고친 노트북 {len(changed)}개: {', '.join(changed) or '없음'}")


def with_setup_cell(cells: list[dict], path: Path) -> list[dict]:
    return [setup_cell(path.name), *(cell for cell in cells if not is_setup_cell(cell))]


def main() -> None:
    cli("book/*.ipynb의 첫 셀(실행 안내)을 넣거나 검사합니다.", "모든 노트북의 첫 셀이 실행 안내입니다.", problems,
        with_setup_cell)


if __name__ == "__main__":
    main()
