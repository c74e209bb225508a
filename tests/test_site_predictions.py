"""The "예측해 보기" boxes (``{prediction}``, book/_ext/prediction.py): the reader commits to a guess before the answer.

- Sources: the converted chapters keep no collapsed ``{admonition} 예측해 보기`` (question and answer in one body);
  every prediction has a visible question without its answer, two or more choices and a valid answer (or a glued
  number with a tolerance), a book-wide unique ``chN-`` id, a measured value glued from the run (every glue key it
  names is glued by a code cell of the same chapter), and each chapter spreads its correct answers over positions.
- A tiny book built with the real extensions: the question and the buttons are in the page, the answer and the
  measured line are ``hidden`` until a choice; the glued numbers reach the answer; broken boxes fail the build.
- The built site (``DDP_SITE_DIR``) in Chromium: nothing of the answer shows before a choice; a choice or a number
  reveals "내 예측 / 정답" or "내 예측 / 실제로 잰 값" with the body; a reload keeps it; the intro counts it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minibook import REPO, build, make_book  # noqa: E402
from page_visit import watched_page  # noqa: E402
from site_server import poll  # noqa: E402

from labs.prediction import FOLD_CLOSE, FOLD_OPEN, KEY_FOLD_OPEN, Prediction, parse  # noqa: E402

BOOK = REPO / "book"
# Chapters whose boxes are all predictions now (6 still has collapsed admonitions).
CONVERTED = ("01_structure", "02_forward", "03_backward", "04_allreduce", "05_update", "07_internals", "08_cost",
             "09_miniddp", "10_traps", "11_myths")
_GLUE_ROLE = re.compile(r"\{glue:text\}`([^`:]+)(?::[^`]*)?`")
_GLUE_CALL = re.compile(r"""\bglue\(\s*["']([^"']+)["']""")


def _cells(stem: str) -> list[dict]:
    return json.loads((BOOK / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def chapter_predictions() -> dict[str, list[Prediction]]:
    chapters = sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.ipynb"))
    return {stem: [p for c in _cells(stem) if c["cell_type"] == "markdown" for p in parse(_source(c))]
            for stem in chapters}


PREDICTIONS = chapter_predictions()


def test_parser_reads_a_block():
    text = "앞\n\n```{prediction} ch9-x\n:question: 몇 번?\n:choices: 1번 | 2번\n:answer: 2\n본문 :answer: 아님\n```\n뒤"
    [p] = parse(text)
    assert p.pid == "ch9-x" and p.options == {"question": "몇 번?", "choices": "1번 | 2번", "answer": "2"}
    assert p.body == "본문 :answer: 아님" and p.choices == ["1번", "2번"] and p.answer == 2


@pytest.mark.parametrize("stem", CONVERTED)
def test_converted_chapter_has_no_collapsed_prediction_left(stem):
    left = [_source(c)[:80] for c in _cells(stem) if c["cell_type"] == "markdown"
            and re.search(r"\{admonition\}\s*예측해 보기", _source(c))]
    assert not left, f"{stem}: 질문과 답이 한 상자에 접힌 '예측해 보기'가 남았습니다. {{prediction}}으로 바꾸세요: {left}"
    assert len(PREDICTIONS[stem]) >= 2, f"{stem}: 장마다 예측 상자가 두 개 이상 있어야 합니다."


@pytest.mark.parametrize("stem", sorted(s for s, ps in PREDICTIONS.items() if ps))
def test_every_prediction_is_well_formed(stem):
    number = int(stem[:2])
    glued = {key for c in _cells(stem) if c["cell_type"] == "code" for key in _GLUE_CALL.findall(_source(c))}
    for p in PREDICTIONS[stem]:
        opts, where = p.options, f"{stem}의 예측 {p.pid}"
        assert p.pid.startswith(f"ch{number}-"), f"{where}: id는 ch{number}-로 시작해야 합니다."
        question = opts.get("question", "")
        assert question and "답" not in question, f"{where}: 보이는 질문이 있어야 하고, 질문에 답을 쓰지 않습니다: {question!r}"
        if "number" in opts:
            assert re.fullmatch(r"\d+(\.\d+)?%?", opts.get("tolerance", "")), f"{where}: :number:에는 :tolerance:가 있어야 합니다."
            keys = {opts["number"]}
        else:
            choices = [c.strip() for c in opts.get("choices", "").split("|")]
            assert len(choices) >= 2 and all(choices), f"{where}: 보기가 두 개 이상이어야 합니다."
            assert len(set(choices)) == len(choices), f"{where}: 같은 보기가 두 번 있습니다."
            assert opts.get("answer", "").isdigit() and 1 <= int(opts["answer"]) <= len(choices), (
                f"{where}: :answer:는 1–{len(choices)} 중 하나여야 합니다.")
            assert "{glue:text}" in opts.get("measured", ""), (
                f"{where}: 실제로 잰 값(:measured:)이 실행에서 glue한 값이어야 합니다.")
            keys = set()
        keys |= set(_GLUE_ROLE.findall(opts.get("measured", "") + p.body))
        assert keys <= glued, f"{where}: 이 장의 코드 셀이 glue하지 않은 키: {sorted(keys - glued)}"
        assert p.body, f"{where}: 답의 설명(본문)이 없습니다."


@pytest.mark.parametrize("stem", CONVERTED)
def test_glue_cells_compile(stem):
    """A glue cell that does not even parse fails the whole chapter's build: catch it here, in a second."""
    from IPython.core.inputtransformer2 import TransformerManager

    cells = [(i, _source(c)) for i, c in enumerate(_cells(stem)) if c["cell_type"] == "code" and _GLUE_CALL.search(_source(c))]
    assert cells, f"{stem}: 측정값을 glue하는 셀이 없습니다."
    for i, code in cells:
        compile(TransformerManager().transform_cell(code), f"{stem}.ipynb 셀 {i}", "exec")


def test_prediction_text_uses_the_book_terms():
    """The boxes are fenced blocks, which the book-wide term check skips: check their words here."""
    from test_book_consistency import FORBIDDEN_TERMS, prose

    found = []
    for stem, ps in PREDICTIONS.items():
        for p in ps:
            text = prose(" ".join([*p.options.values(), p.body]))
            found += [f"{p.pid}: '{m.group(0)}' → {term}" for pattern, term in FORBIDDEN_TERMS.items()
                      for m in re.finditer(pattern, text)]
    assert not found, "예측 상자에 이 책이 쓰지 않는 용어가 있습니다:\n" + "\n".join(found)


def test_prediction_ids_are_unique_book_wide():
    ids = [p.pid for ps in PREDICTIONS.values() for p in ps]
    assert len(ids) == len(set(ids)), f"겹치는 예측 id: {sorted({i for i in ids if ids.count(i) > 1})}"


@pytest.mark.parametrize("stem", CONVERTED)
def test_correct_positions_vary_within_a_chapter(stem):
    answers = [int(p.options["answer"]) for p in PREDICTIONS[stem] if "answer" in p.options]
    if len(answers) >= 2:
        assert len(set(answers)) >= 2, f"{stem}: 모든 예측의 정답이 {answers[0]}번 자리입니다. 자리를 섞으세요."


def test_correct_choice_is_rarely_the_longest_or_the_shortest():
    """A reader who always picks the longest (or shortest) choice must not score: at most a third each (ties count)."""
    boxes = [(p.pid, [c.strip() for c in p.options["choices"].split("|")], int(p.options["answer"]) - 1)
             for ps in PREDICTIONS.values() for p in ps if "choices" in p.options]
    longest = [pid for pid, ch, a in boxes if len(ch[a]) == max(map(len, ch))]
    shortest = [pid for pid, ch, a in boxes if len(ch[a]) == min(map(len, ch))]
    assert len(longest) * 3 <= len(boxes), f"정답이 가장 긴 보기인 예측이 {len(longest)}/{len(boxes)}개입니다: {longest}"
    assert len(shortest) * 3 <= len(boxes), f"정답이 가장 짧은 보기인 예측이 {len(shortest)}/{len(boxes)}개입니다: {shortest}"


# ----------------------------------------------------------------------------- the directive in a real build

INTRO = "# 소개\n\n```{quiz-progress}\n```\n"


def _notebook(markdown: str, code: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# 시험 장\n"]},
             {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [code]},
             {"cell_type": "markdown", "metadata": {}, "source": [markdown]}]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}})


