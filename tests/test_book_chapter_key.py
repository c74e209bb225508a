"""The first screen says what to remember (#24): every chapter opens with an "이 장의 핵심" box.

Directly under the ``# `` title of the first cell (a markdown cell) comes a ``{admonition} 이 장의 핵심`` box of
class ``chapter-key`` with three bold labels: **주장** (the claim), **측정** (the one number that shows it, glued
from the chapter's own run by a code cell of the same notebook, never typed) and **코드 지도** (a ``{ref}`` to
chapter 1's code map, label ``code-map``). The box stays short: at most 200 non-space characters of prose.

Source-level: reads the notebooks, needs no build.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
sys.path.insert(0, str(BOOK.parent / "scripts"))
import notebook_setup_cell  # noqa: E402

from labs.prediction import FOLD_CLOSE, KEY_FOLD_OPEN  # noqa: E402

CHAPTERS = sorted(BOOK.glob("[01][0-9]_*.ipynb"))
LABELS = ("주장", "측정", "코드 지도")
MAX_PROSE = 200
SETUP_TAG = "course-setup"

_OPEN = re.compile(r"^(:{3,})\{admonition\}[ \t]+이 장의 핵심[ \t]*$")
_GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::[^`]*)?`")
_GLUE_CALL = re.compile(r"""\bglue\(\s*["']([^"']+)["']""")
_CODE_MAP = re.compile(r"\{ref\}`[^`]*<code-map>`|\{ref\}`code-map`|\]\(01_structure\.ipynb#code-map\)")


def box_prose_chars(body: str) -> int:
    """Non-space characters a reader reads in the box body: roles and links count as their text, a glued value as 4."""
    text = _GLUE_ROLE.sub("0000", body)
    text = re.sub(r"\{ref\}`([^`<]*?)\s*<[^>]*>`", r"\1", text)
    text = re.sub(r"\{\w+\}`([^`]*)`", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*`$]", "", text)
    return len(re.sub(r"\s", "", text))


def key_box_problems(cells: list[dict]) -> list[str]:
    """Everything wrong with a notebook's "이 장의 핵심" box (an empty list when it is right).

    A leading markdown cell tagged ``course-setup`` (where the notebook must sit to run; the site removes it,
    scripts/notebook_setup_cell.py writes it) comes before the title; no code cell may."""
    if cells and cells[0]["cell_type"] == "markdown" and SETUP_TAG in cells[0].get("metadata", {}).get("tags", []):
        cells = cells[1:]
    if not cells or cells[0]["cell_type"] != "markdown":
        return ["첫 셀이 마크다운이 아닙니다(상자는 코드 셀보다 앞, 제목 바로 아래에 있어야 합니다)"]
    lines = "".join(cells[0]["source"]).splitlines()
    if not lines or not lines[0].startswith("# "):
        return ["첫 셀의 첫 줄이 '# ' 제목이 아닙니다"]
    rest = [i for i, line in enumerate(lines[1:], start=1) if line.strip()]
    opening = _OPEN.match(lines[rest[0]]) if rest else None
    if not opening:
        return ["제목 다음 줄이 ':::{admonition} 이 장의 핵심' 상자가 아닙니다"]
    fence, start = opening.group(1), rest[0]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == fence), None)
    if end is None:
        return [f"'이 장의 핵심' 상자를 닫는 {fence} 줄이 없습니다"]
    body_lines = lines[start + 1:end]
    problems = []
    options = {m.group(1): m.group(2).split() for line in body_lines if (m := re.match(r"^:(\w+):\s*(.*)$", line))}
    if "chapter-key" not in options.get("class", []):
        problems.append("상자에 ':class: chapter-key'가 없습니다")
    folds = (KEY_FOLD_OPEN, FOLD_CLOSE)  # Jupyter's fold of the claim (labs.prediction): the site drops it
    body = "\n".join(line for line in body_lines if not re.match(r"^:\w+:", line) and line.strip() not in folds)
    for label in LABELS:
        if not re.search(rf"^\*\*{label}\*\*:", body, re.M):
            problems.append(f"상자에 '**{label}**:'로 시작하는 줄이 없습니다")
    glued = {key for c in cells if c["cell_type"] == "code" for key in _GLUE_CALL.findall("".join(c["source"]))}
    measured = next((line for line in body.splitlines() if line.startswith("**측정**")), "")
    keys = _GLUE_ROLE.findall(measured)
    if not keys:
        problems.append("**측정** 줄에 {glue:text}`...`로 넣은 측정값이 없습니다(숫자를 손으로 적지 않습니다)")
    problems += [f"이 노트북의 코드 셀이 glue하지 않은 이름: {key}" for key in _GLUE_ROLE.findall(body) if key not in glued]
    if not _CODE_MAP.search(body):
        problems.append("상자에 1장 코드 지도로 가는 참조({ref}`1장 코드 지도 <code-map>`)가 없습니다")
    chars = box_prose_chars(body)
    if chars > MAX_PROSE:
        problems.append(f"상자의 글이 공백을 빼고 {chars}자로 {MAX_PROSE}자를 넘습니다")
    return problems


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_there_are_fourteen_chapters():
    assert [p.stem[:2] for p in CHAPTERS] == [f"{i:02d}" for i in range(1, 15)]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_opens_with_its_key_box(path):
    problems = key_box_problems(_cells(path))
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.stem)
def test_the_notebook_starts_with_the_setup_cell_the_script_writes(path):
    """Byte for byte what scripts/notebook_setup_cell.py writes (the archive test compares it the same way): a
    notebook editor that drops the last line's newline is caught here, not only after a site build."""
    assert notebook_setup_cell.problems(path) == []


def test_the_setup_cell_check_sees_a_changed_cell(tmp_path):
    notebook = json.loads((BOOK / "03_backward.ipynb").read_text(encoding="utf-8"))
    notebook["cells"][0]["source"][-1] = notebook["cells"][0]["source"][-1].rstrip("\n")
    changed = tmp_path / "03_backward.ipynb"
    changed.write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    assert notebook_setup_cell.problems(changed)


def test_key_glue_names_are_unique_book_wide():
    names = [key for p in sorted(BOOK.glob("*.ipynb")) for c in _cells(p) if c["cell_type"] == "code"
             for key in _GLUE_CALL.findall("".join(c["source"]))]
    doubled = sorted({n for n in names if names.count(n) > 1})
    assert not doubled, f"책 전체에서 두 번 glue한 이름: {doubled}"


def test_chapter_one_labels_its_code_map():
    text = "".join(next(c for c in _cells(BOOK / "01_structure.ipynb") if c["cell_type"] == "markdown"
                        and SETUP_TAG not in c["metadata"].get("tags", []))["source"])
    assert re.search(r"^\(code-map\)=\n#+ .*지도", text, re.M), "1장의 코드 지도 제목 바로 앞에 (code-map)= 라벨이 있어야 합니다"


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)}


