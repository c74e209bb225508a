"""The one-hour path: what the intro promises is counted from everything the path shows, and it fits.

The count on the built site is made here from the HTML a reader gets, independently of the build's own
count (book/_ext/core_path.py reads the doctree): prose, the code lines a page shows (folded lab cells
are not shown), tables and printed outputs, figures, prediction boxes, quiz questions and the boxes a
reader writes in, at the rates the intro states.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from bs4 import BeautifulSoup, Tag

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from minibook import build, make_book  # noqa: E402

HOUR = 60  # 분
# 읽는 속도 (소개 페이지가 이 값들을 말한다; test_the_intro_states_the_rates)
PROSE_PER_MIN, CODE_LINES_PER_MIN, TABLE_PER_MIN = 500, 10, 500
FIGURE_MIN = PREDICTION_MIN = QUESTION_MIN = 1.0
WRITE_BOX_MIN = 2.0
FOLDED = ("div.cell.tag_hide-input > .cell_input, details.hide, details.lab-checks-box > :not(summary), "
          "script, style, .headerlink, h1, h2, .toggle-button, .math, math")


def _chars(text: str) -> int:
    return len(re.sub(r"\s", "", text))


@dataclass
class Count:
    prose: int = 0
    code: int = 0
    tables: int = 0
    figures: int = 0
    predictions: int = 0
    questions: int = 0
    write_boxes: int = 0

    @property
    def minutes(self) -> float:
        return (self.prose / PROSE_PER_MIN + self.code / CODE_LINES_PER_MIN + self.tables / TABLE_PER_MIN
                + self.figures * FIGURE_MIN + self.predictions * PREDICTION_MIN + self.questions * QUESTION_MIN
                + self.write_boxes * WRITE_BOX_MIN)


def count(part: Tag) -> Count:
    """What a reader meets in ``part`` (the tag is consumed)."""
    for el in part.select(FOLDED):
        el.decompose()
    c = Count(figures=len(part.select(".plotly-graph-div, img")), predictions=len(part.select(".ddp-prediction")),
              questions=len(part.select(".ddp-quiz-q")), write_boxes=len(part.select("textarea")))
    for el in part.select(".plotly-graph-div, figure, img, .ddp-quiz, textarea"):
        el.decompose()
    for pre in part.select("pre"):
        if pre.find_parent(class_="cell_output") is not None:
            c.tables += _chars(pre.get_text())
        else:
            c.code += sum(1 for line in pre.get_text().splitlines() if line.strip())
        pre.decompose()
    for table in part.select("table"):
        c.tables += _chars(table.get_text())
        table.decompose()
    c.prose = _chars(part.get_text())
    return c


def _title(section: Tag) -> str:
    h = section.find(["h2", "h3"])
    return h.get_text().replace("#", "").strip() if h is not None else ""


def chapter_path(path: Path) -> tuple[float, list[str]]:
    """Minutes of a chapter's opener and "(핵심)" sections, and the core section titles."""
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    top = soup.select_one('[role="main"] section')
    assert top is not None, path
    sections = top.find_all("section", recursive=False)
    core = [s for s in sections if _title(s).endswith("(핵심)")]
    for s in sections:
        s.extract()
    return sum(count(part).minutes for part in [top, *core]), [_title(s) for s in core]