GLUE = "from myst_nb import glue\nglue('ch1-calls', 4, display=False)\nglue('ch1-gap', 0.000123, display=False)"
BOXES = FOLD_OPEN + """

```{prediction} ch1-calls-choice
:question: 랭크 $N$개가 `all_reduce`를 몇 번 부를까요?
:choices: 한 번 | 두 번 | $N$번
:answer: 3
:measured: 이번 실행에서 {glue:text}`ch1-calls`번
비밀 본문: 차이는 {glue:text}`ch1-gap:.1e`입니다.
```

""" + FOLD_CLOSE + """

```{prediction} ch1-calls-number
:question: 몇 번일까요?
:number: ch1-calls
:tolerance: 25%
숫자 상자의 본문입니다.
```
"""


KEY = f""":::{{admonition}} 이 장의 핵심
:class: chapter-key awaits-ch1-calls-choice
{KEY_FOLD_OPEN}

**주장**: 비밀 주장입니다.

{FOLD_CLOSE}

**코드 지도**: 보이는 줄입니다.
:::

"""


@pytest.fixture(scope="module")
def mini_site(tmp_path_factory) -> Path:
    book = make_book(tmp_path_factory.mktemp("predictions"),
                     {"book/intro.md": INTRO, "book/01_structure.ipynb": _notebook(KEY + BOXES, GLUE)})
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return book / "_build" / "html"


