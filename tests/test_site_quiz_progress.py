"""Chapters 11 and 12 in a real browser: quiz answers and self-check notes survive a reload, and the
intro page's progress table counts the answers. One test needs no built book: a real quiz rendered
by ``labs.quiz`` restores the reader's choice even when the page's choice order changed.

Site: ``DDP_SITE_DIR`` (default ``<repo>/_build/html``, built by ``make book``); browser:
``DDP_CHROMIUM`` (default ``/usr/bin/chromium``). The network is limited to the local server.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from conftest import QUIZ_BANK
from page_visit import watched_page
from site_server import poll, serve

from labs import quiz

pytestmark = pytest.mark.timeout(300)

CH8, CH9, INTRO = "book/11_myths.html", "book/12_checklist.html", "book/intro.html"
NOTE = "모든 GPU가 같은 모델의 복제본을 갖고 데이터만 나눠 처리한다."


@pytest.fixture
def page(chromium, site_url, site_root):
    with watched_page(chromium, site_url, site_root, (CH8, CH9, INTRO)) as tab:
        yield tab


def questions(name: str) -> int:
    """How many questions the book's bank has for quiz ``name`` (the intro table's denominator)."""
    return len(quiz.load(name, QUIZ_BANK))


def answer(page, quiz: str, number: int, correct: bool) -> str:
    """Click a choice of question ``number`` (1-based) of quiz ``quiz``, found by its data (the
    page shuffles the choices, so never by position); return the feedback text."""
    question = page.locator(f'.ddp-quiz[data-quiz="{quiz}"] .ddp-quiz-q').nth(number - 1)
    question.locator(f'.ddp-quiz-choice[data-correct="{int(correct)}"]').first.click()
    expected = "정답입니다" if correct else "오답입니다"
    return poll(lambda: question.locator(".ddp-quiz-feedback").inner_text(), lambda t: expected in t)


def feedback(page, quiz: str, number: int) -> str:
    question = page.locator(f'.ddp-quiz[data-quiz="{quiz}"] .ddp-quiz-q').nth(number - 1)
    return poll(lambda: question.locator(".ddp-quiz-feedback").inner_text(), bool)


def progress_row(page, stem: str) -> tuple[str, str]:
    row = page.locator(".ddp-progress tr[data-ids]").filter(has=page.locator(f'a[href*="{stem}"]'))
    assert row.count() == 1, f"소개 페이지의 진행 상황 표에 {stem} 줄이 없습니다."
    return row.locator(".answered").inner_text(), row.locator(".right").inner_text()


def test_chapter8_quizzes_show_evidence_and_survive_reload(page):
    page.open(CH8)
    assert "정답입니다" in answer(page, "11_myths", 1, correct=True)
    evidence = answer(page, "11_myths_evidence", 1, correct=True)
    assert "측정 결과" in evidence and re.search(r"\d", evidence), f"오해 판별 퀴즈의 피드백에 측정값이 없습니다: {evidence!r}"

    page.reload(wait_until="load")
    assert "정답입니다" in feedback(page, "11_myths", 1), "새로고침 후 8장 퀴즈의 답이 복원되지 않았습니다."
    assert "측정 결과" in feedback(page, "11_myths_evidence", 1), "새로고침 후 오해 판별 퀴즈의 답이 복원되지 않았습니다."

    page.open(INTRO)
    expected = (f"1 / {questions('11_myths')}", "1")
    assert poll(lambda: progress_row(page, "11_myths"), lambda v: v == expected) == expected
    assert not page.problems, "\n".join(page.problems)


def test_chapter9_quiz_and_self_check_survive_reload(page):
    page.open(CH9)
    assert "오답입니다" in answer(page, "12_checklist", 1, correct=False)
    assert "정답입니다" in answer(page, "12_checklist", 2, correct=True)

    box = page.locator('.ddp-checklist[data-item="dp-idea"]')
    model_answer = page.locator("#answer-dp-idea")
    reveal = box.locator(".ddp-checklist-reveal")
    assert not model_answer.is_visible(), "모범 답안이 단추를 누르기 전부터 보입니다."
    box.locator("textarea").fill(NOTE)
    reveal.click()
    assert poll(model_answer.is_visible, bool), "단추를 눌렀는데 모범 답안이 보이지 않습니다."
    assert reveal.get_attribute("aria-expanded") == "true"
    assert model_answer.locator('a[href*="01_structure"]').count() >= 1, "모범 답안에 1장으로 가는 링크가 없습니다."
    reveal.click()
    assert poll(lambda: not model_answer.is_visible(), bool), "다시 누르면 모범 답안이 접혀야 합니다."

    page.reload(wait_until="load")
    assert "오답입니다" in feedback(page, "12_checklist", 1) and "정답입니다" in feedback(page, "12_checklist", 2)
    text = poll(lambda: box.locator("textarea").input_value(), lambda v: v == NOTE)
    assert text == NOTE, f"새로고침 후 적어 둔 설명이 복원되지 않았습니다: {text!r}"
    assert not model_answer.is_visible(), "새로고침 후에는 모범 답안이 다시 접혀 있어야 합니다."
    assert page.locator(".ddp-checklist").count() == 5
    for box_el in page.locator(".ddp-checklist").all():
        assert page.locator(f"#{box_el.get_attribute('data-answer')}").count() == 1

    page.open(INTRO)
    expected = (f"2 / {questions('12_checklist')}", "1")
    assert poll(lambda: progress_row(page, "12_checklist"), lambda v: v == expected) == expected
    assert not page.problems, "\n".join(page.problems)


_BUTTONS = re.compile(r'(<div class="ddp-quiz-choices"[^>]*>)(.*?)(</div>)', re.S)


def _reverse_first_question(page_html: str) -> str:
    """The same quiz with question 1's buttons in the opposite order (as if the order had changed)."""
    def flip(m):
        buttons = re.findall(r"<button .*?</button>", m.group(2), re.S)
        return m.group(1) + "".join(reversed(buttons)) + m.group(3)
    return _BUTTONS.sub(flip, page_html, count=1)


