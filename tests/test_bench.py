"""Chapter 7+: the ``bench`` lab and ``python -m labs bench`` on real gloo ranks (quick mode), its
tables and JSON, its figures, and its checks failing when the recorded data is tampered with.

The lab runs once per world size (module fixture, quick defaults); the failure tests change copies
of the recorded rank data and call ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import json
import math

import pytest

import labs
from labs import bench
from labs.cli import EXIT_OK, main
from labs.viz.cost import allreduce_figure, ddp_step_figure, measured_preset, scaling_calculator

from conftest import assert_only_these_fail

pytestmark = pytest.mark.timeout(180)

CAPS = [0.1, 1.0, 25.0, 100.0]
VARIANTS = ["compute", "manual", "ddp:0.1", "ddp:1", "ddp:25", "ddp:100", bench.ACCUM]


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("bench", nproc=n) for n in (1, 2, 3)}


@pytest.fixture(scope="module")
def cli_json():
    """``python -m labs bench --quick --nproc 2 --json``, in this process (one JSON object on stdout)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", "--quick", "--nproc", "2", "--json"])
    return code, out.getvalue()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_checks_hold(runs, n):
    result = runs[n]
    assert result.ok, result.report()
    assert result.world_size == n and len({r["pid"] for r in result.ranks}) == n
    assert result.data["oversubscribed"] == (n > result.data["cpu_count"])
    if n == 2 and not result.data["oversubscribed"]:
        assert "ring_vs_library" in result.checks
    if n == 1:  # 통신이 없으면 busbw와 비용 모델도 없다
        assert result.data["fit"] is None and all(row["ring_ratio"] is None for row in result.data["rows"])


def test_quick_cli_json_is_valid(cli_json):
    code, stdout = cli_json
    report = json.loads(stdout)  # 정확히 JSON 한 개
    failed = {name: c for r in report["runs"] for name, c in r["checks"].items() if not c["ok"]}
    assert code == EXIT_OK and report["ok"] is True, failed
    (run,) = report["runs"]
    assert run["world_size"] == 2 and run["backend"] == "gloo"
    assert [row["size"] for row in run["rows"]] == bench.parse_sizes(bench.SIZES_QUICK)
    assert {"fit", "memcpy", "ddp", "ring_steps", "checks"} <= set(run)