def test_rendered_box_shows_question_and_hides_answer(mini_site):
    from bs4 import BeautifulSoup

    soup = BeautifulSoup((mini_site / "book" / "01_structure.html").read_text(encoding="utf-8"), "html.parser")
    box = soup.select_one('.ddp-prediction[data-pid="ch1-calls-choice"]')
    assert box.find_parent("details") is None and not soup.select(".prediction-source"), "노트북의 접기가 사이트에 남았습니다"
    claim = soup.select_one(".chapter-key.awaits-ch1-calls-choice").find("strong", string="주장").parent
    assert claim.parent.select_one(".admonition-title") is not None, "핵심 상자의 주장이 접기에서 나오지 않았습니다"
    question = box.select_one(".ddp-prediction-question")
    assert "몇 번 부를까요" in question.get_text() and question.find_parent(attrs={"hidden": True}) is None
    buttons = box.select("button.ddp-prediction-choice")
    assert [b.get_text() for b in buttons][:2] == ["한 번", "두 번"] and len(buttons) == 3
    assert [b["data-correct"] for b in buttons] == ["0", "0", "1"]
    answer = box.select_one(".ddp-prediction-answer")
    assert answer.has_attr("hidden"), "답이 hidden이 아닙니다(접기만 해서는 보조 기술에 읽힙니다)."
    assert "비밀 본문" in answer.get_text() and "비밀 본문" not in question.get_text()
    measured = answer.select_one(".ddp-prediction-measured").get_text()
    assert "실제로 잰 값" in measured and "4" in measured, measured
    assert "1.2e-04" in answer.get_text(), "본문의 glue 역할이 실행한 값을 받지 못했습니다."

    number = soup.select_one('.ddp-prediction[data-pid="ch1-calls-number"]')
    assert number["data-kind"] == "number" and float(number["data-value"]) == 4 and float(number["data-tolerance"]) == 1
    assert number.select_one("input.ddp-prediction-input") and number.select_one(".ddp-prediction-answer").has_attr("hidden")
    assert len(soup.find_all("script", string=re.compile("ddp-course-predictions"))) == 1

    intro = BeautifulSoup((mini_site / "book" / "intro.html").read_text(encoding="utf-8"), "html.parser")
    row = intro.select_one(".ddp-progress tr[data-pids]")
    assert json.loads(row["data-pids"]) == ["ch1-calls-choice", "ch1-calls-number"]
    assert row.select_one(".made").get_text() == "0 / 2"


