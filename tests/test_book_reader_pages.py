"""What a reader meets in the prose of the chapters, read from the sources (no build needed).

- One canonical explanation per mechanism: the iteration-1 bucket rebuild is explained in 7.7
  (label ``bucket-rebuild``), the 1/N pre-division in 7.1 (label ``pre-division``). Any other place
  that mentions one says what happens in a sentence and links the label with ``{ref}``.
- Names from PyTorch's source (``_rebuild_buckets``, ``div_factor_``, ...) appear in the markdown only
  inside a "소스에서 보기" aside (``:::{admonition} 소스에서 보기`` with ``:class: dropdown source-aside``).
- No prose sentence is longer than 150 characters, spaces included (code, tables, math, headings and
  directive options are not prose, nor are link targets; a sentence ends at . ? ! before white space).
- The labs' check ids (``busbw_below_memcpy`` …) stay out of the prose: the folded check table names
  them. Chapter 9 (the grader prints its verdicts by id) and the "직접 해 보기" sections (the reader
  reads the CLI's report) may name them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parent.parent / "book"
CHAPTERS = sorted(BOOK.glob("[01][0-9]_*.ipynb"))
PAGES = [BOOK / "intro.md", BOOK / "glossary.md"]
MAX_SENTENCE = 150
ASIDE_TITLE, ASIDE_CLASS = "소스에서 보기", "source-aside"
SOURCE_NAMES = ("sys.maxsize", "require_forward_param_sync", "sync_bucket_indices", "div_factor_", "_rebuild_buckets",
                "compute_bucket_size_limits", "_pre_forward", "_post_forward", "should_rebuild_buckets", "at::mul_out",
                "_sync_buffers", "will_sync_module_buffers", "_check_sync_bufs_pre_fwd")
_SOURCE_NAME = re.compile("|".join(rf"(?<!\w){re.escape(n)}(?!\w)" for n in SOURCE_NAMES))


_CHECK_DEFINITION = re.compile(r'(?:check_\w+|not_applicable|Check)\(\s*f?"([a-z][a-z0-9_]*)"')
CHECK_IDS_ALLOWED = ("09_miniddp",)  # 채점기가 판정을 이 이름으로 출력한다
TRY_IT = "직접 해 보기"


def check_ids(root: Path = BOOK.parent / "labs") -> set[str]:
    """Every check id a lab defines (the first argument of check_close, check_equal, …)."""
    return {m.group(1) for path in root.rglob("*.py") for m in _CHECK_DEFINITION.finditer(path.read_text("utf-8"))}


@dataclass(frozen=True)
class Mechanism:
    mention: str  # a sentence that talks about the mechanism
    restates: str  # a sentence that explains it again (only the canonical section may)


MECHANISMS = {
    "bucket-rebuild": Mechanism(
        mention=r"재구성|버킷을 다시 (?:짜|짠|짭|만들|만든|만듭)|다시 (?:짠|만든) 버킷",
        restates=r"(?=.*(?:재구성|다시 (?:짜|짠|짭|만들|만든|만듭)))(?=.*(?:준비(?:된|되는)? 순서|관찰한 순서|배운 순서|본 순서|기록))"),
    "pre-division": Mechanism(
        mention=r"미리 나[누눈눠]|1/N\$?[을를] 곱|div_factor|mul_out|predivid",
        restates=r"div_factor|mul_out"),
}


# ----------------------------------------------------------------------------- reading markdown

_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(?:\{([\w:.-]+)\})?(.*)$")
_OPTION = re.compile(r"^\s*:[\w-]+:")
_VERBATIM = {"literalinclude", "code-block", "code", "code-cell", "list-table", "csv-table", "table", "math", "raw"}
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.?!])[\"'”’)*_]*(?=\s|$)")
_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$")
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")


@dataclass(frozen=True)
class Line:
    kind: str  # prose, code, math, table, heading, label, option, fence, blank, html
    text: str
    in_aside: bool


def read_lines(markdown: str) -> list[Line]:
    """Every line of ``markdown`` with what it is and whether it sits in a "소스에서 보기" aside."""
    stack: list[dict] = []
    in_math = False
    lines = []
    for text in markdown.splitlines():
        aside = any(f["aside"] for f in stack)
        top = stack[-1] if stack else None
        fence = _FENCE.match(text)
        closes = bool(top and fence and fence.group(1)[0] == top["char"] and len(fence.group(1)) >= top["len"]
                      and not fence.group(2) and not fence.group(3).strip())
        if closes:
            stack.pop()
            lines.append(Line("fence", text, aside))
        elif top and top["verbatim"]:
            lines.append(Line("code", text, aside))
        elif top and top["options"] and _OPTION.match(text):
            if text.strip().startswith(":class:"):
                top["aside"] = top["title"] == ASIDE_TITLE and ASIDE_CLASS in text.split()
            lines.append(Line("option", text, aside))
        elif fence:
            if top:
                top["options"] = False
            name = fence.group(2)
            stack.append({"char": fence.group(1)[0], "len": len(fence.group(1)), "options": name is not None,
                          "verbatim": name is None or name in _VERBATIM, "aside": False,
                          "title": fence.group(3).strip() if name == "admonition" else None})
            lines.append(Line("fence", text, aside))
        else:
            if top:
                top["options"] = False
            stripped = text.strip()
            if stripped.startswith("$$") or in_math:
                if stripped.startswith("$$") and not (len(stripped) > 2 and stripped.endswith("$$")):
                    in_math = not in_math
                kind = "math"
            elif not stripped:
                kind = "blank"
            elif stripped.startswith("|"):
                kind = "table"
            elif stripped.startswith("#"):
                kind = "heading"
            elif _LABEL.match(stripped):
                kind = "label"
            elif stripped.startswith("<"):
                kind = "html"
            else:
                kind = "prose"
            lines.append(Line(kind, text, aside))
    return lines


def sentences(markdown: str, *, asides: bool = True) -> list[str]:
    """The prose sentences of ``markdown``: paragraphs and list items joined, split after . ? ! before a space."""
    paragraphs: list[str] = []
    current: list[str] = []
    for line in read_lines(markdown):
        if line.kind != "prose" or (line.in_aside and not asides) or _LIST_ITEM.match(line.text):
            if current:
                paragraphs.append(" ".join(current))
            current = []
        if line.kind == "prose" and (asides or not line.in_aside):
            current.append(_LIST_ITEM.sub("", line.text).strip().lstrip("> "))
    if current:
        paragraphs.append(" ".join(current))
    found = []
    for paragraph in paragraphs:
        start = 0
        for end in _SENTENCE_END.finditer(paragraph):
            found.append(paragraph[start:end.end()].strip())
            start = end.end()
        if paragraph[start:].strip():
            found.append(paragraph[start:].strip())
    return found


def markdown_of(path: Path) -> list[str]:
    """The markdown cells of a notebook, or the whole text of a markdown page."""
    if path.suffix == ".md":
        return [path.read_text(encoding="utf-8")]
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def sections(cells: list[str]) -> list[tuple[str | None, str]]:
    """The markdown cells cut at their ``##`` headings (a section's cells joined: a box's own cell is part of its
    section's text), with the label of the section every piece belongs to."""
    pieces: list[tuple[str | None, str]] = []
    label, pending = None, None
    current: list[str] = []
    for cell in cells:
        for text in [*cell.splitlines(), ""]:
            if text.startswith("## "):
                if current:
                    pieces.append((label, "\n".join(current)))
                label, pending, current = pending, None, []
            found = _LABEL.match(text.strip())
            pending = found.group(1) if found else (pending if not text.strip() else None)
            current.append(text)
    if current:
        pieces.append((label, "\n".join(current)))
    return pieces


