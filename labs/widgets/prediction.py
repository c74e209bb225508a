"""The "예측해 보기" box in live Jupyter: choice buttons first, the answer and the measured data after the choice.

The site renders a ``{prediction}`` block with book/_ext/prediction.py. In a notebook opened in Jupyter the block
sits in a closed ``<details>`` (scripts/notebook_predictions.py) and the code cell under it, ``ask("<id>")``, shows
the same box as widgets: the question and one button per choice (or a number box). Until the reader chooses (or
presses "예측 없이 보기"), the outputs of the cells that measure the answer (:func:`labs.prediction.measuring_cells`) are
kept in the cell but folded, under one line saying why; after the choice the box shows "내 예측 / 정답", the measured
line and the explanation, and every held output opens. Values the explanation names (``{glue:text}`` roles) come
from the cells run in this kernel, filled in as they run.

Only a person's frontend gets this: its execute requests allow standard input (``allow_stdin``). A kernel driven by
a program (the book's build, ``pytest --nbval``, ``jupyter execute``) gets no box and no folding, so what they record
is the plain output. What a measuring cell writes to file descriptor 1 itself (a child process, C code) is not held.
"""

from __future__ import annotations

import re
import sys
from html import escape
from typing import Any

from labs.prediction import GLUE_PREFIX, GLUED, Prediction, chapter_notebook, notebook_boxes, remember_glue, tolerance

_ROLE = re.compile(r"\{([\w:-]+)\}`([^`]*)`")
_MATH = re.compile(r"\$[^$\n]+\$")
_PENDING = "(아래 측정 셀을 실행하면 채워집니다)"

_boxes: dict[str, "LiveBox"] = {}
_measuring: dict[str, str] = {}  # a measuring cell's source (stripped) → its box's id
_capture: list[tuple[Any, ...]] = []  # (box, capture context, what it caught, the display trap's hook) during a cell


def glued_text(value: str, spec: str = "") -> str:
    """A glued value as ``{glue:text}`key:spec``` shows it."""
    value = value.strip("'\"")
    if spec:
        try:
            return format(float(value), spec)
        except ValueError:
            return value
    return value


def to_html(text: str, glued: dict[str, str], inline: bool = False) -> str:
    """One MyST snippet of a box as HTML (``inline``: without the paragraph): roles as their text (glued values
    filled in), Markdown rendered, ``$…$`` left for the frontend's MathJax (``HTMLMath``)."""
    from markdown_it import MarkdownIt

    def role(m: re.Match) -> str:
        name, content = m.group(1), m.group(2)
        if name.startswith("glue"):
            key, _, spec = content.partition(":")
            return glued_text(glued[key], spec) if key in glued else _PENDING
        return re.sub(r"\s*<[^>]*>\s*$", "", content)  # {ref}`글 <label>` → 글, {term}`용어` → 용어

    maths: list[str] = []

    def keep(m: re.Match) -> str:
        maths.append(m.group(0))
        return f"\ue000{len(maths) - 1}\ue001"  # 사용자 영역 문자: Markdown이 건드리지 않는다

    markdown = MarkdownIt("commonmark")
    html = (markdown.renderInline if inline else markdown.render)(_MATH.sub(keep, _ROLE.sub(role, text)))
    return re.sub("\ue000(\\d+)\ue001", lambda m: escape(maths[int(m.group(1))]), html)


