"""The book's "예측해 보기" boxes as the chapter notebooks hold them: what a box asks, and which cells measure it.

A box is a fenced ``{prediction}`` block in a markdown cell (book/_ext/prediction.py renders it on the site;
labs/widgets/prediction.py in live Jupyter). The cells that measure what it asks are the code cells after it, up
to the next box or the next chapter/section heading (``#`` or ``##``), quiz cells and the box's own live cell left
out: the same stretch the site folds until the reader commits (an H2 section, from the box on).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BOOK = Path(__file__).resolve().parent.parent / "book"
BLOCK = re.compile(r"^```\{prediction\}[ \t]+(\S+)\n(.*?)^```[ \t]*$", re.M | re.S)
_OPTION = re.compile(r"^:(\w+):[ \t]*(.*)$")
_SECTION = re.compile(r"^#{1,2} ", re.M)
_TOLERANCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")
# In the notebook what states an answer is folded so Jupyter does not show it before the reader chooses: a box (the
# whole block, scripts/notebook_predictions.py) and the claim and measurement of a key box that awaits a core box.
# The site drops the folds (book/_ext/prediction.py).
FOLD_CLASS = "prediction-source"
FOLD_OPEN = (f'<details class="{FOLD_CLASS}"><summary>예측 상자의 원본(정답이 들어 있습니다). '
             '아래 셀을 실행해 먼저 고르세요.</summary>')
KEY_FOLD_OPEN = (f'<details class="{FOLD_CLASS}"><summary>이 장의 주장과 측정값(핵심 예측의 답이 들어 있습니다). '
                 '그 예측을 고른 뒤 여세요.</summary>')
FOLD_CLOSE = "</details>"
GLUE_PREFIX = "application/papermill.record/"  # myst_nb.glue(..., display=False) writes its value under this prefix
GLUED: dict[str, str] = {}  # in a Jupyter kernel: the text of every value a cell glued so far, by key
_NOT_MEASURING = ("labs.quiz", "labs.widgets.prediction")  # a quiz (the site never folds one), a box's own cell


@dataclass(frozen=True)
class Prediction:
    """One box: its id, its ``:option:`` lines and the explanation under them (MyST)."""

    pid: str
    options: dict[str, str]
    body: str

    @property
    def question(self) -> str:
        return self.options.get("question", "")

    @property
    def choices(self) -> list[str]:
        return [c.strip() for c in self.options.get("choices", "").split("|")] if "choices" in self.options else []

    @property
    def answer(self) -> int:
        """The correct choice, 1-based (0 for a number box)."""
        text = self.options.get("answer", "")
        return int(text) if text.isdigit() else 0


def tolerance(text: str, value: float) -> float:
    """A number box's ``:tolerance:`` around the measured ``value``: absolute (``0.5``) or relative (``20%``).
    ValueError when the text is neither."""
    m = _TOLERANCE.match(text or "")
    if not m:
        raise ValueError(text)
    return abs(value) * float(m.group(1)) / 100 if m.group(2) else float(m.group(1))


def parse(text: str) -> list[Prediction]:
    """Every ``{prediction}`` block of a markdown text, in order."""
    found = []
    for m in BLOCK.finditer(text):
        options: dict[str, str] = {}
        body: list[str] = []
        for line in m.group(2).splitlines():
            opt = _OPTION.match(line)
            if opt and not body:
                options[opt.group(1)] = opt.group(2).strip()
            else:
                body.append(line)
        found.append(Prediction(m.group(1), options, "\n".join(body).strip()))
    return found


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def measuring_cells(cells: list[dict], index: int) -> list[int]:
    """The code cells that measure what the box in markdown cell ``index`` asks (see the module's docstring)."""
    found = []
    for i in range(index + 1, len(cells)):
        text = source(cells[i])
        if cells[i]["cell_type"] == "markdown":
            if BLOCK.search(text) or _SECTION.search(text):
                break
        elif cells[i]["cell_type"] == "code" and not any(name in text for name in _NOT_MEASURING):
            found.append(i)
    return found


def notebook_boxes(path: Path) -> dict[str, tuple[Prediction, list[str]]]:
    """Every box of a notebook by id, with the sources of the code cells that measure it."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    boxes = {}
    for i, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            for box in parse(source(cell)):
                boxes[box.pid] = (box, [source(cells[j]) for j in measuring_cells(cells, i)])
    return boxes


def chapter_notebook(pid: str) -> Path | None:
    """The chapter notebook a box id belongs to (``ch5-…`` → ``book/05_*.ipynb``, under :data:`BOOK`), or None."""
    m = re.match(r"ch(\d+)([a-z]?)-", pid)
    found = sorted(BOOK.glob(f"{int(m.group(1)):02d}{m.group(2)}_*.ipynb")) if m else []
    return found[0] if found else None


def remember_glue(name: str, data: dict[str, Any], prefix: str = GLUE_PREFIX) -> None:
    GLUED[name] = data.get(prefix + "text/plain", data.get("text/plain", ""))


def _remember_glued(message: dict) -> dict:
    """ipykernel's display hook: note a glued value on its way out (the message goes on unchanged)."""
    content = message.get("content", {})
    name = content.get("metadata", {}).get("scrapbook", {}).get("name")
    if name:
        remember_glue(name, content.get("data", {}))
    return message


def remember_glue_in_kernel() -> None:
    """Inside a Jupyter kernel (once): keep every value a cell glues in :data:`GLUED`, so a live box can show the
    measured line whichever cell measured it. Elsewhere it does nothing."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    publisher: Any = getattr(shell, "display_pub", None)
    if hasattr(publisher, "register_hook") and not getattr(publisher, "_labs_remembers_glue", False):
        publisher.register_hook(_remember_glued)
        publisher._labs_remembers_glue = True
