"""Every "예측해 보기" box of the book as live Jupyter needs it: its own markdown cell, folded, and the box under it.

A ``{prediction}`` block holds its answer and explanation, which Jupyter would show at once (it renders the
block as code). So each block sits alone in a markdown cell inside ``<details class="prediction-source">`` (a
closed fold whose summary says to choose first; running the cell does not open it, and the site drops the fold:
book/_ext/prediction.py), and right after it comes the code cell ``ask("<id>")`` (labs/widgets/prediction.py)
that shows the question with buttons and the answer after a choice. The site removes that cell (tag
``remove-cell``).

    .venv/bin/python scripts/notebook_predictions.py           # split the cells and insert the ask cells in book/*.ipynb
    .venv/bin/python scripts/notebook_predictions.py --check   # exit 1 if a notebook is not laid out so

Run it after writing a box. The text around a block keeps its order and its cell's id; nothing else changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from notebook_setup_cell import cli, rewrite  # noqa: E402

from labs.prediction import BLOCK, FOLD_CLOSE, FOLD_OPEN, source  # noqa: E402

ASK_TAGS = ["remove-cell"]


def _markdown(cell_id: str, text: str, metadata: dict) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": metadata, "source": text.splitlines(keepends=True)}


def ask_cell(pid: str) -> dict:
    text = f'from labs.widgets.prediction import ask\n\nask("{pid}")'
    return {"cell_type": "code", "execution_count": None, "id": f"{pid}-ask", "metadata": {"tags": ASK_TAGS},
            "outputs": [], "source": text.splitlines(keepends=True)}


def _is_ask_cell(cell: dict) -> bool:
    return cell["cell_type"] == "code" and str(cell.get("id", "")).endswith("-ask") and \
        "labs.widgets.prediction" in source(cell)


def laid_out(cells: list[dict], _path: Path | None = None) -> list[dict]:
    """The cells with every block alone in a folded cell, followed by its ask cell."""
    out: list[dict] = []
    for cell in cells:
        if _is_ask_cell(cell):
            continue
        text = source(cell)
        if FOLD_OPEN in text:  # a box cell this script wrote: the fold is written again below
            text = text.replace(FOLD_OPEN, "").replace(FOLD_CLOSE, "")
        blocks = list(BLOCK.finditer(text)) if cell["cell_type"] == "markdown" else []
        if not blocks:
            out.append(cell)
            continue
        start, first = 0, True
        for m in blocks:
            before = text[start:m.start()].strip("\n")
            if before.strip():
                out.append(_markdown(cell["id"] if first else f"{m.group(1)}-before", before, cell["metadata"]))
                first = False
            out.append(_markdown(m.group(1), f"{FOLD_OPEN}\n\n{m.group(0)}\n\n{FOLD_CLOSE}", {}))
            out.append(ask_cell(m.group(1)))
            start = m.end()
        after = text[start:].strip("\n")
        if after.strip():
            out.append(_markdown(cell["id"] if first else f"{blocks[-1].group(1)}-after", after, cell["metadata"]))
    return out


def problems(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    if laid_out(cells) != cells:
        return [f"{path.name}: 예측 상자는 자기 셀에 접힌 채(<details>) 혼자 있고 바로 뒤에 ask 셀이 와야 합니다 "
                "(scripts/notebook_predictions.py로 고치세요)"]
    return []


def apply(path: Path) -> bool:
    """Lay the notebook out so; True when the file changed."""
    return rewrite(path, laid_out)


def main() -> None:
    cli("book/*.ipynb의 예측 상자를 라이브 Jupyter에 맞게 셀로 나누거나 검사합니다.",
        "모든 예측 상자가 자기 셀에 있고 ask 셀이 뒤따릅니다.", problems, laid_out)


if __name__ == "__main__":
    main()
