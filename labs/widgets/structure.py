"""Chapter 1 live control: pick N and the dataset size D, then launch real ranks and draw what each received."""

from __future__ import annotations

from ..launch import run
from ..lessons.replicas import sampler_shards
from ..viz.structure import recorded_split_figure


def batch_split_explorer(max_ranks: int = 8, max_dataset: int = 32):
    """Sliders for N and D; a button runs the ``replicas`` lab on N real ranks and draws what they got."""
    import ipywidgets as widgets
    from IPython.display import display

    n = widgets.IntSlider(value=4, min=1, max=max_ranks, description="N (랭크)")
    b = widgets.IntSlider(value=10, min=1, max=max_dataset, description="D (데이터셋)")
    button = widgets.Button(description="실제 랭크로 실행", icon="play", button_style="primary")
    out = widgets.Output()

    def preview(_=None):
        with out:
            out.clear_output(wait=True)
            shards = sampler_shards(b.value, n.value)
            recorded_split_figure(shards, f"D={b.value}, N={n.value}: DistributedSampler 계산 결과 (미리보기)").show()

    def launch(_):
        with out:
            out.clear_output(wait=True)
            if b.value < n.value:
                print(f"데이터셋이 랭크 수보다 작습니다(D={b.value}, N={n.value}): D를 {n.value} 이상으로 바꾸세요.")
                return
            print(f"랭크 {n.value}개를 실제 프로세스로 띄우는 중…")
            # D = N·(B/N)·steps + extra: B/N = 1이면 steps = D // N, 나머지가 extra_samples
            result = run("replicas", nproc=n.value, per_rank_batch=1, steps=b.value // n.value,
                         extra_samples=b.value % n.value)
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
