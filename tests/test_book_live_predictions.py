"""The "예측해 보기" boxes in live Jupyter (labs/widgets/prediction.py, scripts/notebook_predictions.py).

- Sources: every box of every chapter sits alone in a markdown cell, inside a closed ``<details>`` (Jupyter shows
  the block as code, answer included; running the cell keeps it closed), with its ``ask`` cell right after it;
  the layout check catches a box that shares its cell or lost its ask cell.
- The box's widgets, in this process: a choice shows "내 예측 / 정답" and the explanation with the glued values; a
  number box waits for the value a measuring cell glues; held outputs open on a choice or "예측 없이 보기".
- A real kernel, driven as JupyterLab drives it (``allow_stdin``): the measuring cell's printed line, its last
  expression and its glued value do not reach the reader until a click on the choice (a comm message, as the
  frontend sends it); driven as the book's build and nbval drive it (no stdin), the same cells print as they always did.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import notebook_predictions as layout  # noqa: E402

from labs.prediction import BOOK, FOLD_CLOSE, FOLD_OPEN, GLUED, KEY_FOLD_OPEN, Prediction, measuring_cells, notebook_boxes, parse, tolerance  # noqa: E402
from labs.widgets import prediction as live  # noqa: E402

REPO = BOOK.parent


def _code(text: str) -> dict:
    return {"cell_type": "code", "id": f"c{abs(hash(text)) % 10**8}", "metadata": {}, "outputs": [],
            "execution_count": None, "source": text}


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "id": f"m{abs(hash(text)) % 10**8}", "metadata": {}, "source": text}


BOX = "```{prediction} ch9-probe\n:question: 몇 번일까요?\n:choices: 하나 | 둘 | 셋\n:answer: 2\n" \
      ":measured: 잰 값 {glue:text}`ch9-probe-value`\n둘입니다. 셀이 잰 값은 {glue:text}`ch9-probe-value:.1f`, " \
      "상자 앞에서 잰 값은 {glue:text}`ch9-probe-early`.\n```"
EARLY = 'from myst_nb import glue\n\nglue("ch9-probe-early", 5, display=False)'
MEASURE = 'from myst_nb import glue\n\nprint("secret 42")\nglue("ch9-probe-value", 42, display=False)\n"last value 7"'


def test_every_box_of_the_book_sits_folded_with_its_ask_cell():
    notebooks = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
    boxes = {pid for path in notebooks for pid in notebook_boxes(path)}
    assert len(boxes) >= 70, f"예측 상자가 {len(boxes)}개뿐입니다: 장 노트북을 읽지 못했습니다"
    assert [problem for path in notebooks for problem in layout.problems(path)] == []
    for path in notebooks:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            found = parse(layout.source(cell)) if cell["cell_type"] == "markdown" else []
            if found:
                text = layout.source(cell)
                assert text.startswith(FOLD_OPEN) and text.endswith(FOLD_CLOSE), f"{path.name} {found[0].pid}: 접히지 않음"
                assert f'ask("{found[0].pid}")' in layout.source(cells[i + 1])
                assert "remove-cell" in cells[i + 1]["metadata"]["tags"], "사이트에는 ask 셀이 보이지 않아야 합니다"


def test_a_key_box_keeps_the_answer_it_states_folded_in_the_notebook():
    """The key box of a chapter that awaits a core box (``awaits-<id>``) states that box's answer: in Jupyter its
    claim and measurement sit in the fold the site drops (book/_ext/prediction.py), nothing else of it does."""
    found = 0
    for path in sorted(BOOK.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            text = layout.source(cell)
            if cell["cell_type"] != "markdown" or "awaits-" not in text:
                continue
            found += 1
            start, end = text.index(KEY_FOLD_OPEN), text.index(FOLD_CLOSE)
            inside, outside = text[start:end], text[:start] + text[end:]
            assert "**주장**" in inside and "**측정**" in inside, f"{path.name}: 주장과 측정이 접기 안에 없습니다"
            assert "**주장**" not in outside and "**측정**" not in outside, f"{path.name}: 접기 밖에 주장·측정이 있습니다"
    assert found == 3, f"예측을 기다리는 핵심 상자 {found}개 (1–3장에 하나씩이어야 합니다)"


def test_the_layout_check_catches_a_shared_cell_and_a_lost_ask_cell(tmp_path):
    path = tmp_path / "09_probe.ipynb"
    cells = [_markdown("# 9장\n\n앞 문단"), _code("x = 1")]
    shared = {"cells": [*cells[:1], _markdown("앞 글\n\n" + BOX + "\n\n뒤 글"), *cells[1:]], "metadata": {},
              "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(shared), encoding="utf-8")
    assert layout.problems(path), "상자가 글과 한 셀에 있는데 검사가 통과했습니다"
    assert layout.apply(path) and layout.problems(path) == []
    fixed = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert [layout.source(c) for c in fixed[1:5]] == ["앞 글", f"{FOLD_OPEN}\n\n{BOX}\n\n{FOLD_CLOSE}",
                                                      layout.source(layout.ask_cell("ch9-probe")), "뒤 글"]
    path.write_text(json.dumps({**shared, "cells": [c for c in fixed if not c["id"].endswith("-ask")]}), encoding="utf-8")
    assert layout.problems(path), "ask 셀이 없는데 검사가 통과했습니다"


def test_the_measuring_cells_stop_at_the_next_box_or_section():
    cells = [_markdown(BOX), _code("ask()  # labs.widgets.prediction"), _code("a"), _markdown("### 소절"), _code("b"),
             _code("from labs.quiz import Quiz"), _markdown("## 다음 절"), _code("c")]
    assert measuring_cells(cells, 0) == [2, 4]
    assert measuring_cells([*cells[:3], _markdown(BOX.replace("ch9-probe", "ch9-next")), *cells[4:]], 0) == [2]


@pytest.fixture(autouse=True)
def _no_glue_of_other_tests():
    saved = dict(GLUED)
    GLUED.clear()
    yield
    GLUED.clear()
    GLUED.update(saved)


def _captured(stdout: str = "", glued: dict | None = None, shown: str | None = None):
    outputs = [SimpleNamespace(data={live.GLUE_PREFIX + "text/plain": repr(v)}, metadata={"scrapbook": {"name": k}})
               for k, v in (glued or {}).items()]
    if shown:
        outputs.append(SimpleNamespace(data={"text/plain": shown}, metadata={}))
    return SimpleNamespace(stdout=stdout, stderr="", outputs=outputs)


def _visible(widget) -> bool:
    return widget.layout.display != "none"


def test_a_choice_opens_the_answer_and_the_held_outputs():
    box = live.LiveBox(parse(BOX)[0])
    note, out = box.hold(_captured("secret 42\n", {"ch9-probe-value": 42}, "'last value 7'")).children
    assert _visible(note) and not _visible(out) and not _visible(box.answer), "고르기 전에 측정값이 보입니다"
    assert [o.get("text") or o["data"]["text/plain"] for o in out.outputs] == ["secret 42\n", "'last value 7'"]
    box.commit(3)
    assert "× 빗나갔습니다. 내 예측: 셋 / 정답: 둘" in box.result.value
    assert _visible(out) and not _visible(note) and _visible(box.answer)
    assert "잰 값 42" in box.answer.value and "셀이 잰 값은 42.0" in box.answer.value
    box.commit(2)
    assert "빗나갔습니다" in box.result.value, "한 번 고른 뒤에는 바뀌지 않아야 합니다"


def test_peeking_opens_the_outputs_without_a_guess():
    box = live.LiveBox(parse(BOX)[0])
    note, out = box.hold(_captured("secret 42\n")).children
    note.children[1].click()
    assert _visible(out) and box.guess is None and box.result.value == "" and not _visible(box.answer)
    later_note, later_out = box.hold(_captured("more\n")).children
    assert _visible(later_out) and not _visible(later_note)


def test_a_number_box_waits_for_the_measured_value():
    box = live.LiveBox(Prediction("ch9-n", {"question": "몇?", "number": "ch9-n-value", "tolerance": "10%"}, "설명"))
    box.number.value = 95
    box.buttons[0].click()
    assert "실제로 잰 값: (아래 측정 셀을 실행하면 채워집니다)" in box.result.value and "맞혔" not in box.result.value
    box.hold(_captured(glued={"ch9-n-value": 100}))
    assert "○ 맞혔습니다. 내 예측: 95 / 실제로 잰 값: 100 (±10 안이면 맞힘)" in box.result.value
    assert tolerance("0.5", 100) == 0.5 and tolerance("20%", -50) == 10
    with pytest.raises(ValueError):
        tolerance("약 1", 100)


def test_the_html_keeps_math_for_mathjax_and_shows_roles_as_text():
    html = live.to_html("$g_i$ 와 $a_b$, {term}`버킷` {ref}`미리 나누기 <pre-division>` `x_y` {glue:text}`k:.2f`",
                        {"k": "'1.234'"})
    assert "$g_i$" in html and "$a_b$" in html and "<em>" not in html
    assert "버킷 미리 나누기 <code>x_y</code> 1.23" in html and html.startswith("<p>")
    assert live.to_html("`step()` 안은 0번", {}, inline=True) == "<code>step()</code> 안은 0번"


def _drain(kc, msg_id: str) -> list[dict]:
    """Every iopub message of one request, up to its idle status."""
    messages = []
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages


def _run(kc, code: str, allow_stdin: bool) -> list[dict]:
    msg_id = kc.execute(code, allow_stdin=allow_stdin)
    reply = kc.get_shell_msg(timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]
    return _drain(kc, msg_id)


def _text(messages: list[dict]) -> str:
    """What the cell's output area shows (widget state, hidden or not, travels in comm messages)."""
    shown = ("stream", "execute_result", "display_data", "error")
    return json.dumps([m["content"] for m in messages if m["msg_type"] in shown], ensure_ascii=False)