def test_broken_boxes_fail_the_build_in_korean(tmp_path):
    bad = """:::{admonition} 이 장의 핵심
:class: chapter-key awaits-ch1-nope
**주장**: 없는 예측을 기다린다.
:::

```{prediction} ch1-good
:question: 어느 것일까요?
:choices: 가 | 나
:answer: 2
본문
```

```{prediction} ch1-bad-answer
:question: 어느 것일까요?
:choices: 가 | 나
:answer: 3
본문
```

```{prediction} ch2-wrong-prefix
:question: 어느 장일까요?
:choices: 가 | 나
:answer: 1
본문
```

```{prediction} ch1-answer-in-question
:question: 답: 이미 적혀 있다
:choices: 가 | 나
:answer: 1
본문
```

```{prediction} ch1-no-glue
:question: 몇 개일까요?
:number: ch1-missing
:tolerance: 0
본문
```
"""
    twin = "```{prediction} ch1-good\n:question: 같은 id?\n:choices: 가 | 나\n:answer: 1\n본문\n```\n"
    book = make_book(tmp_path, {"book/intro.md": INTRO, "book/01_structure.ipynb": _notebook(bad, GLUE),
                                "book/twin.md": "# 쌍둥이\n\n" + twin})
    proc = build(book)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert ":answer:는 정답 보기의 번호(1–2)여야 합니다" in out
    assert "id는 'ch1-'로 시작" in out
    assert "질문에 답이 들어 있습니다" in out
    assert "ch1-missing" in out and "glue" in out
    assert "'ch1-good'가" in out and "책 전체에서 하나뿐" in out
    assert "'awaits-ch1-nope'" in out and "예측 상자가 없습니다" in out


# ----------------------------------------------------------------------------- the built site in a browser

CH11, INTRO_PAGE = "book/11_myths.html", "book/intro.html"
_TEXT = "e => e.textContent.replace(/\\s+/g, ' ').trim()"


@pytest.fixture
def page(chromium, site_url, site_root):
    with watched_page(chromium, site_url, site_root, (CH11, INTRO_PAGE)) as tab:
        yield tab


@pytest.mark.timeout(300)
def test_prediction_reveals_only_after_a_guess_and_survives_reload(page):
    page.open(CH11)
    boxes = page.locator(".ddp-prediction")
    assert boxes.count() == len(PREDICTIONS["11_myths"])
    for i in range(boxes.count()):
        box = boxes.nth(i)
        assert box.locator(".ddp-prediction-question").is_visible(), "예측 상자의 질문이 보이지 않습니다."
        assert not box.locator(".ddp-prediction-answer").is_visible(), "예측하기 전부터 답이 보입니다."
    # the accessibility tree has the question and the choices, never the answer
    snapshot = page.locator('.ddp-prediction[data-pid="ch11-processes"]').aria_snapshot()
    assert "몇 개의 OS 프로세스" in snapshot and "실제로 잰 값" not in snapshot, snapshot

    choice = page.locator('.ddp-prediction[data-pid="ch11-processes"]')
    wrong = choice.locator('.ddp-prediction-choice[data-correct="0"]').first
    # the page writes the choices' text content (a formula's MathML reads "N", not the rendered italic)
    guess = wrong.evaluate(_TEXT)
    right = choice.locator('.ddp-prediction-choice[data-correct="1"]').evaluate(_TEXT)
    wrong.click()
    result = poll(lambda: choice.locator(".ddp-prediction-result").inner_text(), lambda t: "내 예측" in t)
    assert f"내 예측: {guess}" in result and f"정답: {right}" in result and "빗나갔습니다" in result, result
    answer = choice.locator(".ddp-prediction-answer")
    assert answer.is_visible() and "실제로 잰 값" in answer.inner_text()
    assert re.search(r"\d", answer.locator(".ddp-prediction-measured").inner_text())

    number = page.locator('.ddp-prediction[data-pid="ch11-fingerprint-kinds"]')
    measured = number.get_attribute("data-value")
    number.locator("input").fill(measured)
    number.locator(".ddp-prediction-submit").click()
    result = poll(lambda: number.locator(".ddp-prediction-result").inner_text(), lambda t: "내 예측" in t)
    assert "맞혔습니다" in result and "실제로 잰 값" in result, result
    assert number.locator(".ddp-prediction-answer").is_visible()

    page.reload(wait_until="load")
    restored = poll(lambda: choice.locator(".ddp-prediction-result").inner_text(), lambda t: "내 예측" in t)
    assert f"내 예측: {guess}" in restored, "새로고침 후 예측이 복원되지 않았습니다."
    assert choice.locator(".ddp-prediction-answer").is_visible()
    assert choice.locator('.ddp-prediction-choice[aria-pressed="true"]').evaluate(_TEXT) == guess
    assert float(number.locator("input").input_value()) == float(measured)
    untouched = page.locator('.ddp-prediction[data-pid="ch11-held-fraction"] .ddp-prediction-answer')
    assert not untouched.is_visible(), "예측하지 않은 상자가 새로고침 후 열렸습니다."

    page.open(INTRO_PAGE)
    row = page.locator(".ddp-progress tr[data-pids]").filter(has=page.locator('a[href*="11_myths"]'))
    expected = (f"2 / {len(PREDICTIONS['11_myths'])}", "1")
    got = poll(lambda: (row.locator(".made").inner_text(), row.locator(".hit").inner_text()), lambda v: v == expected)
    assert got == expected, f"소개 페이지의 예측 진행 표: {got}"
    assert "예측" in page.locator(".ddp-progress-summary").inner_text()
    assert not page.problems, "\n".join(page.problems)


