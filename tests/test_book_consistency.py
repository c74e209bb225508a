"""Whole-book consistency: every chapter has its quiz, quiz ids are unique book-wide, and the
prose uses one Korean term per concept (the terms of ``book/glossary.md``).

These tests read the sources only (notebooks, markdown, quiz files); they need no build.
The table of contents is ``_toc.yml`` at the repository root (``DDP_TOC`` names another one,
e.g. a private toc used to build part of the book).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from conftest import QUIZ_BANK

from labs import quiz

REPO = Path(__file__).resolve().parent.parent
BOOK = REPO / "book"
CHAPTERS = sorted(p for p in BOOK.glob("[0-9][0-9]*_*.ipynb") if re.match(r"\d\d[a-z]?_", p.name))
QUIZ_FILES = sorted(QUIZ_BANK.glob("*.yml"))
MARKDOWN_PAGES = sorted(BOOK.glob("*.md"))

# 금지된 변이형 → 이 책이 쓰는 용어. 정규식은 본문(코드 셀·인라인 코드·수식 제외)에 적용한다.
FORBIDDEN_TERMS = {
    r"기울기": "그래디언트",
    r"경사(?!\s*하강)": "그래디언트 (경사 하강법은 허용)",
    r"그라디언트|그레이디언트|그래디언드": "그래디언트",
    r"레플리카|리플리카": "복제본",
    r"모델\s*사본|모델의\s*사본": "복제본",
    r"배치\s*사이즈": "배치 크기",
    r"월드\s*사이즈": "월드 크기",
    r"역전달": "역전파",
    r"포워드|포워딩": "순전파 (코드 이름은 forward)",
    r"백워드": "역전파 (코드 이름은 backward)",
    r"브로드케스트|브로드캐스팅": "브로드캐스트",
    r"올\s*-?\s*리듀스|올리듀스": "All-Reduce",
    r"올\s*-?\s*개더|올\s*-?\s*게더": "All-Gather",
    r"리듀스\s*-?\s*스캐터": "Reduce-Scatter",
    r"옵티마이져": "옵티마이저",
    r"파라메터|매개\s*변수": "파라미터",
    r"학습율": "학습률",
    r"버켓": "버킷",
    r"쓰레드": "스레드",
    r"백앤드": "백엔드",
    r"에포크": "에폭",
    r"랑데뷰": "랑데부",
    r"집합통신": "집합 통신",
    r"프로세스그룹": "프로세스 그룹",
    r"미니\s+배치": "미니배치",
    r"로컬랭크": "로컬 랭크",
    r"지연시간": "지연 시간",
    r"마이크로\s+배치": "마이크로배치",
    r"데이터\s+셋|데이터\s*세트": "데이터셋",
    r"체크\s+포인트": "체크포인트",
}

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_DISPLAY_MATH = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE_MATH = re.compile(r"\$[^$\n]+\$")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_TERM_ROLE = re.compile(r"\{term\}`([^`]+)`")


def markdown_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def prose(text: str) -> str:
    """Markdown without code blocks, inline code, math and link targets (what a reader reads as prose)."""
    for pattern in (_FENCE, _DISPLAY_MATH, _INLINE_CODE, _INLINE_MATH, _LINK_TARGET):
        text = pattern.sub(" ", text)
    return text


def quiz_texts(path: Path) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    texts = []
    for q in data["questions"]:
        texts += [q["question"], q["explanation"]] + [c["text"] for c in q["choices"]] + [c["why"] for c in q["choices"]]
    return texts


def prose_sources() -> list[tuple[str, str]]:
    """(where, text) for every chapter's markdown cells, every markdown page and every quiz text."""
    sources = [(p.name, text) for p in CHAPTERS for text in markdown_cells(p)]
    sources += [(p.name, p.read_text(encoding="utf-8")) for p in MARKDOWN_PAGES]
    sources += [(f"quizzes/{p.name}", text) for p in QUIZ_FILES for text in quiz_texts(p)]
    return sources


def toc_files() -> list[str]:
    """Every document (``root`` and each ``file``) the table of contents lists, at any depth."""
    toc_path = Path(os.environ.get("DDP_TOC") or REPO / "_toc.yml")
    files: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            files.extend(str(node[key]) for key in ("root", "file") if key in node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load(toc_path.read_text(encoding="utf-8")))
    return files


def glossary_terms() -> set[str]:
    """The terms defined in the ``{glossary}`` blocks of ``book/glossary.md`` (one block per initial)."""
    text = (BOOK / "glossary.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```\{glossary\}\n(.*?)\n```", text, re.S)
    assert blocks, "book/glossary.md에 {glossary} 블록이 없습니다."
    return {line.strip() for block in blocks for line in block.splitlines()
            if line.strip() and not line.startswith((" ", "\t", ":"))}


