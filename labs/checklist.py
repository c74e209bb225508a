"""Self-check boxes for chapter 12: write your own explanation, then reveal the model answer.

``SelfCheck("dp-idea", "answer-dp-idea")`` renders a text box and a button as static HTML with a
small inline script (``checklist.js``): no kernel, no network. The model answer itself is written
in the chapter's markdown (so its links to chapters are checked by Sphinx) inside an element with
the id ``answer-dp-idea``; the script hides it until the button is pressed. What the reader types
is kept only in this browser's localStorage, under its own key.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

STORAGE_KEY = "ddp-course-checklist"  # localStorage key: {item id: the reader's text}
_ASSETS = Path(__file__).resolve().parent
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def to_html(item: str, answer_id: str, prompt: str = "내 말로 설명해 보세요") -> str:
    """The self-check box for ``item``; its button shows and hides the element ``#answer_id``."""
    for value in (item, answer_id):
        if not _ID.match(value):
            raise ValueError(f"id는 영문 소문자, 숫자, '-'만 쓸 수 있습니다: {value!r}")
    text_id = f"ddp-checklist-{item}"
    style = (_ASSETS / "checklist.css").read_text(encoding="utf-8")
    script = (_ASSETS / "checklist.js").read_text(encoding="utf-8").replace("__STORAGE_KEY__", STORAGE_KEY)
    return (
        f'<div class="ddp-checklist" data-item="{item}" data-answer="{answer_id}">'
        f'<label class="ddp-checklist-label" for="{text_id}">{html.escape(prompt)}</label>'
        f'<textarea id="{text_id}" class="ddp-checklist-text" rows="4" '
        'placeholder="여기에 적은 내용은 이 브라우저에만 저장됩니다."></textarea>'
        '<div class="ddp-checklist-row">'
        f'<button type="button" class="ddp-checklist-reveal" aria-expanded="true" aria-controls="{answer_id}">'
        "모범 답안 접기</button>"
        '<p class="ddp-checklist-status" role="status" aria-live="polite"></p></div>'
        f"</div><style>{style}</style><script>{script}</script>"
    )


class SelfCheck:
    """Displayable self-check box: ``SelfCheck("dp-idea", "answer-dp-idea")`` as a cell's last line."""

    def __init__(self, item: str, answer_id: str, prompt: str = "내 말로 설명해 보세요"):
        self.html = to_html(item, answer_id, prompt)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return "<자기 점검 상자: HTML을 보여 주는 환경에서 설명을 적고 모범 답안을 펼칠 수 있습니다>"
