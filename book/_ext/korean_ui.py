"""Sphinx extension: Korean for the interface strings sphinx-book-theme hard-codes in its templates.

Most of the theme's interface is translated through ``book/_locale/ko/LC_MESSAGES/sphinx.po``
(``locale_dirs`` in ``_config.yml``); these few attribute values are written into the templates
without ``_()``, so no catalog reaches them. They are replaced in the written pages instead.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx

HARD_CODED = {
    'title="Toggle primary sidebar"': 'title="책 목차 열고 닫기"',
    'title="Toggle secondary sidebar"': 'title="이 페이지의 내용 열고 닫기"',
    'aria-label="Main"': 'aria-label="책 목차"',
    '<nav aria-label="Page">': '<nav aria-label="페이지">',
}


def _translate_pages(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        korean = text
        for english, translated in HARD_CODED.items():
            korean = korean.replace(english, translated)
        if korean != text:
            page.write_text(korean, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("build-finished", _translate_pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
