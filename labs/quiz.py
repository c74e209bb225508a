"""Self-check quizzes: questions live as data (the book's ``quizzes/*.yml``), rendered as static HTML.

The same HTML works in the built site with no kernel and no network, and in live Jupyter:
choices are real buttons, feedback and the explanation of every answer are in the page, and a
small inline script (``quiz.js``) marks answers and keeps progress in the browser's
localStorage. Ids are derived from the data, so the output is the same on every run.

The bank's folder is the book's business, not this package's: ``Quiz(name)`` reads
``quizzes/<name>.yml`` relative to the working directory, which is the folder of the notebook
that shows it (Jupyter, Jupyter Book and nbval all start the kernel there); everything else
(the book's Sphinx extension, the tests) passes the folder explicitly.

Authors write the correct choice anywhere in the YAML; the reader sees the choices in a fixed
order derived from the quiz name and question ids (:func:`display_order`), with the correct
answers spread over the slots, so a position pattern in the data never reaches the page and
every build renders the same order.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

NEXT_TO_NOTEBOOK = Path("quizzes")  # Quiz(name)'s folder: relative, so it resolves next to the notebook
STORAGE_KEY = "ddp-course-quiz-progress"  # localStorage key of the reader's answers (quiz.js, progress table)
_ASSETS = Path(__file__).resolve().parent
_HANGUL = re.compile(r"[\uac00-\ud7a3]")


class QuizDataError(ValueError):
    """A quiz file breaks the format (message in Korean)."""


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Question:
    id: str
    prompt: str
    choices: tuple[Choice, ...]
    explanation: str


def load(name: str, quiz_dir: Path) -> list[Question]:
    """Load and validate ``<quiz_dir>/<name>.yml``."""
    path = Path(quiz_dir) / f"{name}.yml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in Path(quiz_dir).glob("*.yml"))) or "없음"
        raise QuizDataError(f"퀴즈 파일이 없습니다: {path.absolute()}. 그 폴더에 있는 퀴즈: {known}. "
                            "노트북 옆의 quizzes/ 폴더가 아니라면 Quiz(이름, quiz_dir=폴더)로 폴더를 알려 주세요.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise QuizDataError(f"퀴즈 파일 {path.name}의 YAML 문법이 잘못되었습니다: {err}") from None
    raw_questions = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(raw_questions, list) or not raw_questions:
        raise QuizDataError(f"퀴즈 '{name}'에는 문제 목록(questions:)이 있어야 합니다.")
    questions = [_question(name, i, q) for i, q in enumerate(raw_questions, start=1)]
    _check_unique_ids(questions, f"퀴즈 '{name}'")
    return questions


def load_all(quiz_dir: Path) -> dict[str, list[Question]]:
    """Every quiz in ``quiz_dir``; question ids must be unique across the book (progress is keyed by id)."""
    quizzes = {path.stem: load(path.stem, quiz_dir) for path in sorted(Path(quiz_dir).glob("*.yml"))}
    _check_unique_ids([q for qs in quizzes.values() for q in qs], "책 전체")
    return quizzes


def _check_unique_ids(questions: list[Question], where: str) -> None:
    seen = set()
    for q in questions:
        if q.id in seen:
            raise QuizDataError(f"{where}에 문제 id '{q.id}'가 두 번 나옵니다. id는 책 전체에서 하나뿐이어야 합니다.")
        seen.add(q.id)


def _question(name: str, number: int, raw) -> Question:
    where = f"퀴즈 '{name}'의 {number}번 문제"
    if not isinstance(raw, dict):
        raise QuizDataError(f"{where}는 id, question, choices, explanation을 가진 항목이어야 합니다.")
    for key in ("id", "question", "choices", "explanation"):
        if not raw.get(key):
            raise QuizDataError(f"{where}에 '{key}'가 없습니다.")
    if not isinstance(raw["choices"], list) or not all(isinstance(c, dict) for c in raw["choices"]):
        raise QuizDataError(f"{where}: choices는 text/correct/why를 가진 항목의 목록이어야 합니다.")
    if any(not isinstance(c.get("correct", False), bool) for c in raw["choices"]):
        raise QuizDataError(f"{where}: correct에는 true 또는 false만 쓸 수 있습니다(따옴표 없이).")
    choices = tuple(Choice(str(c.get("text", "")), c.get("correct", False), str(c.get("why", "")))
                    for c in raw["choices"])
    if len(choices) < 2:
        raise QuizDataError(f"{where}: 보기가 2개 이상이어야 합니다.")
    if sum(c.correct for c in choices) != 1:
        raise QuizDataError(f"{where}: 정답 보기(correct: true)가 정확히 하나여야 합니다.")
    for c in choices:
        if not c.text or not _HANGUL.search(c.why):
            raise QuizDataError(f"{where}: 모든 보기에 text와 한국어 해설(why)이 있어야 합니다.")
    if not _HANGUL.search(str(raw["explanation"])):
        raise QuizDataError(f"{where}: 해설(explanation)은 한국어여야 합니다.")
    return Question(str(raw["id"]), str(raw["question"]), choices, str(raw["explanation"]))


def _inline(text: str) -> str:
    """Escape text, keeping `code` spans."""
    parts = re.split(r"`([^`]+)`", text)
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(parts))


def _digest(*parts: str) -> bytes:
    """SHA-256 of the parts: the same in every interpreter (unlike the per-process ``hash()``)."""
    return hashlib.sha256("/".join(parts).encode("utf-8")).digest()


def display_order(name: str, questions: list[Question]) -> list[list[int]]:
    """For each question, the indices into its ``choices`` in the order the reader sees them.

    The slot of the correct choice is dealt so that each quiz spreads its answers over the slots:
    questions are taken in an order fixed by ``sha256(quiz name/question id)`` and each gets the
    least-used slot so far (ties broken by the same hash), so no slot holds more than its share and
    the sequence in reading order follows no cycle. The other choices fill the remaining slots in
    an order fixed by ``sha256(quiz name/question id/YAML index)``. Nothing depends on where the
    author wrote the correct choice, and every build renders the same page.
    """
    used: dict[int, int] = {}
    slots: dict[str, int] = {}
    for q in sorted(questions, key=lambda q: _digest(name, q.id)):
        slot = min(range(len(q.choices)), key=lambda k: (used.get(k, 0), _digest(name, q.id, "slot", str(k))))
        used[slot] = used.get(slot, 0) + 1
        slots[q.id] = slot
    orders = []
    for q in questions:
        correct = next(i for i, c in enumerate(q.choices) if c.correct)
        others = sorted((i for i in range(len(q.choices)) if i != correct), key=lambda i: _digest(name, q.id, str(i)))
        others.insert(slots[q.id], correct)
        orders.append(others)
    return orders


def to_html(name: str, questions: list[Question]) -> str:
    blocks = []
    for number, (q, order) in enumerate(zip(questions, display_order(name, questions)), start=1):
        buttons = "".join(
            f'<button type="button" class="ddp-quiz-choice" data-choice="{i}" data-correct="{int(q.choices[i].correct)}" '
            f'data-why="{html.escape(_inline(q.choices[i].why))}">{_inline(q.choices[i].text)}</button>'
            for i in order
        )
        blocks.append(
            f'<section class="ddp-quiz-q" data-qid="{html.escape(q.id)}">'
            f'<p class="ddp-quiz-prompt"><strong>문제 {number}.</strong> {_inline(q.prompt)}</p>'
            f'<div class="ddp-quiz-choices" role="group" aria-label="문제 {number}의 보기">{buttons}</div>'
            f'<div class="ddp-quiz-feedback" role="status" aria-live="polite"></div>'
            f'<div class="ddp-quiz-explanation" hidden><strong>해설</strong> {_inline(q.explanation)}</div>'
            "</section>"
        )
    style = (_ASSETS / "quiz.css").read_text(encoding="utf-8")
    script = compact_script((_ASSETS / "quiz.js").read_text(encoding="utf-8").replace("__STORAGE_KEY__", STORAGE_KEY))
    return (
        f'<div class="ddp-quiz" data-quiz="{html.escape(name)}">'
        f'<p class="ddp-quiz-score" aria-live="polite">문제 {len(questions)}개 · 보기를 눌러 답해 보세요.</p>'
        + "".join(blocks)
        + f"</div><style>{style}</style><script>{script}</script>"
    )


def compact_script(script: str) -> str:
    """An inline script as the page carries it: no indentation, no blank or ``//`` comment lines (every page with a
    quiz or a prediction carries one; the comments are for whoever edits the file)."""
    lines = (line.strip() for line in script.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("//"))


class Quiz:
    """Displayable quiz: ``Quiz("01_structure")`` as the last line of a notebook cell reads
    ``quizzes/01_structure.yml`` next to the notebook; ``quiz_dir`` names another folder."""

    def __init__(self, name: str, quiz_dir: Path = NEXT_TO_NOTEBOOK):
        self.name = name
        self.questions = load(name, quiz_dir)

    def _repr_html_(self) -> str:
        return to_html(self.name, self.questions)

    def __repr__(self) -> str:
        return f"<퀴즈 {self.name}: 문제 {len(self.questions)}개 (HTML을 보여 주는 환경에서 풀 수 있습니다)>"