class LiveBox:
    """One box's widgets and state; :meth:`hold` takes the outputs of a cell that measures its answer."""

    def __init__(self, box: Prediction):
        import ipywidgets as widgets

        self.box, self.guess, self.open = box, None, False
        self.shown_glue = -1  # how many glued values the answer was last drawn with
        self.held: list[tuple[Any, Any]] = []  # (the note, the output) of every measuring cell run
        self.result = widgets.HTMLMath()
        self.answer = widgets.HTMLMath(layout=widgets.Layout(display="none"))
        rows = [widgets.HTML("<b>예측해 보기</b>"), widgets.HTMLMath(to_html(box.question, {}))]
        if "number" in box.options:
            self.number = widgets.FloatText(description="내 예측")
            submit = widgets.Button(description="확인")
            submit.on_click(lambda _: self.commit(self.number.value))
            self.buttons = [submit]
            rows.append(widgets.HBox([self.number, submit]))
        else:
            self.buttons = []
            for i, text in enumerate(box.choices, start=1):
                button = widgets.Button(description=f"{i}번", layout=widgets.Layout(width="4em"))
                button.on_click(lambda _, i=i: self.commit(i))
                self.buttons.append(button)
                rows.append(widgets.HBox([button, widgets.HTMLMath(to_html(text, {}))]))
        self.widget = widgets.VBox([*rows, self.result, self.answer],
                                   layout=widgets.Layout(border="1px solid #888", padding="0 .7em .5em"))

    def _target(self) -> float | None:
        """A number box's measured value (from this kernel's glue), or None until a cell glues it."""
        key = self.box.options["number"]
        return float(glued_text(GLUED[key])) if key in GLUED else None

    def _verdict(self) -> tuple[bool | None, str, str]:
        """(hit, the reader's guess, the answer) as the result line shows them; hit None until measured."""
        if self.guess is None:
            return None, "", ""
        if "number" not in self.box.options:
            choices = self.box.choices
            return self.guess == self.box.answer, choices[self.guess - 1], choices[self.box.answer - 1]
        value = self._target()
        if value is None:
            return None, f"{self.guess:g}", _PENDING
        allowed = tolerance(self.box.options.get("tolerance", ""), value)  # 원본 검사가 형식을 보장한다
        hit = abs(self.guess - value) <= allowed + 1e-12 * abs(value)
        return hit, f"{self.guess:g}", f"{value:g} (±{allowed:g} 안이면 맞힘)"

    def _show_answer(self) -> None:
        hit, mine, right = self._verdict()
        label = "실제로 잰 값" if "number" in self.box.options else "정답"
        mark = "" if hit is None else ("○ 맞혔습니다. " if hit else "× 빗나갔습니다. ")
        self.result.value = f"<p>{mark}내 예측: {to_html(mine, {}, True)} / {label}: {to_html(right, {}, True)}</p>"
        measured = self.box.options.get("measured", "")
        text = (f"**실제로 잰 값**: {measured}\n\n" if measured else "") + self.box.body
        self.answer.value = to_html(text, GLUED)
        self.answer.layout.display = None
        self.shown_glue = len(GLUED)

    def commit(self, guess) -> None:
        """The reader's choice (1-based) or number: show the answer, open the held outputs."""
        if self.guess is not None:
            return
        self.guess = guess
        for button in self.buttons:
            button.disabled = True
        self._show_answer()
        self.release()

    def release(self) -> None:
        """Open every held output (a choice, or "예측 없이 보기": that is not a guess)."""
        self.open = True
        for note, out in self.held:
            note.layout.display, out.layout.display = "none", None

    def hold(self, captured) -> Any:
        """The outputs a measuring cell made, in one folded view (open once the reader has chosen)."""
        import ipywidgets as widgets

        outputs: list[dict] = [{"output_type": "stream", "name": name, "text": text}
                               for name, text in (("stdout", captured.stdout), ("stderr", captured.stderr)) if text]
        for item in captured.outputs:
            name = item.metadata.get("scrapbook", {}).get("name")
            if name:
                remember_glue(name, item.data)
            if not all(key.startswith(GLUE_PREFIX) for key in item.data):
                outputs.append({"output_type": "display_data", "data": item.data, "metadata": item.metadata})
        out = widgets.Output()
        out.outputs = tuple(outputs)
        peek = widgets.Button(description="예측 없이 보기")
        peek.on_click(lambda _: self.release())
        note = widgets.HBox([widgets.HTML("위의 예측을 고르면 측정 결과가 여기에 나타납니다."), peek])
        self.held.append((note, out))
        if self.open:
            note.layout.display = "none"
        else:
            out.layout.display = "none"
        if self.guess is not None:
            self._show_answer()  # 이 셀이 잰 값을 답에 채운다
        return widgets.VBox([note, out])


def _interactive(shell) -> bool:
    """True while the request running now comes from a person's frontend (it allows standard input)."""
    kernel = getattr(shell, "kernel", None)
    parent = kernel.get_parent("shell") if kernel is not None else {}
    return bool(parent.get("content", {}).get("allow_stdin"))


def _before_cell(info) -> None:
    from IPython import get_ipython
    from IPython.utils.capture import capture_output

    shell = get_ipython()
    pid = _measuring.get((info.raw_cell or "").strip())
    if pid is None or pid not in _boxes or not _interactive(shell):
        return
    context = capture_output()
    captured = context.__enter__()
    trap_hook, shell.display_trap.hook = shell.display_trap.hook, sys.displayhook  # 셀의 마지막 식 값도 잡는다
    _capture.append((_boxes[pid], context, captured, trap_hook))


def _after_cell(_result) -> None:
    from IPython import get_ipython
    from IPython.display import display

    if _capture:
        box, context, captured, trap_hook = _capture.pop()
        get_ipython().display_trap.hook = trap_hook
        context.__exit__(None, None, None)
        display(box.hold(captured))
    for box in _boxes.values():  # 셀이 새로 잰 값을 이미 고른 상자의 답에 채운다
        if box.guess is not None and box.shown_glue != len(GLUED):
            box._show_answer()


def ask(pid: str):
    """The box ``pid`` of this chapter as widgets, and its measuring cells held until the reader chooses.

    In a kernel driven by a program (no standard input) it shows nothing and holds nothing.
    """
    from IPython import get_ipython

    notebook = chapter_notebook(pid)
    boxes = notebook_boxes(notebook) if notebook else {}
    if pid not in boxes:
        raise ValueError(f"예측 상자 '{pid}'가 없습니다: book/의 장 노트북({notebook or 'ch<N>-로 시작하는 id'})에 "
                         f"그 id의 {{prediction}} 블록이 있어야 합니다.")
    shell = get_ipython()
    if shell is None or not _interactive(shell):
        return None
    box, sources = boxes[pid]
    if not _boxes:
        shell.events.register("pre_run_cell", _before_cell)
        shell.events.register("post_run_cell", _after_cell)
    _boxes[pid] = LiveBox(box)
    _measuring.update({text.strip(): pid for text in sources})
    return _boxes[pid].widget
