"""Reader experience in a real browser: every page at phone width, the intro's quiz progress, and
what every chapter page offers (its notebook, the GPU-node command). Accessibility, dark mode and
page weight are measured in each page's one desktop visit (test_site_pages.py)."""

from __future__ import annotations

import html as html_lib
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_server import full_page_screenshot, pages_to_check, require_site, screenshot_dir  # noqa: E402

PHONE = {"width": 390, "height": 844}
TALLEST_TABLE_PX = 1_500  # 휴대폰에서 표 하나가 두 화면을 넘지 않는다
TALLEST_BLOCK_PX = 2_500  # 표가 아닌 덩어리(퀴즈, 용어 목록, 셀 출력)도 세 화면을 넘지 않는다
DESKTOP = {"width": 1280, "height": 900}
CHAPTER = re.compile(r"book/\d\d[a-z]?_[a-z_]+\.html$")
PAGES = pages_to_check()
CHAPTERS = [p for p in PAGES if CHAPTER.search(p)]

# 코드 블록, 그림, 표, 수식은 안에서 가로 스크롤이 허용된다. 그 밖의 요소는 화면 폭을 넘으면 안 된다.
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  const allowed = 'pre, .highlight, .plotly-graph-div, figure, table, div.math, .cell_output';
  const bad = [];
  for (const el of document.querySelectorAll('.bd-article *')) {
    const box = el.getBoundingClientRect();
    if (box.width && box.right > width + 1 && !el.closest(allowed)) bad.push(el.tagName.toLowerCase() + '.' + el.className);
  }
  return {width, scrollWidth: document.documentElement.scrollWidth, bad: bad.slice(0, 10)};
}"""


def _open(browser, base: str, page_path: str, **context_options):
    context = browser.new_context(**context_options)
    context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
    page = context.new_page()
    page.goto(base + page_path)
    page.wait_for_load_state("load")
    page.evaluate("document.fonts.ready.then(() => true)")  # 수식 글꼴까지 받은 뒤
    page.wait_for_timeout(800)  # plotly가 그릴 시간
    return context, page


@pytest.mark.parametrize("page_path", PAGES)
def test_phone_width_has_no_horizontal_overflow(chromium, site_url, page_path):
    context, page = _open(chromium, site_url, page_path, viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        result = page.evaluate(OVERFLOW_JS)
        figure_widths = page.eval_on_selector_all(".plotly-graph-div", "els => els.map(e => e.getBoundingClientRect().width)")
        # 화면보다 넓은 수식은 옆으로 스크롤되고, 키보드로도 스크롤할 수 있게 tabindex=0이어야 한다.
        wide_formulas = page.eval_on_selector_all(
            "div.math > math", "els => els.filter(m => m.scrollWidth > m.clientWidth + 1).map(m => m.tabIndex)")
        full_page_screenshot(page, screenshot_dir(), page_path, "phone")
    finally:
        context.close()
    assert result["scrollWidth"] <= result["width"] + 1 and not result["bad"], f"{page_path}: 가로 넘침 {result}"
    assert all(index == 0 for index in wide_formulas), f"{page_path}: 키보드로 스크롤할 수 없는 넓은 수식 {wide_formulas}"
    assert all(w <= PHONE["width"] for w in figure_widths), f"{page_path}: plotly 그림 폭 {figure_widths}"


# 처음 열었을 때 보이는 확인 결과 표와 assert 셀, 그리고 <details>를 모두 펼친 뒤 가장 높은 표
READER_VIEW_JS = """() => {
  // checkVisibility: 닫힌 <details> 안(content-visibility), display:none, visibility:hidden을 모두 '안 보임'으로 본다
  const shown = el => { const b = el.getBoundingClientRect();
                        return b.width > 0 && b.height > 0 && el.checkVisibility({visibilityProperty: true}); };
  const checkTables = [...document.querySelectorAll('table.lab-checks')].filter(shown).length;
  const assertCells = [...document.querySelectorAll('.bd-article .cell_input pre')]
      .filter(el => shown(el) && /assert_ok\\(|\\bassert\\s/.test(el.textContent)).length;
  document.querySelectorAll('.bd-article details').forEach(d => d.open = true);
  document.querySelectorAll('.ddp-awaiting').forEach(e => e.classList.remove('ddp-awaiting'));
  const tables = [...document.querySelectorAll('.bd-article table')].map(t => {
      const c = t.querySelector('caption'), box = t.closest('.pst-scrollable-table-container') || t;
      return {height: Math.round(t.getBoundingClientRect().height), caption: c ? c.textContent.slice(0, 60) : '',
              scrolls: box.scrollWidth > box.clientWidth + 2};
  });
  const blocks = [...document.querySelectorAll('.bd-article section > :not(section), .bd-article .cell_output > *')]
      .filter(el => !el.querySelector('section'))
      .map(el => ({height: Math.round(el.getBoundingClientRect().height), what: el.textContent.replace(/\\s+/g, ' ').slice(0, 60)}));
  return {checkTables, assertCells, tables, blocks};
}"""


def tallest_tables(tables: list[dict], limit: int = TALLEST_TABLE_PX) -> list[dict]:
    """The measured tables taller than ``limit`` pixels."""
    return [t for t in tables if t["height"] > limit]


def test_the_height_rule_sees_a_tall_table():
    tables = [{"height": 900, "caption": "a"}, {"height": 23_202, "caption": "b"}]
    assert tallest_tables(tables) == [{"height": 23_202, "caption": "b"}]


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
@pytest.mark.parametrize("page_path", PAGES)
def test_reader_sees_no_checks_on_load_and_every_table_fits(chromium, site_url, page_path, viewport):
    """On load a reader sees neither a check-result table (it is folded into its one-line summary)
    nor a cell that asserts; the page never scrolls sideways; and with every fold opened no table
    is taller than TALLEST_TABLE_PX."""
    phone = viewport is PHONE
    context, page = _open(chromium, site_url, page_path, viewport=viewport, is_mobile=phone, has_touch=phone)
    try:
        overflow = page.evaluate(OVERFLOW_JS)
        view = page.evaluate(READER_VIEW_JS)
    finally:
        context.close()
    assert view["checkTables"] == 0, f"{page_path}: 처음부터 펼쳐진 확인 결과 표 {view['checkTables']}개 (접힌 한 줄로 두세요)"
    assert view["assertCells"] == 0, f"{page_path}: 보이는 assert 셀 {view['assertCells']}개 (셀 태그 remove-input)"
    assert overflow["scrollWidth"] <= overflow["width"] + 1 and not overflow["bad"], f"{page_path}: 가로 넘침 {overflow}"
    if page_path.endswith("01_structure.html"):  # 표가 있는 장에서 측정이 비면 규칙이 아무것도 보지 못한 것
        assert any("확인 결과" in t["caption"] for t in view["tables"]), f"{page_path}: 확인 결과 표를 찾지 못했습니다"
    tall = tallest_tables(view["tables"])
    assert not tall, f"{page_path}: {TALLEST_TABLE_PX}px보다 높은 표 {tall} (좁은 화면에서는 요점이 아닌 열을 숨기세요)"
    if phone:
        scrolling = [t["caption"] for t in view["tables"] if t["scrolls"]]
        assert not scrolling, f"{page_path}: 휴대폰에서 옆으로 스크롤해야 보이는 열이 있는 표 {scrolling}"
        long_blocks = tallest_tables(view["blocks"], TALLEST_BLOCK_PX)
        assert not long_blocks, f"{page_path}: 휴대폰에서 {TALLEST_BLOCK_PX}px보다 긴 덩어리 {long_blocks}"


@pytest.mark.parametrize("page_path", CHAPTERS)
def test_chapter_offers_notebook_and_gpu_command(page_path):
    """Every chapter can be downloaded as a notebook and leads to the GPU commands: its own rendered
    lines or a link to the appendix, which shows every one of them."""
    html = (require_site() / page_path).read_text(encoding="utf-8")
    stem = Path(page_path).stem
    assert f'_sources/book/{stem}.ipynb"' in html, f"{page_path}: .ipynb 내려받기 링크가 없습니다"
    text = re.sub(r"<[^>]+>", "", html)
    has_own = "python -m labs run" in text and "torchrun" in text
    assert has_own or 'href="appendix_gpu.html' in html, f"{page_path}: GPU 노드 실행 명령도 부록 링크도 없습니다"


def test_appendix_shows_every_tested_command():
    from labs import commands

    text = html_lib.unescape(re.sub(r"<[^>]+>", "", (require_site() / "book/appendix_gpu.html").read_text(encoding="utf-8")))
    missing = [c for c in commands.readme_commands() if c not in text]
    assert not missing, f"부록에 테스트한 명령이 없습니다: {missing}"


def test_every_chapter_has_a_page():
    assert CHAPTERS, "장 페이지(book/NN_이름.html)가 하나도 없습니다"


@pytest.mark.parametrize("width", [390, 800])
def test_the_drawers_open_on_a_phone_and_a_tablet(chromium, site_url, width):
    """The ☰ and the page-contents button a reader sees open their drawers (book/_ext/korean_ui.py forwards the
    click to the copy the theme scripts wire); the chapter list reaches chapter 14, the contents a (핵심) section
    (chapter 9 has two; since the honest clock, chapters 8 and 10–13 are all (심화))."""
    context, page = _open(chromium, site_url, "book/09_miniddp.html", viewport={"width": width, "height": 844})
    try:
        page.locator(".primary-toggle:visible").first.click()
        page.wait_for_timeout(300)
        primary_open = page.evaluate("document.querySelector('#pst-primary-sidebar-modal').open")
        chapter_links = page.locator('#pst-primary-sidebar-modal a[href$="14_recipe.html"]:visible').count()
        page.keyboard.press("Escape")
        page.wait_for_timeout(300)
        page.locator(".secondary-toggle:visible").first.click()
        page.wait_for_timeout(300)
        secondary_open = page.evaluate("document.querySelector('#pst-secondary-sidebar-modal').open")
        core = page.locator("#pst-secondary-sidebar-modal a:visible", has_text="(핵심)").count()
    finally:
        context.close()
    assert primary_open and chapter_links == 1, f"{width}px: ☰를 눌러도 책 목차가 열리지 않습니다"
    assert secondary_open and core >= 1, f"{width}px: 이 페이지의 내용 단추를 눌러도 (핵심) 절 목록이 열리지 않습니다"


def test_the_chapter_list_still_folds_on_a_desktop(chromium, site_url):
    context, page = _open(chromium, site_url, "book/10_traps.html", viewport=DESKTOP)
    try:
        page.locator(".primary-toggle:visible").first.click()
        page.wait_for_timeout(300)
        folded = page.evaluate("document.querySelector('#pst-primary-sidebar').classList.contains('pst-sidebar-hidden')")
        modal = page.evaluate("document.querySelector('#pst-primary-sidebar-modal').open")
    finally:
        context.close()
    assert folded and not modal, "1280px에서 ☰는 목차를 접어야 합니다(서랍을 열지 않고)"


def test_intro_shows_quiz_progress_saved_in_the_browser(chromium, site_url):
    context, page = _open(chromium, site_url, "book/01_structure.html", viewport=DESKTOP)
    try:
        first = page.locator(".ddp-quiz-q").first
        first.locator('.ddp-quiz-choice[data-correct="0"]').first.click()
        first.locator('.ddp-quiz-choice[data-correct="1"]').click()
        page.locator(".ddp-quiz-q").nth(1).locator('.ddp-quiz-choice[data-correct="0"]').first.click()
        page.goto(site_url + "book/intro.html")
        row = page.locator('.ddp-progress tr:has(a[href="01_structure.html"])')
        answered = row.locator(".answered").inner_text()
        right = row.locator(".right").inner_text()
        summary = page.locator(".ddp-progress-summary").inner_text()
    finally:
        context.close()
    # 첫 답으로 센다: 1번은 틀린 뒤 맞혔고 2번은 틀렸으므로 맞힌 문제는 0
    assert answered.startswith("2 / "), answered
    assert right == "0", right
    assert "2문제를 풀었고, 첫 답으로 0문제를 맞혔습니다" in summary, summary


SEARCH_TEXT_START_JS = """() => [...document.querySelectorAll('form.bd-search')].filter(f => f.checkVisibility()).map(f => {
  const icon = f.querySelector('.fa-magnifying-glass'), input = f.querySelector('input');
  const start = input.getBoundingClientRect().left + parseFloat(getComputedStyle(input).paddingLeft);
  return start - icon.getBoundingClientRect().right;
})"""


@pytest.mark.parametrize("width", [390, 1280])
def test_the_search_icon_leaves_the_typed_text_free(chromium, site_url, width):
    """The magnifying glass sits inside the search field: typed text starts to its right."""
    context, page = _open(chromium, site_url, "search.html", viewport={"width": width, "height": 900})
    try:
        gaps = page.evaluate(SEARCH_TEXT_START_JS)
    finally:
        context.close()
    assert gaps, f"{width}px: 보이는 검색창이 없습니다"
    assert all(gap >= 0 for gap in gaps), f"{width}px: 검색창의 글자가 돋보기 아이콘 밑에서 시작합니다 (겹친 px: {gaps})"