def test_table_has_nccl_tests_columns(runs):
    table = bench.allreduce_table(runs[2]).splitlines()
    header = table[0]
    assert header.startswith("#")
    for column in ("size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                   "ring time(us)", "ring busbw(GB/s)", "ring/lib"):
        assert column in header
    rows = [line.split() for line in table[1:]]
    assert [int(r[0]) for r in rows] == bench.parse_sizes(bench.SIZES_QUICK)
    assert all(int(r[1]) == int(r[0]) // 4 and r[2] == "float" for r in rows)
    report = bench.report(runs[2])
    assert "N=2" in report and "메모리 복사" in report and "DDP 한 스텝" in report


@pytest.mark.parametrize("n", [1, 2, 3])
def test_busbw_is_algbw_times_bus_factor(runs, n):
    factor = 2 * (n - 1) / n
    for row in runs[n].data["rows"]:
        for impl in ("library", "ring"):
            m = row[impl]
            assert m["algbw"] == row["size"] / (m["time_us"] * 1e-6) / 1e9
            assert m["busbw"] == m["algbw"] * factor


def test_ring_and_library_on_the_same_sizes(runs):
    for n in (2, 3):
        rows = runs[n].data["rows"]
        assert [row["size"] for row in rows] == bench.parse_sizes(bench.SIZES_QUICK)
        for row in rows:
            assert row["library"]["time_us"] > 0 and row["ring"]["time_us"] > 0
            assert row["ring_ratio"] == pytest.approx(row["ring"]["busbw"] / row["library"]["busbw"])
            assert len(row["library"]["samples_us"]) == len(row["ring"]["samples_us"]) == bench.QUICK["repeats"]
        assert len(runs[n].data["ring_steps"]["reduce_scatter_us"]) == n - 1


def test_memcpy_ceiling_positive(runs):
    for result in runs.values():
        m = result.data["memcpy"]
        assert m["bytes"] == bench.QUICK["memcpy_mb"] << 20
        assert m["alone_gbs"] > 0 and m["together_gbs"] > 0 and math.isfinite(m["alone_gbs"])


def test_ddp_sweep_has_caps_and_manual(runs):
    for n, result in runs.items():
        d = result.data["ddp"]
        assert [row["variant"] for row in d["rows"]] == VARIANTS
        by = {row["variant"]: row for row in d["rows"]}
        assert by["manual"]["all_reduce"] == d["n_tensors"] == 24
        assert [by[f"ddp:{c:g}"]["all_reduce"] for c in CAPS] == [12, 3, 1, 1]  # 7장의 버킷 규칙
        assert by[bench.ACCUM]["micro_steps"] == 4 and by[bench.ACCUM]["all_reduce"] == 1
        assert all(row["step_ms"] > 0 for row in d["rows"])
        assert by["manual"]["vs_manual"] == 1.0 and by["compute"]["efficiency"] == 1.0


def test_cost_model_fit_recovers_known_constants():
    alpha, bw, n = 50e-6, 2e9, 4
    rows = [{"size": s, "library": {"best_us": bench.model_time({"alpha_s": alpha, "bandwidth": bw}, s, n) * 1e6}}
            for s in bench.parse_sizes(bench.SIZES_FULL)]
    fit = bench.fit_cost_model(rows, n)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["bandwidth"] == pytest.approx(bw, rel=1e-6)
    assert fit["r2_log"] == pytest.approx(1.0)
    assert bench.fit_cost_model(rows, 1) is None


def test_parsing_and_defaults():
    assert bench.parse_sizes("64K 4K 1M 4k") == [4096, 65536, 1 << 20]
    assert bench.size_label(4096) == "4K" and bench.size_label(64 << 20) == "64M"
    assert bench.default_world_sizes(gpus=0, cpus=2) == [2, 4]
    assert bench.default_world_sizes(gpus=0, cpus=16) == [2, 4, 8, 16]
    assert bench.default_world_sizes(gpus=8, cpus=2) == [2, 4, 8]
    assert bench.default_world_sizes(gpus=6, cpus=64) == [2, 4, 6]
    for bad in ({"sizes": "3"}, {"sizes": "x"}, {"caps_mb": "0"}):
        with pytest.raises(labs.LabConfigError):
            labs.run("bench", nproc=2, **bad)


def test_wrong_ring_sum_fails(runs):
    def tamper(ranks):
        ranks[1]["ring_error"] = 1.0

    assert_only_these_fail(bench, runs[2], tamper, {"ring_sum_exact"})


def test_slow_ring_fails(runs):
    def tamper(ranks):  # 링이 모든 크기에서 4배 느렸다면
        for r in ranks:
            for row in r["allreduce"]:
                row["ring"] = [4 * t for t in row["library"]]

    assert_only_these_fail(bench, runs[2], tamper, {"ring_vs_library"})


def test_busbw_above_memcpy_fails(runs):
    def tamper(ranks):  # 복사가 통신보다 느리다면 측정이 틀린 것이다
        ranks[0]["memcpy"]["alone"] = [10.0] * len(ranks[0]["memcpy"]["alone"])

    assert_only_these_fail(bench, runs[2], tamper, {"busbw_below_memcpy"})


def test_flat_bandwidth_fails(runs):
    def tamper(ranks):  # 크기에 비례하는 시간(고정 비용 없음, 오히려 음수): algbw가 크기와 상관없이 같다
        for r in ranks:
            for row in r["allreduce"]:
                flat = [row["bytes"] / 1e9 - 1e-6] * len(row["library"])
                row["library"], row["ring"] = flat, list(flat)

    assert_only_these_fail(bench, runs[2], tamper, {"bandwidth_grows_with_size", "cost_model_fits"})


def test_wrong_call_counts_fail(runs):
    def tamper(ranks):
        ranks[0]["ddp"]["all_reduce"]["manual"] = 1  # 파라미터마다 부르지 않았다면
        ranks[0]["ddp"]["all_reduce"]["ddp:100"] = 12  # cap을 키웠는데 호출이 늘었다면
        for r in ranks:
            r["ddp"]["seconds"][bench.ACCUM] = [4 * t for t in r["ddp"]["seconds"][bench.ACCUM]]

    assert_only_these_fail(bench, runs[2], tamper, {"manual_one_call_per_tensor", "fewer_calls_with_bigger_buckets",
                                             "accumulation_same_calls_per_step", "accumulation_raises_efficiency"})


def test_slow_ddp_fails(runs):
    def tamper(ranks):  # DDP가 손으로 쓴 루프보다 느렸다면
        for r in ranks:
            manual = r["ddp"]["seconds"]["manual"]
            for cap in CAPS:
                r["ddp"]["seconds"][f"ddp:{cap:g}"] = [2 * t for t in manual]

    assert_only_these_fail(bench, runs[2], tamper, {"ddp_faster_than_manual"})


def test_figures_and_calculator(runs):
    results = [runs[2], runs[3]]
    fig = allreduce_figure(results)
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["시간", "busbw와 상한"]
    time_view, busbw_view = (b.args[0]["visible"] for b in buttons)
    assert len(time_view) == len(fig.data) and any(time_view) and any(busbw_view)
    assert not any(a and b for a, b in zip(time_view, busbw_view))
    steps = ddp_step_figure(results)
    assert len(steps.data) == 4 and [b.label for b in steps.layout.updatemenus[0].buttons] == ["N=2", "N=3"]
    preset = measured_preset(runs[2])
    assert preset["n"] == 2 and preset["bw"] > 0 and preset["alpha"] > 0 and preset["compute"] > 0
    html = scaling_calculator("calc-test", measured=preset).data
    assert "<script" in html and "src=" not in html and "http" not in html
    assert "calc-test-measured" in html and "#calc-test" in html  # 4장 계산기의 스타일을 이 div에 맞춰 쓴다
