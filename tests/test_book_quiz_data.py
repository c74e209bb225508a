"""Quiz data (``book/quizzes/*.yml``): every file loads, bad data is refused in Korean, HTML is stable,
and the whole bank cannot be won by a position or length pattern (measured on the rendered page)."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from conftest import QUIZ_BANK, has_hangul

from labs import quiz
from labs.quiz import QuizDataError

REAL_QUIZZES = sorted(QUIZ_BANK.glob("*.yml"))
MAX_POSITION_SHARE = 0.40  # no position holds the correct answer in more than 40 % of the bank
MAX_LONGEST_SHARE = 1 / 3  # the correct choice is the longest in at most a third of the questions

GOOD = {
    "questions": [
        {
            "id": "ranks-are-processes",
            "question": "`torchrun --nproc_per_node=4`로 띄운 랭크 4개는 무엇인가요?",
            "choices": [
                {"text": "스레드 4개", "why": "랭크는 스레드가 아니라 별도의 OS 프로세스입니다."},
                {"text": "OS 프로세스 4개", "correct": True, "why": "맞습니다. 랭크마다 PID가 다릅니다."},
                {"text": "GPU 커널 4개", "why": "커널은 프로세스 안에서 실행되는 작업입니다."},
            ],
            "explanation": "DDP의 랭크는 모두 독립된 프로세스이고 `init_process_group`으로 묶입니다.",
        },
        {
            "id": "global-batch",
            "question": "N=4, 랭크당 배치 B/N=8이면 전역 배치는 <b>몇</b> 개인가요?",
            "choices": [
                {"text": "32", "correct": True, "why": "N × B/N = 4 × 8 = 32입니다."},
                {"text": "8", "correct": False, "why": "8은 한 랭크가 받는 `미니배치` 크기입니다."},
            ],
            "explanation": "전역 배치는 같은 스텝의 모든 랭크 미니배치를 합친 것입니다.",
        },
    ]
}


def write_quiz(directory: Path, name: str, data) -> Path:
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


class _QuizHTML(HTMLParser):
    """Collects each question section and its choice buttons."""

    def __init__(self):
        super().__init__()
        self.sections: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "section" and "ddp-quiz-q" in classes:
            self.sections.append({"qid": a.get("data-qid"), "buttons": []})
        elif "ddp-quiz-choice" in classes:
            assert tag == "button", tag
            self.sections[-1]["buttons"].append(a)


def parse_html(text: str) -> list[dict]:
    parser = _QuizHTML()
    parser.feed(text)
    return parser.sections


# ----------------------------------------------------------------------------- the real folder

def test_quiz_folder_has_files():
    assert REAL_QUIZZES, f"{QUIZ_BANK}에 퀴즈 파일(*.yml)이 하나도 없습니다"


@pytest.mark.parametrize("path", REAL_QUIZZES, ids=lambda p: p.name)
def test_real_quiz_loads_and_renders(path):
    questions = quiz.load(path.stem, QUIZ_BANK)

    assert questions, path
    ids = [q.id for q in questions]
    assert len(ids) == len(set(ids)), f"{path.name}: 문제 id가 겹칩니다 {ids}"
    for q in questions:
        assert has_hangul(q.prompt), q.id
        assert sum(c.correct for c in q.choices) == 1, q.id
    sections = parse_html(quiz.to_html(path.stem, questions))
    assert [s["qid"] for s in sections] == ids
    assert [len(s["buttons"]) for s in sections] == [len(q.choices) for q in questions]


def test_real_quiz_ids_are_unique_across_files():
    # quiz.js keeps progress in one localStorage object keyed by question id, for the whole site
    seen: dict[str, str] = {}
    for path in REAL_QUIZZES:
        for q in quiz.load(path.stem, QUIZ_BANK):
            assert q.id not in seen, f"문제 id {q.id!r}가 {seen.get(q.id)}와 {path.name}에 모두 있습니다"
            seen[q.id] = path.name


# ----------------------------------------------------------------------------- fixtures: valid data

def test_valid_fixture_loads(tmp_path):
    write_quiz(tmp_path, "good", GOOD)

    questions = quiz.load("good", tmp_path)

    assert [q.id for q in questions] == ["ranks-are-processes", "global-batch"]
    first = questions[0]
    assert first.prompt.startswith("`torchrun")
    assert [c.text for c in first.choices] == ["스레드 4개", "OS 프로세스 4개", "GPU 커널 4개"]
    assert [c.correct for c in first.choices] == [False, True, False]
    assert first.choices[1].why == "맞습니다. 랭크마다 PID가 다릅니다."
    assert first.explanation.startswith("DDP의 랭크는")
    assert [c.correct for c in questions[1].choices] == [True, False]


def test_quiz_object_renders_the_same_html(tmp_path):
    write_quiz(tmp_path, "good", GOOD)

    q = quiz.Quiz("good", tmp_path)

    assert q._repr_html_() == quiz.to_html("good", quiz.load("good", tmp_path))
    assert "문제 2개" in repr(q)


# ----------------------------------------------------------------------------- fixtures: bad data

def _broken(mutate) -> dict:
    data = copy.deepcopy(GOOD)
    mutate(data["questions"][1])  # break question 2 so the message must say which one
    return data


def _two_correct(q):
    q["choices"][1]["correct"] = True


def _no_correct(q):
    q["choices"][0]["correct"] = False


def _one_choice(q):
    q["choices"] = q["choices"][:1]


def _no_why(q):
    del q["choices"][1]["why"]


def _english_why(q):
    q["choices"][0]["why"] = "Because N times B over N is 32."


def _no_text(q):
    q["choices"][0]["text"] = ""


def _english_explanation(q):
    q["explanation"] = "The global batch is the sum of all per-rank mini-batches."


def _no_id(q):
    del q["id"]


def _no_explanation(q):
    q["explanation"] = ""


@pytest.mark.parametrize("mutate, fragment", [
    pytest.param(_two_correct, "정답 보기(correct: true)가 정확히 하나", id="two-correct"),
    pytest.param(_no_correct, "정답 보기(correct: true)가 정확히 하나", id="no-correct"),
    pytest.param(_one_choice, "보기가 2개 이상", id="one-choice"),
    pytest.param(_no_why, "한국어 해설(why)", id="choice-without-why"),
    pytest.param(_english_why, "한국어 해설(why)", id="english-why"),
    pytest.param(_no_text, "text", id="choice-without-text"),
    pytest.param(_english_explanation, "해설(explanation)은 한국어", id="english-explanation"),
    pytest.param(_no_id, "'id'가 없습니다", id="no-id"),
    pytest.param(_no_explanation, "'explanation'가 없습니다", id="empty-explanation"),
])
def test_invalid_question_is_refused_in_korean(tmp_path, mutate, fragment):
    write_quiz(tmp_path, "bad", _broken(mutate))

    with pytest.raises(QuizDataError) as info:
        quiz.load("bad", tmp_path)

    message = str(info.value)
    assert has_hangul(message), message
    assert fragment in message, message
    assert "퀴즈 'bad'의 2번 문제" in message, message


def test_quiz_without_questions_is_refused(tmp_path):
    write_quiz(tmp_path, "empty", {"questions": []})

    with pytest.raises(QuizDataError, match="문제 목록"):
        quiz.load("empty", tmp_path)


@pytest.mark.parametrize("text, message", [
    ("questions: [\n  - id: x\n", "YAML 문법"),
    ("- 1\n- 2\n", "문제 목록"),
    ("", "문제 목록"),
    ("questions:\n  - 그냥 문자열\n", "항목이어야"),
])
def test_malformed_quiz_files_get_korean_errors(tmp_path, text, message):
    (tmp_path / "bad.yml").write_text(text, encoding="utf-8")
    with pytest.raises(QuizDataError, match=message):
        quiz.load("bad", tmp_path)


def test_correct_must_be_a_real_boolean(tmp_path):
    data = copy.deepcopy(GOOD)
    data["questions"][0]["choices"][1]["correct"] = "false"
    write_quiz(tmp_path, "strbool", data)
    with pytest.raises(QuizDataError, match="true 또는 false"):
        quiz.load("strbool", tmp_path)


def test_duplicate_ids_are_refused_within_and_across_quizzes(tmp_path):
    data = copy.deepcopy(GOOD)
    data["questions"].append(copy.deepcopy(data["questions"][0]))
    write_quiz(tmp_path, "dup", data)
    with pytest.raises(QuizDataError, match="두 번"):
        quiz.load("dup", tmp_path)
    (tmp_path / "dup.yml").unlink()
    write_quiz(tmp_path, "a", GOOD)
    write_quiz(tmp_path, "b", GOOD)
    with pytest.raises(QuizDataError, match="책 전체"):
        quiz.load_all(tmp_path)


def test_missing_quiz_file_lists_existing_ones(tmp_path):
    write_quiz(tmp_path, "good", GOOD)

    with pytest.raises(QuizDataError) as info:
        quiz.load("nope", tmp_path)

    message = str(info.value)
    assert "퀴즈 파일이 없습니다" in message
    assert "nope.yml" in message
    assert "good" in message


# ----------------------------------------------------------------------------- HTML

def test_html_has_one_button_per_choice_with_correct_flags(tmp_path):
    write_quiz(tmp_path, "good", GOOD)
    questions = quiz.load("good", tmp_path)

    html = quiz.to_html("good", questions)
    sections = parse_html(html)

    assert [s["qid"] for s in sections] == ["ranks-are-processes", "global-batch"]
    # data-choice is the choice's index in the YAML; the page shows a fixed shuffle of them
    assert [[b["data-choice"] for b in s["buttons"]] for s in sections] == [["2", "1", "0"], ["0", "1"]]
    assert [[b["data-correct"] for b in s["buttons"]] for s in sections] == [["0", "1", "0"], ["1", "0"]]
    assert all(b.get("type") == "button" for s in sections for b in s["buttons"])
    # each choice carries its own Korean "why" for the feedback line
    by_choice = [{b["data-choice"]: b for b in s["buttons"]} for s in sections]
    assert by_choice[0]["1"]["data-why"] == "맞습니다. 랭크마다 PID가 다릅니다."
    assert by_choice[0]["2"]["data-why"] == "커널은 프로세스 안에서 실행되는 작업입니다."
    assert by_choice[1]["1"]["data-why"] == "8은 한 랭크가 받는 <code>미니배치</code> 크기입니다."
    assert 'data-quiz="good"' in html
    assert "문제 2개" in html
    assert "<code>torchrun --nproc_per_node=4</code>" in html
    assert "&lt;b&gt;몇&lt;/b&gt;" in html  # prompt text is escaped, not injected as markup
    assert "<b>몇</b>" not in html
    assert html.count("<section") == 2


def test_html_is_deterministic(tmp_path):
    write_quiz(tmp_path, "good", GOOD)

    first = quiz.to_html("good", quiz.load("good", tmp_path))
    second = quiz.to_html("good", quiz.load("good", tmp_path))

    assert first == second


def test_html_is_the_same_in_another_interpreter(tmp_path):
    # no random ids and nothing that depends on hash randomization or object addresses
    write_quiz(tmp_path, "good", GOOD)
    here = quiz.to_html("good", quiz.load("good", tmp_path))
    code = ("import sys; from pathlib import Path; from labs import quiz; "
            "sys.stdout.write(quiz.to_html('good', quiz.load('good', Path(sys.argv[1]))))")
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                           timeout=60, env={**os.environ, "PYTHONHASHSEED": "12345"})

    assert other.returncode == 0, other.stderr.decode(errors="replace")
    assert other.stdout.decode("utf-8") == here


def test_correct_slot_does_not_depend_on_the_yaml_position(tmp_path):
    # moving the correct choice in the YAML leaves it where the reader saw it: the slot comes from
    # the quiz name and question ids, so no authoring habit (correct first) survives into the page
    moved = copy.deepcopy(GOOD)
    for question in moved["questions"]:
        question["choices"].append(question["choices"].pop(0))  # every correct choice moves up one place
    write_quiz(tmp_path, "good", GOOD)
    (tmp_path / "moved").mkdir()
    write_quiz(tmp_path / "moved", "good", moved)

    page = parse_html(quiz.to_html("good", quiz.load("good", tmp_path)))
    page_moved = parse_html(quiz.to_html("good", quiz.load("good", tmp_path / "moved")))

    for before, after in zip(page, page_moved, strict=True):
        assert [b["data-correct"] for b in before["buttons"]] == [b["data-correct"] for b in after["buttons"]]
        correct_before = next(b["data-choice"] for b in before["buttons"] if b["data-correct"] == "1")
        correct_after = next(b["data-choice"] for b in after["buttons"] if b["data-correct"] == "1")
        assert correct_before != correct_after


def test_each_quiz_deals_its_correct_slots_evenly():
    # twelve four-choice questions in one quiz: every slot holds the correct answer exactly three times,
    # and the sequence in reading order is not a simple cycle
    questions = [quiz.Question(f"q{i}", "문제", tuple(quiz.Choice(t, t == "맞음", "해설") for t in ("가", "나", "맞음", "라")),
                               "해설") for i in range(12)]
    orders = quiz.display_order("deal", questions)
    slots = [order.index(2) for order in orders]
    assert Counter(slots) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert slots != [i % 4 for i in range(12)] and slots[:4] != slots[4:8]
    assert all(sorted(order) == [0, 1, 2, 3] for order in orders)
    assert quiz.display_order("deal", questions) == orders
    assert quiz.display_order("other", questions) != orders


def test_quiz_reads_the_folder_next_to_the_notebook(tmp_path, monkeypatch):
    # labs does not know where the book keeps its bank: Quiz(name) resolves quizzes/ against the
    # working directory, which is the notebook's folder in Jupyter, Jupyter Book and nbval
    (tmp_path / "quizzes").mkdir()
    write_quiz(tmp_path / "quizzes", "good", GOOD)
    monkeypatch.chdir(tmp_path)
    assert [q.id for q in quiz.Quiz("good").questions] == ["ranks-are-processes", "global-batch"]

    monkeypatch.chdir(tmp_path / "quizzes")  # a notebook elsewhere: the message says how to point at the bank
    with pytest.raises(QuizDataError, match="quiz_dir="):
        quiz.Quiz("good")
    assert len(quiz.Quiz("good", quiz_dir=tmp_path / "quizzes").questions) == 2


def test_labs_does_not_hard_code_the_book_folder():
    source = (Path(quiz.__file__)).read_text(encoding="utf-8")
    assert '"book"' not in source and "parent.parent" not in source


# ----------------------------------------------------------------------------- the whole bank, as the reader sees it

def shown_by_quiz(quiz_dir: Path) -> dict[str, list[tuple[str, int, list[int]]]]:
    """Per quiz in ``quiz_dir``: (question id, 0-based position of the correct button, visible length
    of each button's text) for every question, read from the rendered HTML."""
    files = sorted(quiz_dir.glob("*.yml"))
    assert files, f"{quiz_dir}에 퀴즈 파일이 없습니다. 검사할 문제가 없으면 검사는 실패해야 합니다."
    quizzes = {}
    for name, questions in quiz.load_all(quiz_dir).items():  # a bank without questions raises QuizDataError
        rows = []
        for q, section in zip(questions, parse_html(quiz.to_html(name, questions)), strict=True):
            buttons = section["buttons"]
            position = [b["data-correct"] for b in buttons].index("1")
            lengths = [len(q.choices[int(b["data-choice"])].text.replace("`", "")) for b in buttons]
            rows.append((q.id, position, lengths))
        quizzes[name] = rows
    return quizzes


def shown(quiz_dir: Path) -> list[tuple[str, int, list[int]]]:
    """The rows of :func:`shown_by_quiz` for the whole bank."""
    return [row for rows in shown_by_quiz(quiz_dir).values() for row in rows]


BANK = "책 전체"


def allowed(share: float, rows, where: str) -> float:
    """How many questions may show a pattern: ``share`` of the bank, or of one quiz rounded up
    (a 5-question quiz may have 2 answers in one slot, or 2 longest correct answers)."""
    return share * len(rows) if where == BANK else math.ceil(share * len(rows))


def position_problem(rows, where: str = BANK) -> str | None:
    """Why ``rows`` could be won by always clicking one position (None when they cannot)."""
    counts = Counter(position for _, position, _ in rows)
    position, count = counts.most_common(1)[0]
    if count > allowed(MAX_POSITION_SHARE, rows, where):
        return (f"{where}: 정답이 {position + 1}번째 보기인 문제가 {count}/{len(rows)}개({count / len(rows):.0%})입니다. "
                f"한 자리가 {MAX_POSITION_SHARE:.0%}를 넘으면 안 됩니다. 위치별 정답 수: "
                + ", ".join(f"{p + 1}번째 {c}개" for p, c in sorted(counts.items())))
    return None


def length_problem(rows, where: str = BANK) -> str | None:
    """Why ``rows`` could be won by always clicking the longest choice (ties count as longest)."""
    longest = [qid for qid, position, lengths in rows if lengths[position] >= max(lengths)]
    if len(longest) > allowed(MAX_LONGEST_SHARE, rows, where):
        return (f"{where}: 정답이 가장 긴 보기(동률 포함)인 문제가 {len(longest)}/{len(rows)}개입니다. 3분의 1 이하여야 합니다. "
                f"정답을 짧게 다듬거나 오답에 실제 오해를 자세히 적으세요: {', '.join(longest)}")
    return None


def shortest_problem(rows, where: str = BANK) -> str | None:
    """Why ``rows`` could be won by always clicking the shortest choice (ties count as shortest)."""
    shortest = [qid for qid, position, lengths in rows if lengths[position] <= min(lengths)]
    if len(shortest) > allowed(MAX_LONGEST_SHARE, rows, where):
        return (f"{where}: 정답이 가장 짧은 보기(동률 포함)인 문제가 {len(shortest)}/{len(rows)}개입니다. "
                f"3분의 1 이하여야 합니다: {', '.join(shortest)}")
    return None


def test_bank_correct_position_is_spread():
    problem = position_problem(shown(QUIZ_BANK))
    assert problem is None, problem


@pytest.mark.parametrize("check", [position_problem, length_problem, shortest_problem], ids=lambda f: f.__name__)
def test_each_quiz_has_no_pattern(check):
    # a reader meets one chapter's quiz at a time: no position or length pattern there either
    problems = [check(rows, f"퀴즈 {name}") for name, rows in shown_by_quiz(QUIZ_BANK).items()]
    problems = [p for p in problems if p]
    assert not problems, "\n".join(problems)


def test_bank_correct_choice_is_rarely_the_longest():
    problem = length_problem(shown(QUIZ_BANK))
    assert problem is None, problem


def test_bank_correct_choice_is_not_systematically_the_shortest():
    # the other length pattern: once the correct answers are trimmed, "always click the shortest" must not win
    problem = shortest_problem(shown(QUIZ_BANK))
    assert problem is None, problem


def test_bank_checks_catch_patterns(tmp_path, monkeypatch):
    # without the shuffle the page shows the YAML order: a bank written "correct first" must fail
    rows = [("q1", 0, [9, 3, 3]), ("q2", 0, [8, 2, 2]), ("q3", 1, [2, 2, 5])]
    assert "1번째 2개" in position_problem(rows) and "2/3" in length_problem(rows)
    assert "2/3" in shortest_problem([("a", 0, [1, 5]), ("b", 0, [2, 2]), ("c", 0, [9, 1])])
    assert shortest_problem(rows) is None and length_problem([("a", 0, [1, 5]), ("b", 1, [4, 3, 3])]) is None
    assert position_problem([("a", 0, [1, 2]), ("b", 1, [1, 2]), ("c", 2, [1, 1, 2])]) is None
    seven = [(f"q{i}", p, [1, 2, 3, 4]) for i, p in enumerate([0, 0, 0, 1, 2, 3, 1])]
    assert position_problem(seven, "퀴즈 x") is None and "1번째 3개" in position_problem(seven)
    assert "퀴즈 x" in position_problem([(f"q{i}", p, [1, 2]) for i, p in enumerate([0, 0, 0, 1, 1])], "퀴즈 x")
    five_longest = [(f"q{i}", 0, [9, 1, 1]) for i in range(3)] + [(f"q{i}", 1, [9, 1, 1]) for i in range(3, 5)]
    assert length_problem(five_longest) and "퀴즈 x: " in length_problem(five_longest, "퀴즈 x")
    assert length_problem(five_longest[:2] + five_longest[3:], "퀴즈 x") is None
    monkeypatch.setattr(quiz, "display_order", lambda name, questions: [list(range(len(q.choices))) for q in questions])
    data = copy.deepcopy(GOOD)
    for i, question in enumerate(data["questions"] * 3):
        question = copy.deepcopy(question)
        question["id"] = f"q{i}"
        question["choices"].sort(key=lambda c: not c.get("correct", False))
        data.setdefault("extra", []).append(question)
    data["questions"] = data.pop("extra")
    write_quiz(tmp_path, "first", data)
    assert "1번째 6개" in position_problem(shown(tmp_path))


def test_bank_check_refuses_no_input(tmp_path):
    with pytest.raises(AssertionError, match="퀴즈 파일이 없습니다"):
        shown(tmp_path)
    write_quiz(tmp_path, "empty", {"questions": []})
    with pytest.raises(QuizDataError, match="문제 목록"):
        shown(tmp_path)
