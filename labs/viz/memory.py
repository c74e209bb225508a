"""Chapter 13's memory calculator on the page (HTML + ``memory_calc.js``: no kernel, no network) and the
figure the live widget draws; the arithmetic of both is :mod:`labs.memory`."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from .. import memory
from . import RANK_COLORS

_ASSETS = Path(__file__).resolve().parent.parent
KIND_NAMES = {"params": "파라미터", "grads": "그래디언트", "buckets": "DDP 버킷(그래디언트 사본)", "state": "옵티마이저 상태",
              "activations": "활성값(추정)"}
KIND_COLORS = dict(zip(memory.KINDS, (RANK_COLORS[0], RANK_COLORS[1], RANK_COLORS[3], RANK_COLORS[2], RANK_COLORS[5])))
BUCKET_VIEW = {"false": "사본 있음 (gradient_as_bucket_view=False, 기본값)", "true": "사본 없음 (gradient_as_bucket_view=True)"}
DEFAULTS: dict[str, Any] = {"preset": "7B", "precision": "bf16_mixed", "optimizer": "adamw", "gpus": 8, "strategy": "ddp",
                            "batch": 1, "seq": 2048}


def _select(name: str, label: str, options: dict[str, str], chosen: str) -> str:
    items = "".join(f'<option value="{html.escape(k)}"{" selected" if k == chosen else ""}>{html.escape(v)}</option>'
                    for k, v in options.items())
    return f'<label>{label}<select name="{name}">{items}</select></label>'


def _number(name: str, label: str, value, low, step="1") -> str:
    return f'<label>{label}<input name="{name}" type="number" min="{low}" step="{step}" value="{value}"></label>'


def calculator(measured: dict, div_id: str = "memory-calculator"):
    """The page's calculator over the measured bytes per parameter (:func:`labs.memory.measured_bytes`)."""
    from IPython.display import HTML

    preset = next(p for p in memory.PRESETS if p[0] == DEFAULTS["preset"])
    presets = {str(i): f"{name} (h={h:,}, L={layers})" for i, (name, _, h, layers) in enumerate(memory.PRESETS)}
    model = "".join([
        _select("preset", "모델 크기", {**presets, "custom": "직접 입력"}, str(memory.PRESETS.index(preset))),
        _number("params", "파라미터 수 Ψ (십억 개)", preset[1] / 1e9, "0", "any"),
        _number("hidden", "은닉 크기 h", preset[2], "1"), _number("layers", "층 수 L", preset[3], "1")])
    training = "".join([
        _select("precision", "정밀도", memory.PRECISIONS, DEFAULTS["precision"]),
        _select("optimizer", "옵티마이저", memory.OPTIMIZERS, DEFAULTS["optimizer"]),
        _select("strategy", "전략", {k: label for k, (label, *_) in memory.STRATEGIES.items()}, DEFAULTS["strategy"]),
        _select("bucket_view", "DDP의 그래디언트 버킷", BUCKET_VIEW, "false"),
        _number("gpus", "GPU 수 N", DEFAULTS["gpus"], "1"),
        _number("batch", "GPU당 배치 b", DEFAULTS["batch"], "0"), _number("seq", "시퀀스 길이 s", DEFAULTS["seq"], "0")])
    config = json.dumps(memory.calculator_config(measured), ensure_ascii=False).replace("</", "<\\/")
    style = (_ASSETS / "memory_calc.css").read_text(encoding="utf-8")
    script = (_ASSETS / "memory_calc.js").read_text(encoding="utf-8")
    body = (f'<div id="{div_id}" class="ddp-memcalc" role="group" aria-label="GPU 하나의 학습 메모리 계산기">'
            "<p><strong>GPU 하나의 메모리 계산기</strong> — 값을 바꾸면 바로 다시 계산합니다. 파라미터 하나의 "
            "바이트는 실습이 실제로 잰 값입니다.</p>"
            f"<fieldset><legend>모델</legend>{model}</fieldset><fieldset><legend>학습</legend>{training}</fieldset>"
            f'<div class="ddp-memcalc-out" aria-live="polite"></div>'
            f'<script type="application/json">{config}</script></div>')
    return HTML(f"<style>{style}</style>{body}<script>{script}</script>")


def breakdown_figure(measured: dict, *, precision: str, optimizer: str, n_params: float, gpus: int, batch: int,
                     seq: int, hidden: int, layers: int, bucket_view: bool = False) -> go.Figure:
    """Stacked bars (GB per GPU by kind) for every strategy, against the GPU memory lines."""
    per_param = measured[precision][optimizer]
    held = {key: memory.per_gpu(per_param, n_params, gpus, key, batch, seq, hidden, layers, bucket_view)
            for key in memory.STRATEGIES}
    labels = [label for label, *_ in memory.STRATEGIES.values()]
    fig = go.Figure([go.Bar(name=KIND_NAMES[k], y=labels, x=[held[s][k] / memory.GB for s in held], orientation="h",
                            marker_color=KIND_COLORS[k]) for k in memory.KINDS])
    for gb in memory.GPU_GB:
        fig.add_vline(x=gb, line_dash="dash", annotation_text=f"{gb} GB", annotation_position="top")
    fig.update_layout(barmode="stack", height=320, xaxis_title="GPU 하나의 메모리 (GB = 10⁹바이트)",
                      yaxis={"autorange": "reversed"}, legend={"orientation": "h", "y": -0.3},
                      title=f"Ψ = {n_params / 1e9:g}B, {memory.PRECISIONS[precision]}, "
                            f"{memory.OPTIMIZERS[optimizer]}, N = {gpus}")
    return fig
