"""Live Jupyter controls (ipywidgets), one module per chapter. They need a kernel; the static
site shows the plotly frames/slider version of the same picture instead."""

from __future__ import annotations

from typing import Callable


def launch_panel(controls: list, run_and_draw: Callable[[], list], label: str = "실제 랭크로 실행"):
    """Controls and a run button; the button calls ``run_and_draw()`` and shows what it returns.

    ``run_and_draw`` launches real ranks and returns a list of plotly figures, ``LabResult``s
    (shown as their check tables) and Korean strings (printed, e.g. why nothing was launched).
    """
    import ipywidgets as widgets
    from IPython.display import display

    button = widgets.Button(description=label, icon="play", button_style="primary")
    out = widgets.Output()

    def on_click(_):
        with out:
            out.clear_output(wait=True)
            print("랭크 프로세스를 띄워 실행하는 중…")
            shown = run_and_draw()
            out.clear_output(wait=True)
            for item in shown:
                if isinstance(item, str):
                    print(item)
                elif hasattr(item, "show"):  # plotly 그림
                    item.show()
                else:
                    display(item)

    button.on_click(on_click)
    return widgets.VBox([widgets.HBox([*controls, button]), out])
