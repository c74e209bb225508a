"""Sphinx extension: Korean for the interface strings the theme and its helpers hard-code, and drawers that open.

Most of the theme's interface is translated through ``book/_locale/ko/LC_MESSAGES/sphinx.po``
(``locale_dirs`` in ``_config.yml``); these strings are written into templates or scripts without ``_()``,
so no catalog reaches them. They are replaced in the written pages and static scripts instead:

- attribute values of sphinx-book-theme's templates and Sphinx's heading links (:data:`HARD_CODED`);
- myst-nb's fold of a hidden cell says what it opens: the code, or its output (:func:`_fold_labels`);
- sphinx-copybutton's tooltips get a Korean entry (its script picks the page's ``lang``), sphinx-togglebutton's
  button a Korean label (:data:`STATIC_SCRIPTS`).

Navigation: below 992 px the ☰ (chapter list) and the page-contents buttons a reader sees are the ones in the
article header, but both theme scripts wire only the *first* ``.primary-toggle``/``.secondary-toggle`` of the
page, a hidden copy in the navbar. :data:`FORWARD_TOGGLES` hands a click on any other copy to the wired one, so
the drawer opens at every width (and the sidebar still folds at desktop width, which the book theme handles on
that same first button).
"""

from __future__ import annotations

import re
from pathlib import Path

import page_rewrite
from sphinx.application import Sphinx

HARD_CODED = {
    'title="Toggle primary sidebar"': 'title="책 목차 열고 닫기"',
    'title="Toggle secondary sidebar"': 'title="이 페이지의 내용 열고 닫기"',
    'aria-label="Main"': 'aria-label="책 목차"',
    '<nav aria-label="Page">': '<nav aria-label="페이지">',
    'title="Link to this heading"': 'title="이 제목의 링크"',
    'title="Link to this image"': 'title="이 그림의 링크"',
    'title="Link to this table"': 'title="이 표의 링크"',
    'title="Link to this code"': 'title="이 코드의 링크"',
    'title="Link to this definition"': 'title="이 정의의 링크"',
    'title="Link to this term"': 'title="이 용어의 링크"',
}

# A hidden cell's fold (myst-nb): what it opens, by where the hidden part sits (above the output: the code; above
# nothing or below the shown code: the output).
_CODE, _OUTPUT = ("코드 보기", "코드 접기"), ("출력 보기", "출력 접기")
FOLDS = {"above-input": _CODE, "above-output": _OUTPUT, "below-input": _OUTPUT}
_FOLD = re.compile(r'(<details class="admonition hide (above-input|above-output|below-input)">\s*<summary) aria-label="[^"]*">'
                   r'(\s*<p class="collapsed admonition-title">)[^<]*(</p>\s*<p class="expanded admonition-title">)'
                   r'[^<]*(</p>)')

COPY_KO = ("  'ko': {\n    'copy': '복사',\n    'copy_to_clipboard': '클립보드에 복사',\n"
           "    'copy_success': '복사했습니다',\n    'copy_failure': '복사하지 못했습니다',\n  },\n")
# static script → (text it must contain, its replacement): a theme update that moves the text fails the build
STATIC_SCRIPTS = {
    "copybutton.js": ("const messages = {\n", "const messages = {\n" + COPY_KO),
    "togglebutton.js": ('aria-label="Toggle hidden content"', 'aria-label="숨긴 내용 펼치기"'),
}

FORWARD_TOGGLES = ('document.addEventListener("DOMContentLoaded",()=>{for(const k of["primary-toggle","secondary-toggle"]){'
                   'const[w,...o]=document.querySelectorAll("."+k);if(w)for(const b of o)b.addEventListener("click",e=>{'
                   'e.preventDefault();e.stopPropagation();w.click()})}});')


def _fold_labels(text: str) -> str:
    def label(match: re.Match) -> str:
        show, hide = FOLDS[match[2]]
        return f'{match[1]} aria-label="{show}">{match[3]}{show}{match[4]}{hide}{match[5]}'

    return _FOLD.sub(label, text)


def translate(page: Path, text: str) -> str:
    for english, korean in HARD_CODED.items():
        text = text.replace(english, korean)
    return _fold_labels(text)


def translate_static(static: Path) -> None:
    """Korean in the helpers' scripts under ``static`` (``_static`` of the site)."""
    for name, (english, korean) in STATIC_SCRIPTS.items():
        path = static / name
        text = path.read_text(encoding="utf-8")
        if korean in text:
            continue
        if english not in text:
            raise RuntimeError(f"{name}: '{english.strip()}'이(가) 없습니다. 이 스크립트의 새 판에 맞게 korean_ui.py를 고치세요.")
        path.write_text(text.replace(english, korean, 1), encoding="utf-8")


def _translate_site(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    page_rewrite.rewrite_pages(Path(app.outdir), translate)
    translate_static(Path(app.outdir) / "_static")


def setup(app: Sphinx) -> dict:
    app.add_js_file(None, body=FORWARD_TOGGLES)
    app.connect("build-finished", _translate_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
