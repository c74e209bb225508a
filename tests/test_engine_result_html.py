"""A lab's check table on the page: folded into one Korean line, open only when a check failed."""

from __future__ import annotations

import re

from labs.result import LabResult, check_equal, not_applicable


def _result(*checks) -> LabResult:
    return LabResult(lab="demo", world_size=2, backend="gloo", ranks=[{}, {}],
                     checks={c.name: c for c in checks})


def _summary(html: str) -> str:
    found = re.search(r"<summary[^>]*>(.*?)</summary>", html)
    assert found is not None, html[:300]
    return found.group(1)


def test_passing_checks_fold_into_one_closed_line():
    html = _result(check_equal("a", 1, 1, "하나"), check_equal("b", 2, 2, "둘"))._repr_html_()
    assert html.startswith('<details class="lab-checks-box">')
    assert _summary(html) == "✓ demo 실습의 확인 2개 모두 통과 — 자세히 보기"
    assert '<table class="lab-checks">' in html and html.count("<tr>") == 3  # 머리 1줄 + 확인 2줄


def test_a_failed_check_stays_folded_and_says_how_many_failed():
    html = _result(check_equal("a", 1, 1, "하나"), check_equal("b", 2, 3, "둘"))._repr_html_()
    assert html.startswith('<details class="lab-checks-box"><summary class="has-failures">')
    assert _summary(html) == "× demo 실습의 확인 2개 중 1개 실패 — 자세히 보기"


def test_a_long_value_is_cut_on_the_page_and_kept_whole_in_its_title():
    value = list(range(60))
    html = _result(check_equal("a", value, value, "긴 값"))._repr_html_()
    full = "[" + ", ".join(map(str, value)) + "]"
    shown = re.sub(r' title="[^"]*"', "", html)  # 화면에 보이는 글자(title 속성 밖)
    assert f'title="{full}"' in html and full not in shown and "…" in shown


def test_not_applicable_checks_are_counted_apart():
    html = _result(check_equal("a", 1, 1, "하나"), not_applicable("b", "N=1이면 비교할 것이 없다"))._repr_html_()
    assert _summary(html) == "✓ demo 실습의 확인 1개 모두 통과 (해당 없음 1개) — 자세히 보기"


def test_a_result_without_checks_is_open_and_says_so():
    html = _result()._repr_html_()
    assert " open>" in html.split("<summary>")[0]
    assert _summary(html).startswith("– 확인할 항목이 없습니다")
