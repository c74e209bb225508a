"""Chapter 13's memory calculator: the arithmetic against what the labs measured and the ZeRO paper's own
numbers, the page's script against the Python on a grid of inputs, the page offline in Chromium (also at
phone width), and the live widget."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

import labs
from labs import memory
from labs.viz.memory import calculator

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def runs():
    return {"zero": labs.run("zero", nproc=2), "mixed": labs.run("mixed", nproc=2)}


@pytest.fixture(scope="module")
def measured(runs):
    assert all(r.ok for r in runs.values())
    return memory.measured_bytes(runs["zero"], runs["mixed"])


def _held(measured, precision, opt, n_params, n, strategy, bucket_view=False):
    return memory.per_gpu(measured[precision][opt], n_params, n, strategy, batch=0, seq=0, hidden=0, layers=0,
                          bucket_view=bucket_view)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_ddp_at_the_labs_size_is_what_the_ranks_held(runs, measured, opt):
    """At the labs' own model size the calculator gives back the bytes a real DDP rank held."""
    zero, mixed = runs["zero"].data, runs["mixed"].data
    fp32 = _held(measured, "fp32", opt, zero["n_params"], 2, "ddp")
    assert fp32["params"] == zero["memory"][opt]["ddp"]["params"][0]
    assert fp32["grads"] == zero["memory"][opt]["ddp"]["grads"][0]
    assert fp32["buckets"] == runs["zero"].ranks[0]["ddp_buckets"]["buckets"]  # DDP의 평평한 버킷(기본값)
    bf16 = _held(measured, "bf16_mixed", opt, mixed["n_params"], 2, "ddp")
    held = mixed["memory"][opt]
    assert (bf16["params"], bf16["grads"], bf16["state"]) == (held["params"][0], held["grads"][0],
                                                            held["master"][0] + held["moments"][0])
    assert bf16["buckets"] == runs["mixed"].ranks[0]["ddp_buckets"]["buckets"]


def test_default_ddp_holds_a_bucket_copy_of_the_gradients(measured):
    """DDP's default (gradient_as_bucket_view=False): 4 + 4 + 4 + 8 = 20 bytes per parameter in fp32 with AdamW,
    2 + 2 + 2 + 12 = 18 in bf16 mixed precision; with the bucket view both are 16 (the ZeRO paper's count)."""
    per_param = {p: _held(measured, p, "adamw", 1, 8, "ddp") for p in memory.PRECISIONS}
    assert {p: sum(h.values()) for p, h in per_param.items()} == {"fp32": 20, "bf16_mixed": 18}
    assert {p: sum(_held(measured, p, "adamw", 1, 8, "ddp", bucket_view=True).values()) for p in memory.PRECISIONS} == {
        "fp32": 16, "bf16_mixed": 16}
    assert _held(measured, "fp32", "adamw", 1, 8, "zero1")["buckets"] == 4  # ShardedOptimizer도 DDP 아래에서 돈다
    assert _held(measured, "fp32", "adamw", 1, 8, "zero2")["buckets"] == 0  # Reduce-Scatter: 전체 크기의 사본이 없다


def test_fp32_state_is_the_moments_the_optimizer_keeps(runs, measured):
    """The per-element state (told apart by shape) is exactly the moment buffers torch's optimizers keep (told
    apart by name: AdamW's exp_avg and exp_avg_sq, SGD's momentum_buffer), without AdamW's per-tensor step."""
    zero = runs["zero"]
    for opt, keys in {"adamw": ("exp_avg", "exp_avg_sq"), "sgd": ("momentum_buffer",)}.items():
        by_key = zero.ranks[0][opt]["single"]["state_by_key"]
        assert measured["fp32"][opt]["state"] * zero.data["n_params"] == sum(by_key[k] for k in keys)
        assert set(by_key) - set(keys) == ({"step"} if opt == "adamw" else set())


def test_zero1_at_the_labs_size_is_what_a_sharded_rank_held(runs, measured):
    """SGD keeps no per-tensor counter, and the lab's model splits evenly over 2 ranks: ZeRO-1's state per
    rank is exactly the calculator's k·Ψ/N."""
    zero = runs["zero"].data
    expected = _held(measured, "fp32", "sgd", zero["n_params"], 2, "zero1")["state"]
    assert zero["memory"]["sgd"]["sharded"]["state"] == [expected, expected]


