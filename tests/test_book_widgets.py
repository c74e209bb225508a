"""The live Jupyter widgets: each builds, and its button really launches ranks and draws."""

from __future__ import annotations

import importlib

import pytest

EXPLORERS = [("structure", "batch_split_explorer"), ("forward", "collective_explorer"),
             ("backward", "gradient_explorer"), ("allreduce", "ring_explorer"),
             ("update", "equivalence_explorer"), ("train", "training_explorer"),
             ("internals", "bucket_explorer")]


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


@pytest.mark.parametrize("module, factory", EXPLORERS)
def test_live_widget_launches_real_ranks(module, factory, monkeypatch):
    import ipywidgets as widgets

    from labs import launch

    calls = []
    real_run = launch.run

    def recording_run(lab, nproc=None, **kwargs):
        result = real_run(lab, nproc=nproc, **kwargs)
        calls.append((lab, nproc, result.ok))
        return result

    monkeypatch.setattr(importlib.import_module(f"labs.widgets.{module}"), "run", recording_run)
    panel = getattr(importlib.import_module(f"labs.widgets.{module}"), factory)()
    parts = list(_walk(panel))
    for part in parts:  # 작은 설정으로: 랭크 2개, 에폭 2
        if isinstance(part, (widgets.IntSlider, widgets.SelectionSlider)) and part.description.startswith("N"):
            part.value = 2
        if isinstance(part, widgets.IntSlider) and part.description == "에폭":
            part.value = 2
    buttons = [p for p in parts if isinstance(p, widgets.Button)]
    assert len(buttons) == 1, f"{factory}: 실행 단추가 하나여야 합니다"
    buttons[0].click()
    assert calls and calls[-1][1] == 2 and calls[-1][2], f"{factory}: 실제 랭크 실행 기록 {calls}"