# 상자 아래 800px 안, 같은 절 안에서 다음 상자보다 앞에 보이는 측정값(셀 출력, 표, 그림): 답하기 전에는 없어야 한다
VISIBLE_DATA_BELOW_JS = """() => {
  const shown = el => { const b = el.getBoundingClientRect();
                        return b.width > 0 && b.height > 0 && el.checkVisibility({visibilityProperty: true}); };
  const boxes = [...document.querySelectorAll('.ddp-prediction')];
  return boxes.flatMap((box, i) => {
    const bottom = box.getBoundingClientRect().bottom + scrollY;
    const next = boxes[i + 1] ? boxes[i + 1].getBoundingClientRect().top + scrollY : Infinity;
    const section = box.parentElement.closest('section');
    return [...section.querySelectorAll('.cell_output, table, figure')].filter(el => {
      const top = el.getBoundingClientRect().top + scrollY;
      return !box.contains(el) && !el.closest('.ddp-quiz') && shown(el) && top >= bottom && top < Math.min(next, bottom + 800);
    }).map(el => box.dataset.pid + ': ' + el.textContent.replace(/\\s+/g, ' ').trim().slice(0, 60));
  });
}"""
sys.path.insert(0, str(REPO / "book" / "_ext"))
from prediction import STORAGE_KEY  # noqa: E402

PREDICTION_PAGES = sorted(f"book/{stem}.html" for stem, ps in PREDICTIONS.items() if ps)


@pytest.mark.timeout(600)
def test_measured_data_waits_for_the_guess_on_every_page(chromium, site_url, site_root):
    """Before any choice no table, figure or printed result shows within 800 px below a box (in its section,
    before the next box); the page says how to see it, a guess shows it, and 예측 없이 보기 shows it without
    counting as a guess."""
    assert PREDICTION_PAGES
    with watched_page(chromium, site_url, site_root, tuple(PREDICTION_PAGES)) as page:
        held = 0
        for rel in PREDICTION_PAGES:
            page.open(rel)
            page.wait_for_timeout(300)
            assert page.evaluate(VISIBLE_DATA_BELOW_JS) == [], f"{rel}: 예측하기 전에 보이는 측정값"
            held += page.locator(".ddp-awaiting").count()
        assert held >= len(PREDICTION_PAGES), f"답을 기다리는 측정값이 책 전체에 {held}개뿐입니다"

        page.open(CH11)
        boxes = page.locator(".ddp-prediction")
        waiting = [boxes.nth(i) for i in range(boxes.count())
                   if boxes.nth(i).evaluate("b => !!(b.__ddpAwaiting && b.__ddpAwaiting.length)")]
        assert len(waiting) >= 2, "11장에서 측정값을 기다리게 한 예측 상자가 둘보다 적습니다"
        first, second = waiting[0], waiting[1]
        first.locator('.ddp-prediction-choice, .ddp-prediction-input').first.click()
        if first.get_attribute("data-kind") == "number":
            first.locator("input").fill("1")
            first.locator(".ddp-prediction-submit").click()
        poll(lambda: first.evaluate("b => b.__ddpAwaiting.length"), lambda n: n == 0)
        pid = second.get_attribute("data-pid")
        note = page.locator(".ddp-awaiting-note").first
        assert "예측" in note.inner_text()
        page.locator(".ddp-awaiting-peek").first.click()
        assert second.evaluate("b => b.__ddpAwaiting.length") == 0
        stored = page.evaluate(f"() => JSON.parse(localStorage.getItem({json.dumps(STORAGE_KEY)}) || '{{}}')")
        assert pid not in stored, "예측 없이 보기가 예측으로 저장되었습니다"
        assert page.problems == [], page.problems