# ----------------------------------------------------------------------------- the three rules

def mechanism_problems(book: dict[str, list[str]], name: str) -> list[str]:
    """Where ``name`` is not explained once in its labelled section and only linked elsewhere."""
    mechanism = MECHANISMS[name]
    link = re.compile(rf"\{{ref\}}`[^`<]*<{re.escape(name)}>`")
    homes = [place for place, cells in book.items() for label, _ in sections(cells) if label == name]
    problems = [] if len(set(homes)) == 1 and len(homes) >= 1 else [f"라벨 ({name})= 이 붙은 절: {len(homes)}곳"]
    labels = sum(c.count(f"({name})=") for cells in book.values() for c in cells)
    if labels != 1:
        problems.append(f"라벨 ({name})= 이 {labels}번 있습니다")
    for place, cells in book.items():
        for label, text in sections(cells):
            if label == name:
                continue
            said = sentences(text, asides=False)
            if any(re.search(mechanism.mention, s) for s in said) and not link.search(text):
                problems.append(f"{place}: 링크 없이 언급 — {next(s for s in said if re.search(mechanism.mention, s))[:80]}")
            problems += [f"{place}: 다시 설명 — {s[:80]}" for s in said if re.search(mechanism.restates, s)]
    return problems


def source_names_outside_asides(markdown: str) -> list[str]:
    """Source names used in ``markdown`` outside a "소스에서 보기" aside (code blocks do not count)."""
    return [m.group(0) for line in read_lines(markdown) if line.kind not in ("code", "fence") and not line.in_aside
            for m in _SOURCE_NAME.finditer(line.text)]


