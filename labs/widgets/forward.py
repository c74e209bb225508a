"""Chapter 2 live control: pick N and the number of iterations, run the ``forward`` lab, draw it."""

from __future__ import annotations

from typing import Callable

from ..launch import run
from ..viz.forward import collective_timeline_figure, loss_figure


def launch_panel(controls: list, run_and_draw: Callable[[], list]):
    """Controls and a run button; the button calls ``run_and_draw()`` and shows what it returns.

    ``run_and_draw`` launches real ranks and returns plotly figures and/or a ``LabResult``.
    """
    import ipywidgets as widgets
    from IPython.display import display

    button = widgets.Button(description="실제 랭크로 실행", icon="play", button_style="primary")
    out = widgets.Output()

    def on_click(_):
        with out:
            out.clear_output(wait=True)
            print("랭크 프로세스를 띄워 실행하는 중…")
            shown = run_and_draw()
            out.clear_output(wait=True)
            for item in shown:
                if hasattr(item, "show"):  # plotly 그림
                    item.show()
                else:
                    display(item)

    button.on_click(on_click)
    return widgets.VBox([widgets.HBox([*controls, button]), out])


def collective_explorer(max_ranks: int = 4, max_iterations: int = 6):
    """Sliders for N and iterations; the button runs ``forward`` on N real ranks and draws the counts."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=2, min=1, max=max_ranks, description="N (랭크)")
    iterations = widgets.IntSlider(value=4, min=1, max=max_iterations, description="반복 수")

    def run_and_draw() -> list:
        result = run("forward", nproc=n.value, iterations=iterations.value)
        return [collective_timeline_figure(result.data["counts"], result.data["items"]),
                loss_figure(result.data["losses"], result.data["mean_losses"]), result]

    return launch_panel([n, iterations], run_and_draw)
