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
    assert answered.startswith("2 / "), answered
    assert right == "1", right
    assert "2문제를 풀었고, 1문제를 맞혔습니다" in summary, summary
