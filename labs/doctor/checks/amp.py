"""Clipping of gradients that a GradScaler scaled and did not unscale (the scaler's own stage for the
optimizer that owns them, read when ``clip_grad_norm_``/``clip_grad_value_`` was called)."""

from __future__ import annotations

from ..findings import Finding, finding
from .view import View


def check(view: View) -> list[Finding]:
    for rank in range(view.nproc):
        for e in view.events(rank, "clip"):
            if not e["scaled"]:
                continue
            norm = f" clip이 본 노름 {e['norm']:.6g}은(는) 실제 노름의 {e['scale']:g}배입니다." if e["norm"] is not None else ""
            measured = (f"스텝 {e['step'] + 1}에서 `{e['fn']}`이(가) GradScaler가 배율(scale) {e['scale']:g}을(를) 곱한 그래디언트를 "
                        f"unscale_ 없이 잘랐습니다.{norm} 기준값은 곱하기 전의 그래디언트에 대한 값이라, 거의 모든 스텝에서 "
                        "그래디언트를 지나치게 줄입니다.")
            fix = ("자르기 바로 앞에서 `scaler.unscale_(optimizer)`을 부르세요: `scaler.scale(loss).backward()` → "
                   "`scaler.unscale_(optimizer)` → `clip_grad_norm_(model.parameters(), max_norm)` → "
                   "`scaler.step(optimizer)` → `scaler.update()`.")
            return [finding("clip_scaled", "unscale_ 전의 그래디언트 자르기: GradScaler가 곱한 값을 자릅니다", [rank],
                            e["site"], measured, fix, scale=e["scale"], norm=e["norm"], step=e["step"] + 1)]
    return []
