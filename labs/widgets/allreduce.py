"""Chapter 4 live control: pick N, run the ring All-Reduce on N real ranks and replay its steps."""

from __future__ import annotations

from ..launch import run
from ..viz.allreduce import ring_steps_figure


def launch_into(out, lab: str, nproc: int, **params):
    """Run ``lab`` on ``nproc`` real ranks, saying so in the output area ``out``; return the result."""
    with out:
        out.clear_output(wait=True)
        print(f"랭크 {nproc}개를 실제 프로세스로 띄우는 중…")
        result = run(lab, nproc=nproc, **params)
        out.clear_output(wait=True)
    return result


def ring_explorer(max_ranks: int = 8):
    """A slider for N and a button that runs the ``allreduce`` lab (small tensor) and draws its ring."""
    import ipywidgets as widgets
    from IPython.display import display

    n = widgets.IntSlider(value=3, min=1, max=max_ranks, description="N (랭크)")
    per_chunk = widgets.IntSlider(value=1, min=1, max=3, description="조각당 원소")
    button = widgets.Button(description="실제 랭크로 실행", icon="play", button_style="primary")
    out = widgets.Output()

    def launch(_):
        result = launch_into(out, "allreduce", n.value, numel=10_007, repeats=1, demo_per_chunk=per_chunk.value)
        with out:
            ring_steps_figure(result.ranks, per_chunk.value).show()
            display(result)

    button.on_click(launch)
    return widgets.VBox([widgets.HBox([n, per_chunk, button]), out])