def length(sentence: str) -> int:
    """Characters a reader reads, spaces included: a link counts its text, not its target."""
    return len(_LINK_TARGET.sub("]", sentence))


def long_sentences(markdown: str) -> list[str]:
    return [s for s in sentences(markdown) if length(s) > MAX_SENTENCE]


def check_ids_in_prose(cells: list[str], ids: set[str]) -> list[str]:
    """Check ids written in backticks in the prose of ``cells``, outside the "직접 해 보기" sections."""
    found = []
    for _, text in sections(cells):
        if TRY_IT in text.split("\n", 1)[0]:
            continue
        found += [m.group(1) for line in read_lines(text) if line.kind in ("prose", "option")
                  for m in re.finditer(r"`([a-z][a-z0-9_]*)`", line.text) if m.group(1) in ids]
    return found


# ----------------------------------------------------------------------------- the book

def test_there_are_chapters():
    assert len(CHAPTERS) == 14 and all(p.exists() for p in PAGES)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_each_mechanism_is_explained_once_and_linked_elsewhere(name):
    book = {p.name: markdown_of(p) for p in CHAPTERS}
    problems = mechanism_problems(book, name)
    assert problems == [], (
        f"'{name}'의 설명은 라벨 ({name})= 이 붙은 절 한 곳에만 둡니다. 다른 곳에서는 무슨 일이 일어나는지 한 문장으로 쓰고 "
        f"{{ref}}`… <{name}>`로 잇되, 과정은 다시 설명하지 마세요:\n" + "\n".join(problems))


@pytest.mark.parametrize("path", CHAPTERS + PAGES, ids=lambda p: p.stem)
def test_source_names_stay_in_asides(path):
    found = [name for text in markdown_of(path) for name in source_names_outside_asides(text)]
    assert found == [], (f"{path.name}: 소스의 이름 {sorted(set(found))}은(는) '소스에서 보기' 상자"
                         "(:::{admonition} 소스에서 보기 / :class: dropdown source-aside) 안에만 쓰고, 본문은 쉬운 말로 쓰세요.")


@pytest.mark.parametrize("path", CHAPTERS + PAGES, ids=lambda p: p.stem)
def test_sentences_are_short(path):
    found = [s for text in markdown_of(path) for s in long_sentences(text)]
    assert found == [], (f"{path.name}: {MAX_SENTENCE}자가 넘는 문장이 {len(found)}개 있습니다. 두 문장으로 나누세요:\n"
                         + "\n".join(f"[{length(s)}자] {s}" for s in found))


def test_the_labs_define_check_ids():
    ids = check_ids()
    assert len(ids) > 100 and {"busbw_below_memcpy", "replicas_identical"} <= ids


@pytest.mark.parametrize("path", [p for p in CHAPTERS if p.stem not in CHECK_IDS_ALLOWED], ids=lambda p: p.stem)
def test_check_ids_stay_out_of_the_prose(path):
    found = check_ids_in_prose(markdown_of(path), check_ids())
    assert found == [], (f"{path.name}: 본문에 실습의 확인 id {sorted(set(found))}가 있습니다. 접힌 확인 표가 그 이름을 "
                         "보여 주니, 본문은 무엇을 재는지 말로 쓰세요('직접 해 보기' 절은 괜찮습니다).")