@pytest.fixture
def kernel(tmp_path):
    from jupyter_client.manager import start_new_kernel

    book = tmp_path / "book"
    book.mkdir()
    cells = [_markdown("# 9장"), _code(EARLY), _markdown(BOX), layout.ask_cell("ch9-probe"), _code(MEASURE), _markdown("## 끝")]
    (book / "09_probe.ipynb").write_text(json.dumps({"cells": cells}), encoding="utf-8")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(REPO))
    try:
        _run(kc, f"import labs.prediction\nlabs.prediction.BOOK = __import__('pathlib').Path({str(book)!r})", False)
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_a_person_sees_the_measurement_only_after_choosing(kernel):
    _run(kernel, EARLY, True)
    shown = _run(kernel, layout.source(layout.ask_cell("ch9-probe")), True)
    models = {m["content"]["comm_id"]: m["content"]["data"]["state"] for m in shown if m["msg_type"] == "comm_open"}
    buttons = {s.get("description"): cid for cid, s in models.items() if s.get("_model_name") == "ButtonModel"}
    assert set(buttons) == {"1번", "2번", "3번"}, models
    measured = _text(_run(kernel, MEASURE, True))
    assert "secret 42" not in measured and "last value 7" not in measured, "고르기 전에 측정값이 셀에 나왔습니다"
    assert "application/vnd.jupyter.widget-view+json" in measured
    click = kernel.session.msg("comm_msg", {"comm_id": buttons["2번"],
                                            "data": {"method": "custom", "content": {"event": "click"}}})
    kernel.shell_channel.send(click)
    state = "from labs.widgets import prediction as p\nb = p._boxes['ch9-probe']\n" \
            "print(b.result.value, b.answer.value, [o.layout.display for _, o in b.held], [o.outputs for _, o in b.held])"
    for _ in range(50):  # 클릭은 셸 채널의 다음 요청보다 먼저 처리된다; 그래도 몇 번 확인한다
        after = _text(_run(kernel, state, False))
        if "맞혔습니다" in after:
            break
    assert "○ 맞혔습니다. 내 예측: 둘 / 정답: 둘" in after and "셀이 잰 값은 42.0" in after
    assert "상자 앞에서 잰 값은 5" in after, "상자보다 앞 셀이 glue한 값이 답에 없습니다"
    assert "[None]" in after and "secret 42" in after and "last value 7" in after


def test_a_program_driven_kernel_gets_the_plain_outputs(kernel):
    assert "widget-view" not in _text(_run(kernel, layout.source(layout.ask_cell("ch9-probe")), False))
    measured = _text(_run(kernel, MEASURE, False))
    assert "secret 42" in measured and "last value 7" in measured and "widget-view" not in measured


def test_an_unknown_box_is_a_korean_error():
    with pytest.raises(ValueError, match="예측 상자 'ch9-nope'가 없습니다"):
        live.ask("ch9-nope")
