"""Sphinx extension: Korean for the interface strings sphinx-book-theme hard-codes in its templates.

Most of the theme's interface is translated through ``book/_locale/ko/LC_MESSAGES/sphinx.po``
(``locale_dirs`` in ``_config.yml``); these few attribute values are written into the templates
without ``_()``, so no catalog reaches them. They are replaced in the written pages instead.
"""

from __future__ import annotations

from pathlib import Path

import page_rewrite
from sphinx.application import Sphinx

HARD_CODED = {
    'title="Toggle primary sidebar"': 'title="책 목차 열고 닫기"',
    'title="Toggle secondary sidebar"': 'title="이 페이지의 내용 열고 닫기"',
    'aria-label="Main"': 'aria-label="책 목차"',
    '<nav aria-label="Page">': '<nav aria-label="페이지">',
}


def _translate(page: Path, text: str) -> str:
    for english, korean in HARD_CODED.items():
        text = text.replace(english, korean)
    return text


def _translate_pages(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    page_rewrite.rewrite_pages(Path(app.outdir), _translate)


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", _translate_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