# ----------------------------------------------------------------------------- each rule sees a broken page

def test_the_check_id_rule_sees_an_id_in_prose_only():
    cells = ["## 8.2 지연 시간 (심화)\n\n확인 항목 `cost_model_fits`가 잽니다. `torch.compile`은 아닙니다.\n\n"
             "```python\nresult.checks['busbw_below_memcpy']\n```\n",
             "## 8.9 직접 해 보기\n\n`cost_model_fits`가 해당 없음이 됩니다."]
    assert check_ids_in_prose(cells, {"cost_model_fits", "busbw_below_memcpy"}) == ["cost_model_fits"]


def test_the_mechanism_rule_sees_an_unlinked_mention_and_a_restatement():
    home = ["(bucket-rebuild)=\n## 7.7 버킷 재구성 (심화)\n\n첫 역전파가 준비된 순서를 기록하고 두 번째 순전파에서 재구성합니다."]
    linked = ["## 2.3 (심화)\n\n두 번째 순전파에서 {ref}`버킷 재구성 <bucket-rebuild>` 브로드캐스트가 더해집니다."]
    assert mechanism_problems({"07.ipynb": home, "02.ipynb": linked}, "bucket-rebuild") == []
    unlinked = ["## 3.3 (심화)\n\n두 번째 순전파에서 버킷 재구성 브로드캐스트가 더해집니다."]
    restated = ["## 6.4 (심화)\n\nDDP는 준비된 순서로 버킷을 다시 짭니다({ref}`버킷 재구성 <bucket-rebuild>`)."]
    problems = mechanism_problems({"07.ipynb": home, "03.ipynb": unlinked, "06.ipynb": restated}, "bucket-rebuild")
    assert [p.split(":")[0] + ":" + p.split(":")[1].split("—")[0] for p in problems] == [
        "03.ipynb: 링크 없이 언급 ", "06.ipynb: 다시 설명 "]
    assert mechanism_problems({"02.ipynb": linked}, "bucket-rebuild")  # 설명하는 절이 없다
    aside = ["## 4.1 (핵심)\n\n미리 나눕니다({ref}`미리 나누기 <pre-division>`).\n\n"
             ":::{admonition} 소스에서 보기\n:class: dropdown source-aside\n`1/div_factor_`\n:::\n"]
    divided = ["(pre-division)=\n## 7.1 (핵심)\n\n`at::mul_out(bucket_view, grad, 1/div_factor_)`"]
    assert mechanism_problems({"07.ipynb": divided, "04.ipynb": aside}, "pre-division") == []
    assert mechanism_problems({"07.ipynb": divided, "04.ipynb": [aside[0].replace(":::{admonition}", "")]},
                              "pre-division")


def test_the_source_name_rule_sees_a_name_outside_an_aside():
    page = ("DDP는 `_pre_forward`에서 버퍼를 보냅니다. `forward_sync_buffers=False`는 이름이 아닙니다.\n\n"
            ":::{admonition} 소스에서 보기\n:class: dropdown source-aside\n`reducer._rebuild_buckets()`가 합니다.\n:::\n\n"
            "```python\nddp._sync_buffers()\n```\n\n"
            ":::{admonition} 다른 상자\n:class: dropdown\n`sys.maxsize`\n:::\n")
    assert source_names_outside_asides(page) == ["_pre_forward", "sys.maxsize"]


def test_the_sentence_rule_sees_a_long_sentence_and_only_prose():
    long = "가" * 151 + "."
    page = (f"## {long}\n\n짧은 문장입니다. {long} 끝.\n\n| {long} |\n\n$$\n{long}\n$$\n\n"
            f"```{{prediction}} x\n:question: {long}\n본문도 **문장입니다.** {long}\n```\n\n```text\n{long}\n```\n")
    assert long_sentences(page) == [long, long]
    assert sentences("- 하나. 둘?\n- 셋!") == ["하나.", "둘?", "셋!"]
    linked = "[1장](" + "x" * 200 + ".ipynb)에서 봅니다."
    assert long_sentences(linked) == [] and long_sentences(linked.replace("](", " (")) == [linked.replace("](", " (")]
