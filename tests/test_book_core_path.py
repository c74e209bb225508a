"""The one-hour path: what the intro lists is counted from the chapters, and the real book's core
path fits in an hour (≤ 25,000 characters of prose), every chapter keeping at least one core section.

The count on the built site is made here independently of the build's own count (book/_ext/core_path.py):
this test reads the HTML a reader gets, the extension read the doctree.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from bs4 import BeautifulSoup

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from minibook import build, make_book  # noqa: E402

CORE_LIMIT = 25_000
# 본문이 아닌 것: 코드, 셀 출력, 표, 그림, 수식, 퀴즈, 단추, 제목의 링크 기호
NOT_PROSE = (".cell_input, .cell_output, pre, table, figure, .math, math, .ddp-quiz, .toggle-button, .headerlink, "
             "script, style, .highlight, div.literal-block-wrapper, h1, h2, h3, h4")


def core_chars(path: Path) -> tuple[int, list[str]]:
    """Prose characters of a chapter's opener and "(핵심)" sections, and the core section titles."""
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    top = soup.select_one('[role="main"] section')
    if top is None:
        return 0, []
    sections = top.find_all("section", recursive=False)
    titles = [h2.get_text().replace("#", "").strip() for s in sections if (h2 := s.find("h2")) is not None]
    core = [s for s, t in zip(sections, titles) if t.endswith("(핵심)")]
    for s in sections:
        s.extract()
    parts = [top] + core
    for part in parts:
        for el in part.select(NOT_PROSE):
            el.decompose()
    return sum(len(re.sub(r"\s", "", p.get_text())) for p in parts), [t for t in titles if t.endswith("(핵심)")]


def test_intro_lists_each_core_stop_with_minutes_counted_from_the_chapter(tmp_path):
    short = "짧은 문장입니다. " * 10
    long = "조금 더 긴 문장을 여기에 씁니다. " * 60
    chapter = (f"# 시험 장\n\n{short}\n\n## 첫 핵심 (핵심)\n\n{long}\n\n```python\nx = 1  # 코드는 세지 않는다\n```\n\n"
               f"## 깊이 (심화)\n\n{long}\n\n## 둘째 핵심 (핵심)\n\n{short}\n")
    book = make_book(tmp_path, {"book/intro.md": "# 소개\n\n```{core-path}\n```\n", "book/ch.md": chapter})
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    intro = (book / "_build" / "html" / "book" / "intro.html").read_text(encoding="utf-8")
    listing = BeautifulSoup(intro, "html.parser").select_one(".ddp-core-path")
    links = [a.get_text() for a in listing.select("li a")]
    assert links == ["시험 장", "첫 핵심", "둘째 핵심"], links  # 심화 절은 길에 없다
    expected = (len(re.sub(r"\s", "", short)) * 2 + len(re.sub(r"\s", "", long)))
    assert f"본문 {expected:,}자" in listing.get_text(), listing.get_text()
    minutes = -(-expected // 500)
    assert f"약 {minutes}분" in listing.get_text()


def test_the_book_core_path_fits_in_an_hour(site_root):
    chapters = sorted((site_root / "book").glob("[01][0-9]_*.html"))
    assert len(chapters) >= 12
    counts = {p.stem: core_chars(p) for p in chapters}
    without_core = [name for name, (_, titles) in counts.items() if not titles]
    total = sum(chars for chars, _ in counts.values())
    table = "\n".join(f"{name}: {chars}자, {titles}" for name, (chars, titles) in counts.items())
    print(f"핵심 경로 본문 {total:,}자\n{table}")
    assert not without_core, f"(핵심) 절이 하나도 없는 장: {without_core}"
    assert total <= CORE_LIMIT, f"핵심 경로 본문이 {total:,}자로 {CORE_LIMIT:,}자를 넘습니다:\n{table}"


def test_the_intro_shows_the_built_core_path(site_root):
    intro = BeautifulSoup((site_root / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    listing = intro.select_one(".ddp-core-path")
    assert listing is not None, "소개 페이지에 한 시간 코스 목록(core-path)이 없습니다"
    assert len(listing.select("li")) >= 12
    assert re.search(r"핵심 절만 읽으면 약 \d+분", listing.get_text())
