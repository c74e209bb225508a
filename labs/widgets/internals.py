"""Chapter 7 live control: pick N and the bucket caps, run the ``buckets`` lab on real ranks, draw it."""

from __future__ import annotations

from ..errors import LabConfigError
from ..launch import run
from ..lessons.buckets import LAB
from ..viz.internals import bucket_count_figure, overlap_timeline_figure
from . import launch_panel


def bucket_explorer(max_ranks: int = 8):
    """A slider for N, a text box for ``bucket_cap_mb`` values and a button that launches real ranks."""
    import ipywidgets as widgets

    n = widgets.IntSlider(value=3, min=1, max=max_ranks, description="N (랭크)")
    caps = widgets.Text(value="0.05 0.25 2 default", description="cap (MiB)",
                        placeholder="공백으로 구분, default = 지정하지 않음")
    depth = widgets.IntSlider(value=12, min=2, max=24, description="층 수")

    def run_and_draw() -> list:
        try:
            caps_mb = LAB.params["caps_mb"].parse("caps_mb", caps.value)
        except LabConfigError as err:
            return [str(err)]
        result = run("buckets", nproc=n.value, caps_mb=caps_mb, depth=depth.value)
        return [bucket_count_figure(result.data["rows"]), overlap_timeline_figure(result.ranks[0]), result]

    return launch_panel([n, depth, caps], run_and_draw)