# ----------------------------------------------------------------------------- key boxes that wait for a guess

_AWAITS = re.compile(r"^:class:.*\bchapter-key\b.*\bawaits-(\S+)", re.M)
KEY_WAITS = {stem: m.group(1) for stem in PREDICTIONS for c in _cells(stem)[:2] if c["cell_type"] == "markdown"
             if (m := _AWAITS.search(_source(c)))}
KEY_VISIBLE_JS = """() => [...document.querySelectorAll('.chapter-key p')].filter(p => p.checkVisibility())
    .map(p => p.textContent.replace(/\\s+/g, ' ').trim())"""


def test_a_waiting_key_box_names_a_box_of_its_own_chapter():
    assert KEY_WAITS, "핵심 예측을 기다리는 '이 장의 핵심' 상자가 하나도 없습니다"
    for stem, pid in KEY_WAITS.items():
        assert pid in {p.pid for p in PREDICTIONS[stem]}, f"{stem}: 상자가 기다리는 예측 {pid}가 이 장에 없습니다"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", [390, 800, 1280])
def test_a_key_box_that_states_a_core_answer_opens_with_the_guess(chromium, site_url, site_root, width):
    """The chapter-key box of a chapter whose core prediction it answers shows neither its 주장 nor its 측정 before
    the guess: a line links to the prediction; a choice there opens the box."""
    pages = tuple(f"book/{stem}.html" for stem in KEY_WAITS)
    assert pages
    with watched_page(chromium, site_url, site_root, pages, viewport={"width": width, "height": 900}) as page:
        for stem, pid in KEY_WAITS.items():
            page.open(f"book/{stem}.html")
            shown = page.evaluate(KEY_VISIBLE_JS)
            assert not [t for t in shown if t.startswith(("주장", "측정"))], f"{stem} @{width}px: 예측 전에 보이는 {shown}"
            note = page.locator(".chapter-key .ddp-key-note")
            assert note.is_visible() and note.locator("a").get_attribute("href") == f"#{pid}-q"
            box = page.locator(f'.ddp-prediction[data-pid="{pid}"]')
            box.locator(".ddp-prediction-choice").first.click()
            opened = poll(lambda: page.evaluate(KEY_VISIBLE_JS), lambda t: any(x.startswith("주장") for x in t)
                          and any(x.startswith("측정") for x in t))
            assert any(x.startswith("측정") for x in opened), f"{stem} @{width}px: 예측한 뒤에도 닫힌 상자 {opened}"
            assert page.locator(".chapter-key .ddp-key-note").count() == 0
        assert page.problems == [], page.problems


@pytest.mark.timeout(600)
@pytest.mark.parametrize("width", [390, 800])
def test_no_measured_output_shows_before_a_guess_on_a_phone_or_tablet(chromium, site_url, site_root, width):
    """The desktop test above, at the widths where the page reflows: still no data below an unanswered box."""
    assert PREDICTION_PAGES
    viewport = {"width": width, "height": 900}
    with watched_page(chromium, site_url, site_root, tuple(PREDICTION_PAGES), viewport=viewport) as page:
        for rel in PREDICTION_PAGES:
            page.open(rel)
            page.wait_for_timeout(300)
            assert page.evaluate(VISIBLE_DATA_BELOW_JS) == [], f"{rel} @{width}px: 예측하기 전에 보이는 측정값"
        assert page.problems == [], page.problems