def _code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {"tags": ["remove-input"]}, "outputs": [], "execution_count": None,
            "source": text.splitlines(keepends=True)}


GOOD_BOX = (":::{admonition} 이 장의 핵심\n:class: chapter-key\n**주장**: 복제본이 같아집니다.\n\n"
            "**측정**: 지문 {glue:text}`ch99-key-x`종류.\n\n**코드 지도**: {ref}`1장 코드 지도 <code-map>`의 ② 줄입니다.\n:::\n")


def test_the_checker_passes_a_good_box():
    cells = [_md("# 99. 시험\n\n" + GOOD_BOX + "\n본문입니다."), _code('glue("ch99-key-x", 1, display=False)')]
    assert key_box_problems(cells) == []


def test_the_checker_passes_the_setup_cell_before_the_title():
    setup = {"cell_type": "markdown", "metadata": {"tags": ["remove-cell", SETUP_TAG]}, "source": ["실행 안내"]}
    glue = _code('glue("ch99-key-x", 1, display=False)')
    assert key_box_problems([setup, _md("# 99. 시험\n\n" + GOOD_BOX), glue]) == []
    # a code cell still may not come first, nor an untagged markdown cell before the title
    assert "첫 셀이 마크다운이 아닙니다" in key_box_problems([setup, glue, _md("# 99. 시험\n\n" + GOOD_BOX)])[0]
    assert "제목이 아닙니다" in key_box_problems([_md("실행 안내"), _md("# 99. 시험\n\n" + GOOD_BOX), glue])[0]


def test_the_checker_reports_broken_boxes():
    glue = _code('glue("ch99-key-x", 1, display=False)')
    # the box after a code cell: the first cell is code
    assert "첫 셀이 마크다운이 아닙니다" in key_box_problems([glue, _md("# 99. 시험\n\n" + GOOD_BOX)])[0]
    # text between the title and the box
    assert "이 장의 핵심' 상자가 아닙니다" in key_box_problems([_md("# 99. 시험\n\n먼저 글.\n\n" + GOOD_BOX), glue])[0]
    # a glue name no cell defines
    problems = key_box_problems([_md("# 99. 시험\n\n" + GOOD_BOX.replace("ch99-key-x", "ch99-key-missing")), glue])
    assert any("ch99-key-missing" in p for p in problems), problems
    # a number typed by hand, no code map, no class, too long
    broken = GOOD_BOX.replace("{glue:text}`ch99-key-x`", "1").replace("{ref}`1장 코드 지도 <code-map>`", "1장")
    broken = broken.replace(":class: chapter-key\n", "").replace("복제본이 같아집니다.", "아주 긴 주장입니다. " * 30)
    problems = key_box_problems([_md("# 99. 시험\n\n" + broken), glue])
    for expected in ("glue:text", "code-map", "chapter-key", "200자"):
        assert any(expected in p for p in problems), (expected, problems)
