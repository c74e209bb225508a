"""Sphinx extension: the one-hour path, measured from the book itself.

Every chapter marks the sections of the core path with "(핵심)" at the end of their ``##`` heading.
While reading each chapter this extension counts what a reader reads on that path: the opener (the
text before the first ``##``) and every core section, as non-space characters of prose (code,
outputs, tables, figures and formulas are not prose), plus a minute per figure and half a minute
per prediction box. The ``{core-path}`` directive (in the intro) lists the path stop by stop with
those minutes, so the number a reader sees is the book's, never typed by hand.
"""

from __future__ import annotations

import math
import re

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

CORE_MARK = "(핵심)"
CHARS_PER_MINUTE = 500
MINUTES_PER_FIGURE = 1.0
MINUTES_PER_PREDICTION = 0.5
_NOT_PROSE = (nodes.literal_block, nodes.raw, nodes.table, nodes.math, nodes.math_block, nodes.image,
              nodes.figure, nodes.title, nodes.comment)


def _is_cell(node) -> bool:
    return isinstance(node, nodes.container) and bool({"cell", "cell_input", "cell_output"} & set(node["classes"]))


def prose_chars(node) -> int:
    """Non-space characters of the prose under ``node`` (no code, outputs, tables, figures, formulas, titles)."""
    if isinstance(node, _NOT_PROSE) or _is_cell(node):
        return 0
    if isinstance(node, nodes.Text):
        return len(re.sub(r"\s", "", node.astext()))
    return sum(prose_chars(child) for child in node.children)


def _figures(node) -> int:
    return sum("plotly-graph-div" in raw.astext() for raw in node.findall(nodes.raw))


def _predictions(node) -> int:
    boxes = [n for n in node.findall(nodes.Element) if "prediction" in n.get("classes", [])]
    boxes += [n for n in node.findall(nodes.admonition)
              if (title := n.next_node(nodes.title)) is not None and title.astext().startswith("예측해 보기")]
    return len(boxes)


def _stop(title: str, anchor: str, parts) -> dict:
    chars = sum(prose_chars(p) for p in parts)
    figures = sum(_figures(p) for p in parts)
    predictions = sum(_predictions(p) for p in parts)
    minutes = chars / CHARS_PER_MINUTE + figures * MINUTES_PER_FIGURE + predictions * MINUTES_PER_PREDICTION
    return {"title": title, "anchor": anchor, "chars": chars, "figures": figures, "predictions": predictions,
            "minutes": minutes}


def core_stops(doctree) -> list[dict]:
    """The chapter's opener and its "(핵심)" sections, each with its prose count and reading minutes."""
    top = next(iter(doctree.findall(nodes.section)), None)
    if top is None:
        return []
    sections = [c for c in top.children if isinstance(c, nodes.section)]
    opener = [c for c in top.children if not isinstance(c, nodes.section)]
    stops = [_stop("장 첫머리", "", opener)]
    for section in sections:
        title = section.next_node(nodes.title).astext()
        if title.rstrip().endswith(CORE_MARK):
            stops.append(_stop(title[: -len(CORE_MARK)].strip(), section["ids"][0] if section["ids"] else "", [section]))
    return stops


class core_path(nodes.General, nodes.Element):
    """Placeholder, filled in once every chapter has been read."""


class CorePathDirective(SphinxDirective):
    has_content = False

    def run(self):
        return [core_path()]


def _collect(app: Sphinx, doctree) -> None:
    env = app.env
    if not hasattr(env, "ddp_core_path"):
        env.ddp_core_path = {}  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
    stops = core_stops(doctree)
    if len(stops) > 1:  # 핵심 절이 있는 장만 (소개, 용어집 등은 빠진다)
        env.ddp_core_path[env.docname] = stops  # type: ignore[attr-defined]  # extension state kept on Sphinx's object


def _render(app: Sphinx, docname: str) -> nodes.Node:
    paths = getattr(app.env, "ddp_core_path", {})
    chapters = [d for d in app.env.toctree_includes.get(app.config.root_doc, []) if d in paths] or sorted(paths)
    listing = nodes.enumerated_list()
    total_minutes = total_chars = 0
    for chapter in chapters:
        stops = paths[chapter]
        minutes = sum(s["minutes"] for s in stops)
        total_minutes += minutes
        total_chars += sum(s["chars"] for s in stops)
        uri = app.builder.get_relative_uri(docname, chapter)
        item = nodes.list_item()
        para = nodes.paragraph()
        title = app.env.titles[chapter].astext() if chapter in app.env.titles else chapter
        para += nodes.reference("", title, refuri=uri, internal=True)
        para += nodes.Text(f" — 약 {math.ceil(minutes)}분: ")
        for i, stop in enumerate(s for s in stops if s["anchor"]):
            if i:
                para += nodes.Text(", ")
            para += nodes.reference("", stop["title"], refuri=f"{uri}#{stop['anchor']}", internal=True)
        item += para
        listing += item
    summary = nodes.paragraph(text=f"핵심 절만 읽으면 약 {math.ceil(total_minutes)}분입니다(본문 {total_chars:,}자를 "
                                   f"분당 {CHARS_PER_MINUTE}자로, 그림 하나에 {MINUTES_PER_FIGURE:g}분, 예측 하나에 "
                                   f"{MINUTES_PER_PREDICTION:g}분을 더해 이 빌드에서 센 값).")
    container = nodes.container(classes=["ddp-core-path"])
    container += summary
    container += listing
    return container


def _fill(app: Sphinx, doctree, docname: str) -> None:
    for node in doctree.findall(core_path):
        node.replace_self(_render(app, docname))


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
    app.add_directive("core-path", CorePathDirective)
    app.connect("doctree-read", _collect)
    app.connect("doctree-resolved", _fill)
    app.connect("env-get-outdated", _pages_with_path)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
