"""Quiz data (``book/quizzes/*.yml``): every file loads, bad data is refused in Korean, HTML is stable."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from labs import quiz
from labs.quiz import QUIZ_DIR, QuizDataError

from conftest import has_hangul

REAL_QUIZZES = sorted(QUIZ_DIR.glob("*.yml"))

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
    assert REAL_QUIZZES, f"{QUIZ_DIR}에 퀴즈 파일(*.yml)이 하나도 없습니다"


@pytest.mark.parametrize("path", REAL_QUIZZES, ids=lambda p: p.name)
def test_real_quiz_loads_and_renders(path):
    questions = quiz.load(path.stem)

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
        for q in quiz.load(path.stem):
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
    assert [[b["data-correct"] for b in s["buttons"]] for s in sections] == [["0", "1", "0"], ["1", "0"]]
    assert all(b.get("type") == "button" for s in sections for b in s["buttons"])
    # each choice carries its own Korean "why" for the feedback line
    assert sections[0]["buttons"][1]["data-why"] == "맞습니다. 랭크마다 PID가 다릅니다."
    assert sections[1]["buttons"][1]["data-why"] == "8은 한 랭크가 받는 <code>미니배치</code> 크기입니다."
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