def test_intro_lists_each_core_stop_with_minutes_counted_from_the_chapter(tmp_path):
    short = "짧은 문장입니다. " * 10
    long = "조금 더 긴 문장을 여기에 씁니다. " * 60
    code = "\n".join(f"x{i} = {i}" for i in range(25))
    chapter = (f"# 시험 장\n\n{short}\n\n## 첫 핵심 (핵심)\n\n{long}\n\n```python\n{code}\n```\n\n"
               f"| 열 | 값 |\n|---|---|\n| 가나다 | 123 |\n\n"
               f"## 깊이 (심화)\n\n{long}\n\n```python\nx = 1\n```\n\n## 둘째 핵심 (핵심)\n\n{short}\n")
    depth_only = f"# 깊이만 있는 장\n\n첫머리 문장입니다.\n\n## 하나 (심화)\n\n{long}\n"
    book = make_book(tmp_path, {"book/intro.md": "# 소개\n\n```{core-path-start}\n```\n\n```{core-path}\n```\n",
                                "book/ch.md": chapter, "book/ch2.md": depth_only, "book/other.md": "# 용어\n\n## 가\n\n글\n"})
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    intro = BeautifulSoup((book / "_build" / "html" / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    listing = intro.select_one(".ddp-core-path")
    assert listing is not None
    items = [li.get_text(" ", strip=True) for li in listing.select("li")]
    assert [a.get_text() for a in listing.select("li a")] == ["시험 장", "첫 핵심", "둘째 핵심", "깊이만 있는 장"], items
    assert "장 첫머리만" in items[1]  # 절이 모두 심화인 장도 첫머리로 길에 있고, 표시가 없는 페이지(용어)는 없다
    prose = _chars(short) * 2 + _chars(long)
    assert f"본문 {prose + _chars('첫머리 문장입니다.'):,}자" in listing.get_text(), listing.get_text()
    assert "코드 25줄" in listing.get_text()  # 심화 절의 코드 한 줄은 세지 않는다
    assert f"표와 출력 {_chars('열값가나다123')}자" in listing.get_text()
    minutes = (prose / PROSE_PER_MIN + 25 / CODE_LINES_PER_MIN + _chars("열값가나다123") / TABLE_PER_MIN)
    assert f"시험 장 — 약 {math.ceil(minutes)}분" in items[0], items[0]
    start = intro.select_one(".ddp-course-start")
    assert start is not None and re.search(r"핵심 경로 약 \d+분", start.get_text())
    assert start.select_one("a.ddp-start-button")["href"].endswith("ch.html")


def test_the_book_core_path_fits_in_an_hour(site_root):
    chapters = sorted((site_root / "book").glob("[01][0-9]_*.html"))
    assert len(chapters) >= 14
    counts = {p.stem: chapter_path(p) for p in chapters}
    total = sum(minutes for minutes, _ in counts.values())
    table = "\n".join(f"{name}: {minutes:.1f}분, {titles}" for name, (minutes, titles) in counts.items())
    print(f"핵심 경로 {total:.1f}분\n{table}")
    assert total <= HOUR, f"핵심 경로가 {total:.1f}분으로 {HOUR}분을 넘습니다:\n{table}"
    intro = BeautifulSoup((site_root / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    start = intro.select_one(".ddp-course-start")
    assert start is not None, "소개 첫 화면에 핵심 경로 상자가 없습니다"
    promised = int(re.search(r"핵심 경로 약 (\d+)분", start.get_text()).group(1))
    assert abs(promised - total) <= 0.1 * total, f"소개는 {promised}분, 이 테스트가 센 것은 {total:.1f}분\n{table}"


def test_every_core_heading_is_a_stop_of_the_path(site_root):
    """A "(핵심)" heading inside a (심화) section would be off the list: core headings are ## only."""
    for page in sorted((site_root / "book").glob("[01][0-9]_*.html")):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        deep = [h.get_text().replace("#", "").strip() for h in soup.select('[role="main"] h3, [role="main"] h4')]
        assert not [t for t in deep if t.endswith("(핵심)")], f"{page.name}: ## 아래의 (핵심) 제목은 목록에 없습니다"


def test_the_intro_shows_the_built_core_path_and_its_rates(site_root):
    intro = BeautifulSoup((site_root / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    listing = intro.select_one(".ddp-core-path")
    assert listing is not None, "소개 페이지에 한 시간 코스 목록(core-path)이 없습니다"
    assert len(listing.select("li")) >= 14
    text = listing.get_text()
    for rate in (f"본문은 분당 {PROSE_PER_MIN}자", f"코드는 분당 {CODE_LINES_PER_MIN}줄", f"표와 출력은 분당 {TABLE_PER_MIN}자",
                 f"그림 하나 {FIGURE_MIN:g}분", f"예측 하나 {PREDICTION_MIN:g}분", f"한 문항 {QUESTION_MIN:g}분",
                 f"칸 하나 {WRITE_BOX_MIN:g}분"):
        assert rate in text, (rate, text)
    first_screen = intro.select_one('[role="main"]').get_text()[:600]
    assert "핵심 경로 약" in first_screen, "첫 화면에 핵심 경로가 몇 분인지가 없습니다"


@pytest.mark.parametrize("hide_mode, code, output", [
    (None, 2, 11), ("input", 0, 11), ("output", 2, 0), ("input+output", 0, 0), ("all", 0, 0)])
def test_folded_code_and_outputs_are_not_counted(hide_mode, code, output):
    """A lab cell's folded input or output (myst-nb's hide_mode) is not on the page a reader reads."""
    from docutils import nodes

    sys.path.insert(0, str(TESTS.parent / "book" / "_ext"))
    import core_path

    source = nodes.container("", nodes.literal_block("", "x = 1\n\ny = 2\n"), classes=["cell_input"])
    printed = nodes.container("", nodes.literal_block("", "측정값 12345 678"), classes=["cell_output"])
    cell = nodes.container("", source, printed, classes=["cell"])
    if hide_mode:
        cell["hide_mode"] = hide_mode
    shown = core_path.shown(cell)
    assert (shown.code, shown.tables) == (code, output)