def test_restored_answer_is_the_same_choice_not_the_same_position(chromium, tmp_path: Path):
    name = "01_structure"
    body = quiz.to_html(name, quiz.load(name, QUIZ_BANK))
    page_file = tmp_path / "quiz.html"
    page_file.write_text(f'<!doctype html><html lang="ko"><meta charset="utf-8"><body>{body}</body></html>', encoding="utf-8")
    context = chromium.new_context(service_workers="block")
    try:
        with serve(tmp_path) as url:
            page = context.new_page()
            problems = []
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(url + "quiz.html", wait_until="load")
            first = page.locator(".ddp-quiz-q").first
            buttons = first.locator(".ddp-quiz-choice")
            # a wrong choice at either end, so reversing the order really moves it
            end = next(i for i in (0, buttons.count() - 1) if buttons.nth(i).get_attribute("data-correct") == "0")
            wrong = buttons.nth(end)
            choice, text = wrong.get_attribute("data-choice"), wrong.inner_text()
            wrong.click()
            assert "오답입니다" in poll(lambda: first.locator(".ddp-quiz-feedback").inner_text(), lambda t: "오답" in t)

            page_file.write_text(_reverse_first_question(page_file.read_text(encoding="utf-8")), encoding="utf-8")
            # the server's Last-Modified has whole seconds: without this, a rewrite within the same second
            # is answered "304 Not Modified" and the browser shows the old order
            later = page_file.stat().st_mtime + 5
            os.utime(page_file, (later, later))
            page.reload(wait_until="load")
            marked = poll(lambda: first.locator(".ddp-quiz-choice.is-wrong, .ddp-quiz-choice.is-correct").count(),
                          lambda n: n == 1)
            assert marked == 1, "새로고침 후 복원된 답이 없습니다."
            assert buttons.nth(end).get_attribute("data-choice") != choice, "순서를 바꾼 페이지가 그대로입니다."
            restored = first.locator('.ddp-quiz-choice[aria-pressed="true"]')
            assert restored.get_attribute("data-choice") == choice and restored.inner_text() == text, (
                "순서가 바뀐 페이지에서 다른 보기가 복원되었습니다(화면 위치가 아니라 보기로 기억해야 합니다).")
            assert "is-wrong" in restored.get_attribute("class")
            assert "오답입니다" in first.locator(".ddp-quiz-feedback").inner_text()
            assert not problems, problems
    finally:
        context.close()
