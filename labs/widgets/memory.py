"""Chapter 13 live control: the memory calculator in Jupyter, every control redrawing from :mod:`labs.memory`."""

from __future__ import annotations

from .. import memory
from ..viz.memory import DEFAULTS, breakdown_figure


def memory_explorer(measured: dict):
    """Model preset, precision, optimizer, N, micro-batch, sequence length and DDP's bucket copy; the bytes per GPU of each
    strategy redrawn on every change, from the bytes per parameter the labs measured (``measured``)."""
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    preset = widgets.Dropdown(options=[(name, i) for i, (name, *_) in enumerate(memory.PRESETS)],
                              value=[p[0] for p in memory.PRESETS].index(DEFAULTS["preset"]), description="모델 크기")
    precision = widgets.Dropdown(options=[(v, k) for k, v in memory.PRECISIONS.items()], value=DEFAULTS["precision"],
                                 description="정밀도", style=style)
    optimizer = widgets.Dropdown(options=[(v, k) for k, v in memory.OPTIMIZERS.items()], value=DEFAULTS["optimizer"],
                                 description="옵티마이저", style=style)
    gpus = widgets.BoundedIntText(value=DEFAULTS["gpus"], min=1, max=100_000, description="N (GPU 수)", style=style)
    batch = widgets.BoundedIntText(value=DEFAULTS["batch"], min=0, max=4096, description="GPU당 배치 b", style=style)
    seq = widgets.BoundedIntText(value=DEFAULTS["seq"], min=0, max=1_048_576, description="시퀀스 길이 s", style=style)
    bucket_view = widgets.Checkbox(value=False, description="gradient_as_bucket_view=True (DDP 버킷 사본 없음)", style=style)
    out = widgets.Output()

    def redraw(_=None):
        _, n_params, hidden, layers = memory.PRESETS[preset.value]
        with out:
            out.clear_output(wait=True)
            breakdown_figure(measured, precision=precision.value, optimizer=optimizer.value, n_params=n_params,
                             gpus=gpus.value, batch=batch.value, seq=seq.value, hidden=hidden, layers=layers,
                             bucket_view=bucket_view.value).show()

    controls = [preset, precision, optimizer, gpus, batch, seq, bucket_view]
    for control in controls:
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox(controls[:3]), widgets.HBox(controls[3:]), out])
