"""Chapter 1 live control: pick N and B, then launch real ranks and draw what each received."""

from __future__ import annotations

from ..launch import run
from ..lessons.structure import sampler_shards
from ..viz.structure import recorded_split_figure


def batch_split_explorer(max_ranks: int = 8, max_batch: int = 32):
    """Sliders for N and B; a button runs the ``replicas`` lab on N real ranks and draws what they got."""
    import ipywidgets as widgets
    from IPython.display import display

    n = widgets.IntSlider(value=4, min=1, max=max_ranks, description="N (랭크)")
    b = widgets.IntSlider(value=16, min=1, max=max_batch, description="B (배치)")
    button = widgets.Button(description="실제 랭크로 실행", icon="play", button_style="primary")
    out = widgets.Output()

    def preview(_=None):
        with out:
            out.clear_output(wait=True)
            shards = sampler_shards(b.value, n.value)
            recorded_split_figure(shards, f"B={b.value}, N={n.value}: DistributedSampler 계산 결과 (미리보기)").show()

    def launch(_):
        with out:
            out.clear_output(wait=True)
            if b.value % n.value:
                print(f"실제 실행은 B가 N으로 나누어떨어질 때만 합니다(B/N이 랭크당 배치 크기). "
                      f"B={b.value}, N={n.value}: B를 {n.value}의 배수로 바꾸세요.")
                return
            print(f"랭크 {n.value}개를 실제 프로세스로 띄우는 중…")
            result = run("replicas", nproc=n.value, per_rank_batch=b.value // n.value, steps=1)
            out.clear_output(wait=True)
            shards = [r["shard"] for r in result.ranks]
            pids = ", ".join(str(r["pid"]) for r in result.ranks)
            recorded_split_figure(shards, f"실제 실행 기록: N={n.value} (PID {pids})").show()
            display(result)

    n.observe(preview, names="value")
    b.observe(preview, names="value")
    button.on_click(launch)
    preview()
    return widgets.VBox([widgets.HBox([n, b, button]), out])