def test_zero_paper_figure_1(measured):
    """Rajbhandari et al. 2020, figure 1: Ψ = 7.5B, mixed-precision Adam, N = 64 → 120, 31.4, 16.6, 1.9 GB
    (the paper counts no bucket copy: DDP with gradient_as_bucket_view=True)."""
    paper = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.9}
    for strategy, gb in paper.items():
        held = _held(measured, "bf16_mixed", "adamw", 7.5e9, 64, strategy, bucket_view=True)
        assert round(sum(held.values()) / 1e9, 1) == gb, strategy


def test_activation_estimate_is_korthikanti_less_dropout_masks(measured):
    """34·s·b·h bytes per layer in 16-bit (Korthikanti et al. 2022, attention scores not stored) less the two
    1-byte dropout masks; in fp32 the same 16 values take twice the bytes."""
    b, s, h, layers = 2, 1024, 512, 3
    bf16 = memory.per_gpu(measured["bf16_mixed"]["adamw"], 1e6, 4, "ddp", b, s, h, layers)["activations"]
    fp32 = memory.per_gpu(measured["fp32"]["adamw"], 1e6, 4, "ddp", b, s, h, layers)["activations"]
    assert bf16 == (34 - 2) * s * b * h * layers
    assert fp32 == 2 * bf16


def test_ddp_does_not_shrink_with_n_and_zero3_divides_everything(measured):
    one = _held(measured, "bf16_mixed", "adamw", 7e9, 1, "ddp")
    assert _held(measured, "bf16_mixed", "adamw", 7e9, 8, "ddp") == one
    three = _held(measured, "bf16_mixed", "adamw", 7e9, 8, "zero3")
    assert {k: three[k] * 8 for k in ("params", "grads", "state")} == {k: one[k] for k in ("params", "grads", "state")}


# ----------------------------------------------------------------------------- the page, in Chromium

def _page(measured) -> str:
    return ('<!doctype html><html lang="ko"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1"><title>메모리 계산기</title></head><body>'
            f"{calculator(measured).data}</body></html>")


@pytest.fixture
def open_page(chromium, measured):
    contexts = []

    def opener(**options):
        context = chromium.new_context(**options)
        contexts.append(context)
        requests, errors = [], []
        context.route("**/*", lambda route: (requests.append(route.request.url), route.abort()))
        page = context.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(_page(measured), wait_until="load")
        return page, requests, errors

    yield opener
    for context in contexts:
        context.close()


GRID = list(itertools.product(memory.PRECISIONS, memory.OPTIMIZERS, memory.STRATEGIES, (1, 3, 64),
                              ((125e6, 768, 12), (7e9, 4096, 32), (70e9, 8192, 80)), ((1, 2048), (6, 333)),
                              (False, True)))


def test_script_equals_python_on_a_grid(open_page, measured):
    page, _, _ = open_page()
    inputs = [{"precision": p, "optimizer": o, "strategy": st, "gpus": n, "params": size, "hidden": h, "layers": layers,
               "batch": b, "seq": s, "bucket_view": view} for p, o, st, n, (size, h, layers), (b, s), view in GRID]
    config = memory.calculator_config(measured)
    from_js = page.evaluate("([config, xs]) => xs.map(x => window.ddpMemoryPerGpu(config, x))", [config, inputs])
    assert len(from_js) == len(GRID) == 2 * 2 * 4 * 3 * 3 * 2 * 2
    for x, js in zip(inputs, from_js):
        py = memory.per_gpu(measured[x["precision"]][x["optimizer"]], x["params"], x["gpus"], x["strategy"],
                            x["batch"], x["seq"], x["hidden"], x["layers"], x["bucket_view"])
        assert js == py, x


def _total_gb(page) -> float:
    text = page.inner_text(".ddp-memcalc-total strong")
    found = re.search(r"([\d,.]+) GB", text)
    assert found is not None, text
    return float(found.group(1).replace(",", ""))


