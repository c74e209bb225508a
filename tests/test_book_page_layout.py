"""What a reader sees of a chapter's code cells: the lab runs, figures and checks stay in the
notebook (and run in every build), but their code is folded away (``hide-input``: a 펼쳐 보기 line, for the
cells that run a lab) or not shown at all (``remove-input``: a check, a quiz call, a cell that only draws a figure or a
table or shows a result). Only the code the reader
writes (``%%writefile``, or a cell tagged ``reader-code``) is shown open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
HIDDEN = {"hide-input", "remove-input", "remove-cell"}


def open_code_cells(path: Path) -> list[str]:
    """The first line of every code cell of ``path`` whose code a reader would see unfolded."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        source, tags = "".join(cell["source"]), set(cell["metadata"].get("tags", []))
        if tags & HIDDEN or "reader-code" in tags or source.lstrip().startswith("%%writefile"):
            continue
        found.append(source.strip().splitlines()[0] if source.strip() else "(빈 셀)")
    return found


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 13


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_harness_cells_are_folded(path):
    assert open_code_cells(path) == [], (
        f"{path.name}: 실습·그림·확인 셀의 코드는 접어 두세요(셀 태그 hide-input, 확인만 하는 셀은 remove-input). "
        "독자가 직접 쓰는 코드라면 태그 reader-code를 붙이세요.")


def test_the_rule_sees_an_open_cell(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": ["labs.run('x')\n"]},
                    {"cell_type": "code", "metadata": {"tags": ["hide-input"]}, "source": ["viz.show(fig)\n"]},
                    {"cell_type": "code", "metadata": {}, "source": ["%%writefile my.py\n", "x = 1\n"]}]}
    path = tmp_path / "t.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert open_code_cells(path) == ["labs.run('x')"]
