"""Chapter 5 live control: compare DDP on N ranks with one process on the whole batch, live."""

from __future__ import annotations

from ..launch import run
from . import launch_panel


def equivalence_explorer(global_batch: int = 24):
    """Pick N (a divisor of the global batch) and mean/sum, then run the ``equivalence`` lab."""
    import ipywidgets as widgets

    divisors = [d for d in range(1, 9) if global_batch % d == 0]
    n = widgets.SelectionSlider(options=divisors, value=2, description="N (랭크)")
    reduce = widgets.ToggleButtons(options=[("평균 (DDP 기본)", "mean"), ("합 (잘못된 설정)", "sum")],
                                   description="그래디언트")

    def run_and_draw() -> list:
        result = run("equivalence", nproc=n.value, global_batch=global_batch, grad_reduce=reduce.value)
        summary = (f"B={global_batch}, N={n.value}, B/N={global_batch // n.value}: 최대 파라미터 차이 "
                   f"{result.data['max_param_diff']:.3g} (허용 오차 {result.data['tolerance']:.3g})")
        return [summary, result]

    return launch_panel([n, reduce], run_and_draw)