def test_calculator_works_offline_and_follows_the_inputs(open_page, measured):
    page, requests, errors = open_page(viewport={"width": 1280, "height": 900})
    # 처음 값: 7B, bf16 혼합 정밀도, AdamW, DDP, N=8, b=1, s=2048
    first = memory.per_gpu(measured["bf16_mixed"]["adamw"], 7e9, 8, "ddp", 1, 2048, 4096, 32)
    assert _total_gb(page) == pytest.approx(sum(first.values()) / 1e9, abs=0.51)
    assert "80 GB ✗ 넘침" in page.inner_text(".ddp-memcalc-total")
    page.select_option("[name=bucket_view]", "true")  # gradient_as_bucket_view=True: 버킷 사본이 빠진다
    viewed = memory.per_gpu(measured["bf16_mixed"]["adamw"], 7e9, 8, "ddp", 1, 2048, 4096, 32, bucket_view=True)
    assert _total_gb(page) == pytest.approx(sum(viewed.values()) / 1e9, abs=0.51)
    assert sum(first.values()) - sum(viewed.values()) == 2 * 7e9  # bf16 버킷 2바이트 × Ψ
    page.select_option("[name=bucket_view]", "false")
    page.select_option("[name=preset]", label="70B (h=8,192, L=80)")
    page.select_option("[name=strategy]", "zero3")
    page.fill("[name=gpus]", "64")
    page.dispatch_event("[name=gpus]", "input")
    held = memory.per_gpu(measured["bf16_mixed"]["adamw"], 70e9, 64, "zero3", 1, 2048, 8192, 80)
    assert page.input_value("[name=params]") == "70"
    assert _total_gb(page) == pytest.approx(sum(held.values()) / 1e9, abs=0.051)
    assert page.locator(".ddp-memcalc-row").count() == len(memory.STRATEGIES)
    assert page.locator(".ddp-memcalc-chosen").inner_text().startswith("ZeRO-3 / FSDP")
    page.fill("[name=params]", "1")
    page.dispatch_event("[name=params]", "input")
    assert page.input_value("[name=preset]") == "custom"
    assert requests == [] and errors == []


def test_phone_width_has_no_sideways_scroll(open_page):
    page, requests, errors = open_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.select_option("[name=preset]", label="70B (h=8,192, L=80)")  # 가장 긴 막대와 글
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1] + 1, width
    assert requests == [] and errors == []


# ----------------------------------------------------------------------------- the live widget

def test_widget_redraws_from_the_python_arithmetic(measured, monkeypatch):
    import ipywidgets as widgets

    from labs.widgets import memory as widget

    drawn = []
    monkeypatch.setattr(widget, "breakdown_figure", lambda m, **kw: drawn.append(kw) or _Shown())
    panel = widget.memory_explorer(measured)
    controls = {c.description: c for box in panel.children[:2] for c in box.children}
    assert drawn[-1]["gpus"] == 8
    controls["N (GPU 수)"].value = 16
    controls["모델 크기"].value = [p[0] for p in memory.PRESETS].index("70B")
    assert drawn[-1]["gpus"] == 16 and drawn[-1]["n_params"] == 70e9 and drawn[-1]["layers"] == 80
    assert isinstance(panel.children[-1], widgets.Output)


class _Shown:
    def show(self):
        pass


def test_widget_figure_bars_are_the_python_numbers(measured):
    from labs.viz.memory import breakdown_figure

    fig = breakdown_figure(measured, precision="fp32", optimizer="sgd", n_params=1e9, gpus=4, batch=1, seq=128,
                           hidden=256, layers=2)
    state = next(t for t in fig.data if t.name == "옵티마이저 상태")
    expected = [memory.per_gpu(measured["fp32"]["sgd"], 1e9, 4, s, 1, 128, 256, 2)["state"] / 1e9
                for s in memory.STRATEGIES]
    assert list(state.x) == expected


def test_no_serious_accessibility_violations(open_page):
    """axe-core, as the site's page tests run it: every control labelled, the bars described."""
    import axe_playwright_python
    from page_visit import AXE_JS

    page, _, _ = open_page(viewport={"width": 1280, "height": 900})
    page.add_script_tag(path=str(Path(axe_playwright_python.__file__).parent / "axe.min.js"))
    serious = [v for v in page.evaluate(AXE_JS) if v["impact"] in ("serious", "critical")]
    assert serious == [], serious
