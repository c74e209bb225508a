"""Sphinx extension: the one-hour path, measured from the book itself.

Every chapter marks the sections of the core path with "(핵심)" at the end of their ``##`` heading.
While reading each chapter this extension counts everything a reader meets on that path: the opener
(the text before the first ``##``) and every core section, as

- prose: non-space characters of the text (code, outputs, tables, figures and formulas are not prose);
- code: non-blank lines of every code block the page shows (folded lab cells are not shown);
- tables and printed results: non-space characters of Markdown tables, HTML tables and printed outputs;
- figures, prediction boxes, quiz questions and write-your-answer boxes, each for a fixed time.

The rates are in ``RATES`` and the intro states them next to the total. The ``{core-path}`` directive (in
the intro) lists the path stop by stop with those minutes, so the number a reader sees is the book's,
never typed by hand.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from bs4 import BeautifulSoup
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

CORE_MARK = "(핵심)"


@dataclass(frozen=True)
class Rates:
    """How fast a reader gets through each kind of content (stated on the intro page)."""

    prose_chars: int = 500      # 본문 글자(공백 제외) / 분
    code_lines: int = 10        # 코드 줄 / 분
    table_chars: int = 500      # 표·출력 글자(공백 제외) / 분
    figure: float = 1.0         # 그림 하나, 분
    prediction: float = 1.0     # 예측 하나(고르고 결과 읽기), 분
    quiz_question: float = 1.0  # 확인 문제 한 문항, 분
    write_box: float = 2.0      # 직접 써 보는 칸 하나, 분


RATES = Rates()
_NOT_PROSE = (nodes.literal_block, nodes.raw, nodes.table, nodes.math, nodes.math_block, nodes.image,
              nodes.figure, nodes.title, nodes.comment)
# myst-nb's hide_mode of a cell: hide-input → "input", hide-output → "output", both tags → "input+output",
# hide-cell → "all"
_HIDDEN_INPUT = {"input", "input+output", "all"}
_HIDDEN_OUTPUT = {"output", "input+output", "all"}


def _is_cell(node) -> bool:
    return isinstance(node, nodes.container) and bool({"cell", "cell_input", "cell_output"} & set(node["classes"]))


def prose_chars(node) -> int:
    """Non-space characters of the prose under ``node`` (no code, outputs, tables, figures, formulas, titles)."""
    if isinstance(node, _NOT_PROSE) or _is_cell(node):
        return 0
    if isinstance(node, nodes.Text):
        return len(re.sub(r"\s", "", node.astext()))
    return sum(prose_chars(child) for child in node.children)


def _chars(text: str) -> int:
    return len(re.sub(r"\s", "", text))


@dataclass
class Shown:
    """What one part of a page shows a reader, by kind."""

    prose: int = 0
    code: int = 0
    tables: int = 0
    figures: int = 0
    predictions: int = 0
    questions: int = 0
    write_boxes: int = 0

    def __add__(self, other: Shown) -> Shown:
        return Shown(**{k: v + getattr(other, k) for k, v in asdict(self).items()})

    @property
    def minutes(self) -> float:
        return (self.prose / RATES.prose_chars + self.code / RATES.code_lines + self.tables / RATES.table_chars
                + self.figures * RATES.figure + self.predictions * RATES.prediction
                + self.questions * RATES.quiz_question + self.write_boxes * RATES.write_box)


def _raw_html(html: str) -> Shown:
    """A raw HTML block as the reader sees it: folded parts (<details> bodies) and scripts are not shown."""
    if "plotly-graph-div" in html:
        return Shown(figures=html.count('class="plotly-graph-div'))
    soup = BeautifulSoup(html, "html.parser")
    for el in soup.select("script, style"):
        el.decompose()
    for details in soup.select("details"):
        summary = details.find("summary")
        details.replace_with(summary.get_text() if summary is not None else "")
    questions = len(soup.select(".ddp-quiz-q"))
    boxes = len(soup.select("textarea"))
    if questions:  # 문항 시간에 문항 글을 읽는 시간이 들어 있다
        return Shown(questions=questions)
    for el in soup.select("textarea"):
        el.decompose()
    return Shown(tables=_chars(soup.get_text()), write_boxes=boxes)


def _cell(cell) -> Shown:
    hide = cell.get("hide_mode")
    shown = Shown()
    for part in cell.children:
        classes = set(part.get("classes", []))
        if "cell_input" in classes and hide not in _HIDDEN_INPUT:
            shown += Shown(code=sum(_code_lines(b) for b in part.findall(nodes.literal_block)))
        if "cell_output" in classes and hide not in _HIDDEN_OUTPUT:
            shown += _output(part)
    return shown


# myst-nb keeps every representation of an output; the HTML page shows the first of these it has
_MIME_PRIORITY = ("application/vnd.jupyter.widget-view+json", "application/javascript", "text/html", "image/svg+xml",
                  "image/png", "image/jpeg", "text/markdown", "text/latex", "text/plain")


def _rendered(bundle) -> list:
    """The one representation of a mime bundle that the HTML page shows."""
    parts = [c for c in bundle.children if c.get("mime_type") in _MIME_PRIORITY]
    if not parts:
        return list(bundle.children)
    return [min(parts, key=lambda c: _MIME_PRIORITY.index(c["mime_type"]))]


def _output(node) -> Shown:
    if node.get("nb_element") == "mime_bundle":
        node_parts = _rendered(node)
    elif isinstance(node, nodes.literal_block):
        return Shown(tables=_chars(node.astext()))
    elif isinstance(node, nodes.raw):
        return _raw_html(node.astext())
    elif isinstance(node, (nodes.image, nodes.figure)):
        return Shown(figures=1)
    else:
        node_parts = list(node.children)
    total = Shown()
    for part in node_parts:
        total += _output(part)
    return total


def _code_lines(block) -> int:
    return sum(1 for line in block.astext().splitlines() if line.strip())


def shown(node) -> Shown:
    """Everything under ``node`` that a reader meets, by kind (folded cells' code is not counted)."""
    if _is_cell(node) and "cell" in node["classes"]:
        return _cell(node)
    if isinstance(node, nodes.literal_block):
        return Shown(code=_code_lines(node))
    if isinstance(node, nodes.table):
        return Shown(tables=_chars(node.astext()))
    if isinstance(node, nodes.raw):
        return _raw_html(node.astext())
    if isinstance(node, (nodes.image, nodes.figure)):
        return Shown(figures=1)
    if isinstance(node, (nodes.math, nodes.math_block, nodes.title, nodes.comment)):
        return Shown()
    if isinstance(node, nodes.Text):
        return Shown(prose=_chars(node.astext()))
    total = Shown(predictions=int(_is_prediction(node)))
    for child in node.children:
        total += shown(child)
    return total


def _is_prediction(node) -> bool:
    return isinstance(node, nodes.Element) and node.tagname == "prediction"  # book/_ext/prediction.py의 상자


def _stop(title: str, anchor: str, parts) -> dict:
    total = Shown()
    for part in parts:
        total += shown(part)
    return {"title": title, "anchor": anchor, **asdict(total), "minutes": total.minutes}


DEPTH_MARK = "(심화)"


def core_stops(doctree) -> list[dict]:
    """The chapter's opener and its "(핵심)" sections, each with what it shows and its minutes.

    A page is a chapter of the path when its ``##`` headings are marked (핵심) or (심화); a chapter
    whose sections are all (심화) is on the path with its opener only. Other pages give no stops.
    """
    top = next(iter(doctree.findall(nodes.section)), None)
    if top is None:
        return []
    sections = [c for c in top.children if isinstance(c, nodes.section)]
    titles = [s.next_node(nodes.title).astext().rstrip() for s in sections]
    if not any(t.endswith((CORE_MARK, DEPTH_MARK)) for t in titles):
        return []
    opener = [c for c in top.children if not isinstance(c, nodes.section)]
    stops = [_stop("장 첫머리", "", opener)]
    for section, title in zip(sections, titles):
        if title.endswith(CORE_MARK):
            stops.append(_stop(title[: -len(CORE_MARK)].strip(), section["ids"][0] if section["ids"] else "", [section]))
    return stops


class core_path(nodes.General, nodes.Element):
    """Placeholder, filled in once every chapter has been read."""


class core_path_start(nodes.General, nodes.Element):
    """Placeholder for the intro's first-screen box: the path's minutes and a button to its first stop."""


class CorePathDirective(SphinxDirective):
    has_content = False

    def run(self):
        return [core_path()]


class CorePathStartDirective(SphinxDirective):
    has_content = False

    def run(self):
        return [core_path_start()]


def _collect(app: Sphinx, doctree) -> None:
    env = app.env
    if not hasattr(env, "ddp_core_path"):
        env.ddp_core_path = {}  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
    stops = core_stops(doctree)
    if stops:  # (핵심)/(심화) 표시가 있는 장만 (소개, 용어집, 부록은 빠진다)
        env.ddp_core_path[env.docname] = stops  # type: ignore[attr-defined]  # extension state kept on Sphinx's object


def rates_sentence() -> str:
    """The rates the count uses, as the intro states them."""
    return (f"본문은 분당 {RATES.prose_chars}자(공백 제외), 코드는 분당 {RATES.code_lines}줄, 표와 출력은 분당 "
            f"{RATES.table_chars}자, 그림 하나 {RATES.figure:g}분, 예측 하나 {RATES.prediction:g}분, 확인 문제 한 문항 "
            f"{RATES.quiz_question:g}분, 직접 써 보는 칸 하나 {RATES.write_box:g}분")


def path_minutes(paths: dict) -> float:
    return sum(stop["minutes"] for stops in paths.values() for stop in stops)


def _render(app: Sphinx, docname: str) -> nodes.Node:
    paths = getattr(app.env, "ddp_core_path", {})
    chapters = [d for d in app.env.toctree_includes.get(app.config.root_doc, []) if d in paths] or sorted(paths)
    listing = nodes.enumerated_list()
    for chapter in chapters:
        stops = paths[chapter]
        uri = app.builder.get_relative_uri(docname, chapter)
        item = nodes.list_item()
        para = nodes.paragraph()
        title = app.env.titles[chapter].astext() if chapter in app.env.titles else chapter
        para += nodes.reference("", title, refuri=uri, internal=True)
        para += nodes.Text(f" — 약 {math.ceil(sum(s['minutes'] for s in stops))}분: ")
        sections = [s for s in stops if s["anchor"]]
        if not sections:
            para += nodes.Text("장 첫머리만 (이 장의 절은 모두 심화)")
        for i, stop in enumerate(sections):
            if i:
                para += nodes.Text(", ")
            para += nodes.reference("", stop["title"], refuri=f"{uri}#{stop['anchor']}", internal=True)
        item += para
        listing += item
    total = {k: sum(stop[k] for stops in paths.values() for stop in stops)
             for k in ("prose", "code", "tables", "figures", "predictions", "questions", "write_boxes")}
    summary = nodes.paragraph(text=(
        f"핵심 경로는 약 {math.ceil(path_minutes(paths))}분입니다. 이 빌드가 장마다 첫머리와 (핵심) 절에서 센 것: 본문 "
        f"{total['prose']:,}자, 코드 {total['code']:,}줄, 표와 출력 {total['tables']:,}자, 그림 {total['figures']}개, "
        f"예측 {total['predictions']}개, 확인 문제 {total['questions']}문항, 써 보는 칸 {total['write_boxes']}개. "
        f"읽는 속도는 {rates_sentence()}로 잡았습니다."))
    container = nodes.container(classes=["ddp-core-path"])
    container += summary
    container += listing
    return container


def _render_start(app: Sphinx, docname: str) -> nodes.Node:
    paths = getattr(app.env, "ddp_core_path", {})
    chapters = [d for d in app.env.toctree_includes.get(app.config.root_doc, []) if d in paths] or sorted(paths)
    box = nodes.container(classes=["ddp-course-start"])
    para = nodes.paragraph()
    para += nodes.strong(text=f"핵심 경로 약 {math.ceil(path_minutes(paths))}분.")
    para += nodes.Text(" 장마다 첫머리와 제목 끝에 (핵심)이 붙은 절만 차례로 읽으면 DDP가 한 스텝에 하는 일을 실제 "
                       "랭크에서 보고, 직접 만든 DDP를 채점받고, 내 학습 스크립트를 DDP로 바꾸는 데까지 갑니다. "
                       "(심화) 절은 더 깊이 들어가는 절이라 건너뛰어도 흐름이 끊기지 않습니다. 분은 이 빌드가 센 값이고, "
                       "어떻게 셌는지는 아래 '한 시간 코스'에 있습니다.")
    box += para
    if chapters:
        start = nodes.paragraph()
        start += nodes.reference("", "1장부터 핵심 경로 시작하기 →", refuri=app.builder.get_relative_uri(docname, chapters[0]),
                                 internal=True, classes=["ddp-start-button"])
        box += start
    return box


def _fill(app: Sphinx, doctree, docname: str) -> None:
    for node in doctree.findall(core_path):
        node.replace_self(_render(app, docname))
    for start in doctree.findall(core_path_start):
        start.replace_self(_render_start(app, docname))


def _pages_with_path(app: Sphinx, env, added, changed, removed) -> list[str]:
    # 길은 모든 장에서 나온다: 장 하나가 바뀌어도 목록이 있는 페이지를 다시 쓴다
    return [app.config.root_doc] if changed or added else []


def _purge(app: Sphinx, env, docname: str) -> None:
    getattr(env, "ddp_core_path", {}).pop(docname, None)


def _merge(app: Sphinx, env, docnames, other) -> None:
    env.ddp_core_path = {**getattr(env, "ddp_core_path", {}),
                         **{d: v for d, v in getattr(other, "ddp_core_path", {}).items() if d in docnames}}


def setup(app: Sphinx) -> dict:
    app.add_node(core_path)
    app.add_node(core_path_start)
    app.add_directive("core-path", CorePathDirective)
    app.add_directive("core-path-start", CorePathStartDirective)
    app.connect("doctree-read", _collect)
    app.connect("doctree-resolved", _fill)
    app.connect("env-get-outdated", _pages_with_path)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