# ----------------------------------------------------------------------------- quizzes

def test_chapters_exist():
    assert CHAPTERS, f"{BOOK}에 장 노트북(NN_*.ipynb)이 없습니다."


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_chapter_has_its_quiz(chapter):
    stem = chapter.stem
    # Quiz("NN_name") in the notebook reads quizzes/NN_name.yml next to the notebook (the kernel's folder)
    assert (chapter.parent / quiz.NEXT_TO_NOTEBOOK / f"{stem}.yml").is_file(), (
        f"{chapter.name}의 퀴즈 파일 book/quizzes/{stem}.yml이 없습니다. 장마다 확인 문제가 있어야 합니다.")
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    calls = [c for c in nb["cells"] if c["cell_type"] == "code" and f'Quiz("{stem}")' in "".join(c["source"])]
    assert calls, f'{chapter.name}에 Quiz("{stem}")를 부르는 코드 셀이 없습니다("확인 문제" 절에 넣으세요).'


@pytest.mark.parametrize("path", QUIZ_FILES, ids=lambda p: p.name)
def test_every_quiz_belongs_to_a_chapter_in_the_toc(path):
    listed = toc_files()
    assert f"book/{path.stem}" in listed, (
        f"퀴즈 {path.name}의 장 book/{path.stem}이 목차(_toc.yml)에 없습니다. 목차에 있는 장: {', '.join(listed)}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data.get("chapter", path.stem) == path.stem, f"{path.name}의 chapter 값이 파일 이름과 다릅니다."


def test_all_quizzes_load_with_unique_ids():
    quizzes = quiz.load_all(QUIZ_BANK)  # 책 전체에서 id가 겹치면 QuizDataError
    assert set(quizzes) == {p.stem for p in QUIZ_FILES}
    for name, questions in quizzes.items():
        number = re.match(r"(\d\d)([a-z]?)_", name)
        prefix = f"ch{int(number.group(1))}{number.group(2)}-"
        wrong = [q.id for q in questions if not q.id.startswith(prefix)]
        assert not wrong, f"퀴즈 {name}의 문제 id는 '{prefix}'로 시작해야 합니다: {wrong}"
        assert len(questions) >= 3, f"퀴즈 {name}에는 문제가 3개 이상 있어야 합니다."


# ----------------------------------------------------------------------------- one term per concept

def test_forbidden_term_table_is_valid():
    for pattern in FORBIDDEN_TERMS:
        re.compile(pattern)
    assert re.search("경사(?!\\s*하강)", "경사 하강법") is None  # 경사 하강법은 표준 용어라 허용
    sample = "기울기를 올리듀스로 평균하고 배치 사이즈와 월드사이즈를 레플리카마다 맞춘다"
    caught = {FORBIDDEN_TERMS[p] for p in FORBIDDEN_TERMS if re.search(p, prose(sample))}
    assert caught == {"그래디언트", "All-Reduce", "배치 크기", "월드 크기", "복제본"}


@pytest.mark.parametrize("pattern", FORBIDDEN_TERMS, ids=lambda p: FORBIDDEN_TERMS[p].split(" ")[0] + ":" + p[:12])
def test_prose_uses_the_preferred_term(pattern):
    found = []
    for where, text in prose_sources():
        for match in re.finditer(pattern, prose(text)):
            start = max(0, match.start() - 20)
            found.append(f"{where}: …{prose(text)[start:match.end() + 20].strip()}…")
    assert not found, (f"본문에 '{match.group(0)}'이(가) 있습니다. 이 책은 '{FORBIDDEN_TERMS[pattern]}'을(를) 씁니다:\n"
                       + "\n".join(found[:10]))


def test_prose_helper_ignores_code_and_math():
    text = "순전파 `포워드()` $\\text{포워드}$\n```python\n# 포워드\n```\n[2장](포워드.ipynb)"
    assert "포워드" not in prose(text) and "순전파" in prose(text) and "2장" in prose(text)


def test_term_roles_refer_to_glossary_terms():
    terms = glossary_terms()
    assert {"그래디언트", "복제본", "All-Reduce"} <= terms
    unknown = []
    for where, text in prose_sources():
        for target in _TERM_ROLE.findall(text):
            name = re.search(r"<([^>]+)>$", target)
            name = name.group(1) if name else target
            if name not in terms:
                unknown.append(f"{where}: {{term}}`{target}`")
    assert not unknown, ("용어집(book/glossary.md)에 없는 용어를 {term}으로 연결했습니다. 용어집에 추가하거나 "
                         "일반 글자로 쓰세요:\n" + "\n".join(sorted(set(unknown))))
