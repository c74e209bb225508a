"""The built site in a real browser (headless Chromium through Playwright), network blocked.

One local HTTP server (127.0.0.1, port chosen by the OS) serves the site folder; every request
to another host is aborted and recorded (every page's own visit is in test_site_pages.py). The
root redirects to the intro; chapter 1 must render its plotly figure and have a working quiz whose
progress survives a reload; formulas (MathML written at build time) must be laid out with the
site's own math font, big operators included.

Site: ``DDP_SITE_DIR`` (default ``<repo>/_build/html``, built by ``make book``).
Browser: ``DDP_CHROMIUM`` (default ``/usr/bin/chromium``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_server  # noqa: E402  (tests/ has no __init__.py; see site_server's docstring)
from page_visit import NAV_TIMEOUT_MS, RENDER_TIMEOUT_MS, open_visit, rendered  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CHAPTER = "book/01_structure.html"
MATH_CHAPTER = "book/04_allreduce.html"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def shots() -> Path:
    return site_server.screenshot_dir()


@pytest.fixture
def visit(chromium, site_url, site_root):
    """A fresh context (empty localStorage) per test, network limited to the local server."""
    with open_visit(chromium, site_url, site_root) as v:
        yield v


# --------------------------------------------------------------------------- every page


def test_root_redirects_to_intro(visit):
    visit.page.goto(visit.base_url + site_server.REDIRECT_PAGE, wait_until="load", timeout=NAV_TIMEOUT_MS)
    visit.page.wait_for_url("**/book/intro.html", timeout=RENDER_TIMEOUT_MS)
    visit.settle()
    visit.assert_clean(site_server.REDIRECT_PAGE)


# --------------------------------------------------------------------------- chapter 1


def test_chapter1_plotly_figure_renders(visit):
    visit.open(CHAPTER)
    page = visit.page
    figures = page.locator(".plotly-graph-div")
    assert figures.count() >= 1, f"{CHAPTER}에 plotly 그림(.plotly-graph-div)이 없습니다."
    assert rendered(page.locator(".plotly-graph-div .main-svg")), (
        f"{CHAPTER}: plotly 그림이 그려지지 않았습니다 (.plotly-graph-div .main-svg 없음)."
    )
    box = figures.first.bounding_box()
    assert box is not None and box["height"] > 0, f"{CHAPTER}: plotly 그림의 높이가 0입니다 ({box})."
    visit.assert_clean(CHAPTER)


def test_formulas_use_the_math_font_and_its_big_operators(visit):
    """MathML is laid out by the browser with the site's STIX Two Math subset: the font loads, and
    a display-style sum is drawn with the font's larger variant (its MATH table), unlike an inline
    one. With a missing font or a font without MATH table both sums come out the same size."""
    visit.open(MATH_CHAPTER)
    page = visit.page
    status = page.evaluate("""() => [...document.fonts].filter(f => f.family.replace(/"/g, '') === 'DDP Math')
        .map(f => f.status)""")
    assert status == ["loaded"], f"{MATH_CHAPTER}: 수식 글꼴(DDP Math) 상태가 {status}입니다. loaded여야 합니다."
    sums = page.evaluate("""() => Object.fromEntries(['block', 'inline'].map(d => [d,
        [...document.querySelectorAll(`math[display=${d}] mo`)].filter(e => e.textContent === '\\u2211')
          .map(e => e.getBoundingClientRect().height)]))""")
    assert sums["block"] and sums["inline"], f"{MATH_CHAPTER}: 블록/인라인 합 기호를 찾지 못했습니다: {sums}"
    ratio = min(sums["block"]) / max(sums["inline"])
    assert ratio > 1.15, (
        f"{MATH_CHAPTER}: 블록 수식의 합 기호({min(sums['block']):.1f}px)가 인라인({max(sums['inline']):.1f}px)보다 "
        f"충분히 크지 않습니다 (비 {ratio:.2f}). 수식 글꼴의 MATH 표가 쓰이지 않았습니다.")
    visit.assert_clean(MATH_CHAPTER)


def test_chapter1_quiz(visit, shots):
    visit.open(CHAPTER)
    page = visit.page
    quiz = page.locator(".ddp-quiz")
    assert quiz.count() >= 1, f"{CHAPTER}에 퀴즈(.ddp-quiz)가 없습니다."
    quiz = quiz.first
    questions = quiz.locator(".ddp-quiz-q")
    assert questions.count() >= 1, "퀴즈에 문제(.ddp-quiz-q)가 없습니다."

    # Every question: buttons marked data-correct="1"/"0", exactly one correct, feedback and
    # explanation present, explanation hidden before any answer.
    for i in range(questions.count()):
        q = questions.nth(i)
        marks = [b.get_attribute("data-correct") for b in q.locator(".ddp-quiz-choice").all()]
        assert len(marks) >= 2 and set(marks) <= {"0", "1"}, f"{i + 1}번 문제의 보기 표시가 이상합니다: {marks}"
        assert marks.count("1") == 1, f"{i + 1}번 문제의 정답 보기가 정확히 하나가 아닙니다: {marks}"
        assert q.locator(".ddp-quiz-feedback").count() == 1, f"{i + 1}번 문제에 .ddp-quiz-feedback이 없습니다."
        assert q.locator(".ddp-quiz-explanation").count() == 1, f"{i + 1}번 문제에 .ddp-quiz-explanation이 없습니다."
        assert not q.locator(".ddp-quiz-explanation").is_visible(), f"{i + 1}번 문제의 해설이 답하기 전부터 보입니다."

    first = questions.first
    feedback = first.locator(".ddp-quiz-feedback")
    explanation = first.locator(".ddp-quiz-explanation")
    wrong = first.locator('.ddp-quiz-choice[data-correct="0"]').first
    right = first.locator('.ddp-quiz-choice[data-correct="1"]')

    wrong.click()
    text = site_server.poll(lambda: feedback.inner_text(), lambda t: "오답입니다" in t)
    assert "오답입니다" in text, f"오답을 골랐는데 피드백에 '오답입니다'가 없습니다: {text!r}"
    classes = site_server.poll(lambda: wrong.get_attribute("class") or "", lambda c: "is-wrong" in c.split())
    assert "is-wrong" in classes.split(), f"오답 보기에 is-wrong 클래스가 붙지 않았습니다: class={classes!r}"
    assert not explanation.is_visible(), "오답인데 해설(.ddp-quiz-explanation)이 보입니다."

    right.click()
    text = site_server.poll(lambda: feedback.inner_text(), lambda t: "정답입니다" in t)
    assert "정답입니다" in text, f"정답을 골랐는데 피드백에 '정답입니다'가 없습니다: {text!r}"
    classes = site_server.poll(lambda: right.get_attribute("class") or "", lambda c: "is-correct" in c.split())
    assert "is-correct" in classes.split(), f"정답 보기에 is-correct 클래스가 붙지 않았습니다: class={classes!r}"
    assert site_server.poll(explanation.is_visible), "정답을 골랐는데 해설(.ddp-quiz-explanation)이 보이지 않습니다."
    # 점수는 첫 답으로 센다: 틀린 뒤 정답을 골라도 0개, 다음 문제를 처음에 맞히면 1개
    score = site_server.poll(lambda: quiz.locator(".ddp-quiz-score").inner_text(), lambda t: "첫 답이 정답 0개" in t)
    assert "첫 답이 정답 0개" in score, f"틀린 뒤 맞힌 답이 점수에 들어갔습니다(.ddp-quiz-score): {score!r}"
    questions.nth(1).locator('.ddp-quiz-choice[data-correct="1"]').click()
    score = site_server.poll(lambda: quiz.locator(".ddp-quiz-score").inner_text(), lambda t: "첫 답이 정답 1개" in t)
    assert "첫 답이 정답 1개" in score, f"처음에 맞힌 답이 점수에 없습니다(.ddp-quiz-score): {score!r}"

    stored = page.evaluate("() => Object.keys(localStorage).filter(k => localStorage.getItem(k)).length")
    assert stored >= 1, "퀴즈 진행 상황이 localStorage에 저장되지 않았습니다."

    page.reload(wait_until="load", timeout=NAV_TIMEOUT_MS)
    visit.settle()
    quiz = page.locator(".ddp-quiz").first
    first = quiz.locator(".ddp-quiz-q").first
    restored = site_server.poll(lambda: first.locator(".ddp-quiz-feedback").inner_text(), lambda t: "정답입니다" in t)
    assert "정답입니다" in restored, f"새로고침 후 답한 상태가 localStorage에서 복원되지 않았습니다 (피드백: {restored!r})."
    assert site_server.poll(first.locator(".ddp-quiz-explanation").is_visible), "새로고침 후 해설이 다시 숨겨졌습니다."
    score = site_server.poll(lambda: quiz.locator(".ddp-quiz-score").inner_text(), lambda t: "첫 답이 정답 1개" in t)
    assert "첫 답이 정답 1개" in score, f"새로고침 후 점수 표시가 복원되지 않았습니다: {score!r}"

    # The viewport at the answered question (the full page is in 01_structure-desktop.jpg).
    first.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.screenshot(path=str(shots / site_server.screenshot_name(CHAPTER, "quiz-desktop")))
    visit.assert_clean(f"{CHAPTER} (퀴즈)")
