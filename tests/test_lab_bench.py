"""Chapter 8: the ``bench`` lab (labs/lessons/bench/; its cost model is labs/ddp/cost_model.py) and
``python -m labs bench`` on real gloo ranks (quick mode), the rings of labs/ddp/ring.py against the
library, checks that are not applicable to a user's own sizes, and every check failing when the
recorded data is tampered with. The rings' runs that assert no timing are in test_lab_bench_rings.py,
which may run alongside other tests.

The lab runs once per world size (module fixture, quick defaults); the failure tests change copies
of the recorded rank data and call ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest
from conftest import assert_only_these_fail, summarize_again

import labs
from labs.cli import EXIT_OK, main
from labs.ddp.cost_model import fit_cost_model, model_time
from labs.ddp.ring import SEGMENT_BYTES
from labs.lessons import bench
from labs.lessons.bench import measure, report
from labs.viz.cost import allreduce_figure, ddp_step_figure, measured_preset, pipeline_timeline_figure, scaling_calculator

pytestmark = [pytest.mark.timeout(240), pytest.mark.alone]  # 시간을 재므로 다른 테스트와 겹쳐 돌지 않는다

CAPS = [0.1, 1.0, 25.0, 100.0]
VARIANTS = ["compute", "manual", "ddp:0.1", "ddp:1", "ddp:25", "ddp:100", measure.ACCUM]
NO_COMMUNICATION = {"pipelined_bytes_on_socket", "busbw_below_memcpy", "bandwidth_grows_with_size",
                    "cost_model_fits", "pipelined_vs_library", "ddp_faster_than_manual",
                    "accumulation_raises_efficiency"}


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("bench", nproc=n) for n in (1, 2, 3)}


def run_cli(*args: str) -> tuple[int, dict]:
    """``python -m labs bench ... --json`` in this process: exit code and the one JSON object."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", *args, "--json"])
    return code, json.loads(out.getvalue())


def not_applicable(run: dict) -> set[str]:
    return {name for name, c in run["checks"].items() if not c["applicable"]}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_checks_hold(runs, n):
    result = runs[n]
    assert result.ok, result.report()
    assert result.world_size == n and len({r["pid"] for r in result.ranks}) == n
    assert result.data["oversubscribed"] == (n > result.data["cpu_count"])
    n_a = {c.name for c in result.checks.values() if not c.applicable}
    busy = {"accumulation_raises_efficiency"} & n_a  # 기계가 바쁘거나 통신이 작으면 해당 없음일 수 있다
    if n == 1:  # 통신이 없으면 통신에 관한 확인은 해당 없음이다 (실패도, 통과도 아니다)
        assert n_a == NO_COMMUNICATION and result.data["fit"] is None
    elif not result.data["oversubscribed"]:
        assert n_a == busy  # 기본 크기(4K–8M)로는 (기계가 바쁘지 않으면) 모든 확인이 적용된다
    else:
        assert n_a - busy == {"cost_model_fits", "pipelined_vs_library"}


def test_rings_agree_with_library_on_odd_sizes(runs):
    """The check compares with dist.all_reduce on a size that neither N nor the segment divides."""
    for n in (2, 3):
        assert measure.CHECK_NUMEL % n and measure.CHECK_NUMEL % (measure.CHECK_SEGMENT_BYTES // 4)
        check = runs[n].checks["rings_match_library"]
        assert check.ok and check.value <= check.tolerance
        assert set(runs[n].ranks[0]["ring_error"]) == {"ring", "pipelined"}


@pytest.mark.parametrize("sizes, expect_n_a", [
    ("64K", {"bandwidth_grows_with_size", "cost_model_fits", "pipelined_vs_library"}),  # 크기 하나
    ("1M 8M", {"bandwidth_grows_with_size", "cost_model_fits"}),  # 작은 크기가 없다
    ("4K 16K 256K", {"bandwidth_grows_with_size", "cost_model_fits", "pipelined_vs_library"}),  # 큰 크기가 없다
    ("4K 32K 1M 8M", set()),
    ("4K 32K 1M 4M", {"pipelined_vs_library", "cost_model_fits"}),  # 세그먼트 둘인 청크도, α의 여러 배인 크기도 없다
])
def test_user_sizes_never_fail(sizes, expect_n_a):
    """A user's own size list is measured and reported; checks whose premise it lacks are n/a."""
    code, out = run_cli("--quick", "--nproc", "2", "--param", f"sizes={sizes}")
    (run,) = out["runs"]
    failed = {name: c for name, c in run["checks"].items() if not c["ok"]}
    assert code == EXIT_OK and out["ok"] and not failed, failed
    assert [row["size"] for row in run["rows"]] == measure.parse_sizes(sizes)
    busy = {"accumulation_raises_efficiency"} & not_applicable(run)
    if not run["oversubscribed"]:
        assert not_applicable(run) - busy == expect_n_a
    for name in not_applicable(run):
        assert run["checks"][name]["ok"] and run["checks"][name]["description"]  # 이유가 적혀 있다


def test_table_has_nccl_tests_columns(runs):
    table = report.allreduce_table(runs[2]).splitlines()
    header = table[0]
    assert header.startswith("#")
    for column in report.TABLE_COLUMNS:
        assert column in header
    rows = [line.split() for line in table[1:]]
    assert [int(r[0]) for r in rows] == measure.parse_sizes(measure.SIZES_QUICK)
    assert all(int(r[1]) == int(r[0]) // 4 and r[2] == "float" for r in rows)
    text = report.report(runs[2])
    assert "N=2" in text and "메모리 복사" in text and "DDP 한 스텝" in text and "파이프라인 링" in text


def test_ratios_are_paired_over_interleaved_repeats(runs):
    for row in runs[2].data["rows"]:
        for impl in ("ring", "pipelined"):
            ratio = row[f"{impl}_ratio"]
            assert ratio["n"] == measure.QUICK["repeats"] and ratio["min"] <= ratio["median"] <= ratio["max"]
    assert all(row["ring_ratio"] is None for row in runs[1].data["rows"])


def test_timeline_shows_segments(runs):
    """One segment per chunk: 2(N-1) waits, N-1 adds; pipelined: several segments per chunk."""
    for n in (2, 3):
        timeline = runs[n].data["timeline"]
        one, pipelined = timeline["one_segment"], timeline["pipelined"]
        assert len(one["segments"]) == 2 * (n - 1)
        size = runs[n].data["rows"][-1]["size"]
        per_chunk = -(-size // n // SEGMENT_BYTES)
        assert len(pipelined["segments"]) == 2 * (n - 1) * per_chunk > len(one["segments"])
        for line in (one, pipelined):
            starts = [s["wait"] for s in line["segments"]]
            assert starts == sorted(starts) and line["segments"][-1]["added"] <= line["total_us"]


def test_ddp_sweep_has_caps_and_manual(runs):
    for n, result in runs.items():
        d = result.data["ddp"]
        assert [row["variant"] for row in d["rows"]] == VARIANTS
        by = {row["variant"]: row for row in d["rows"]}
        assert by["manual"]["all_reduce"] == d["n_tensors"] == 24
        assert [by[f"ddp:{c:g}"]["all_reduce"] for c in CAPS] == [12, 3, 1, 1]  # 7장의 버킷 규칙
        assert by[measure.ACCUM]["micro_steps"] == 4 and by[measure.ACCUM]["all_reduce"] == 1


def test_cost_model_fit_recovers_known_constants():
    alpha, bw, n = 50e-6, 2e9, 4
    sizes = measure.parse_sizes(report.SIZES_FULL)
    seconds = [model_time({"alpha_s": alpha, "bandwidth": bw}, s, n) for s in sizes]
    fit = fit_cost_model(sizes, seconds, n)
    assert fit["alpha_s"] == pytest.approx(alpha, rel=1e-6)
    assert fit["bandwidth"] == pytest.approx(bw, rel=1e-6)
    assert fit["r2_log"] == pytest.approx(1.0)
    assert fit_cost_model(sizes, seconds, 1) is None and fit_cost_model(sizes[:1], seconds[:1], n) is None


def test_parsing_and_defaults():
    assert measure.parse_sizes("64K 4K 1M 4k") == [4096, 65536, 1 << 20]
    assert measure.size_label(4096) == "4K" and measure.size_label(64 << 20) == "64M"
    assert report.default_world_sizes(gpus=0, cpus=2) == [2, 4]
    assert report.default_world_sizes(gpus=0, cpus=16) == [2, 4, 8, 16]
    assert report.default_world_sizes(gpus=8, cpus=2) == [2, 4, 8]
    assert report.default_world_sizes(gpus=6, cpus=64) == [2, 4, 6]
    for bad in ({"sizes": "3"}, {"sizes": "x"}, {"caps_mb": "0"}):
        with pytest.raises(labs.LabConfigError):
            labs.run("bench", nproc=2, **bad)


def test_wrong_ring_sum_fails(runs):
    def tamper(ranks):
        ranks[1]["ring_error"]["pipelined"] = 0.5  # 세그먼트 하나를 더하지 않았다면

    assert_only_these_fail(bench, runs[2], tamper, {"rings_match_library"})


def test_extra_socket_traffic_fails(runs):
    def tamper(ranks):  # 세그먼트마다 조각 전체를 다시 보냈다면: 커널이 센 바이트가 이론의 두 배
        ranks[0]["socket"]["written"] *= 2

    assert_only_these_fail(bench, runs[2], tamper, {"pipelined_bytes_on_socket"})


def test_slow_pipelined_ring_fails(runs):
    def tamper(ranks):  # 파이프라인 링이 모든 크기에서 4배 느렸다면
        for r in ranks:
            for row in r["allreduce"]:
                row["pipelined"] = [4 * t for t in row["library"]]

    assert_only_these_fail(bench, runs[2], tamper, {"pipelined_vs_library"})


def test_busbw_above_memcpy_fails(runs):
    def tamper(ranks):  # 복사가 통신보다 느리다면 측정이 틀린 것이다
        ranks[0]["memcpy"]["alone"] = [10.0] * len(ranks[0]["memcpy"]["alone"])

    assert_only_these_fail(bench, runs[2], tamper, {"busbw_below_memcpy"})


def test_flat_bandwidth_fails(runs):
    def tamper(ranks):  # 크기에 비례하는 시간(고정 비용 없음, 오히려 음수): algbw가 크기와 상관없이 같다
        for r in ranks:
            for row in r["allreduce"]:
                flat = [row["bytes"] / 1e9 - 1e-6] * len(row["library"])
                row["library"], row["ring"], row["pipelined"] = flat, list(flat), list(flat)

    assert_only_these_fail(bench, runs[2], tamper, {"bandwidth_grows_with_size", "cost_model_fits"})


def test_times_the_model_cannot_explain_fail_the_fit(runs):
    def tamper(ranks):  # 64K만 100배 빠르다: algbw는 크기와 함께 크지만 t = aS + b의 모양이 아니다
        times = {4 << 10: 1e-2, 64 << 10: 1e-4, 1 << 20: 1e-2, 8 << 20: 2e-2}  # busbw는 1 GB/s 아래
        for r in ranks:
            for row in r["allreduce"]:
                fake = [times[row["bytes"]]] * len(row["library"])
                row["library"], row["ring"], row["pipelined"] = fake, list(fake), list(fake)

    assert_only_these_fail(bench, runs[2], tamper, {"cost_model_fits"})


def test_wrong_call_counts_fail(runs):
    def tamper(ranks):
        ranks[0]["ddp"]["all_reduce"]["manual"] = 1  # 파라미터마다 부르지 않았다면
        ranks[0]["ddp"]["all_reduce"]["ddp:100"] = 12  # cap을 키웠는데 호출이 늘었다면
        for r in ranks:
            r["ddp"]["seconds"][measure.ACCUM] = [4 * t for t in r["ddp"]["seconds"][measure.ACCUM]]
            r["ddp"]["seconds"]["compute"] = [min(r["ddp"]["seconds"]["compute"])] * len(r["ddp"]["seconds"]["compute"])
            r["ddp"]["seconds"]["ddp:100"] = [2 * t for t in r["ddp"]["seconds"]["compute"]]  # 통신이 계산만큼 더해진다

    assert_only_these_fail(bench, runs[2], tamper, {"manual_one_call_per_tensor", "fewer_calls_with_bigger_buckets",
                                                    "accumulation_same_calls_per_step",
                                                    "accumulation_raises_efficiency"})


def test_busy_machine_makes_accumulation_not_applicable(runs):
    """When the no-communication step itself swings by more than 2x, the small gain of accumulation
    cannot be measured: reported as not applicable, whatever the accumulated step's time."""
    ranks = copy.deepcopy(runs[2].ranks)
    for r in ranks:
        compute = r["ddp"]["seconds"]["compute"]
        r["ddp"]["seconds"]["compute"] = [min(compute) * (3 if i % 2 else 1) for i in range(len(compute))]
        r["ddp"]["seconds"][measure.ACCUM] = [100.0] * len(compute)  # 누적 스텝이 터무니없이 느려도
    check = summarize_again(bench, ranks, runs[2].backend, **runs[2].params).checks["accumulation_raises_efficiency"]
    assert not check.applicable and check.ok and "바빴다" in check.description


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
    timeline = pipeline_timeline_figure(runs[2])
    one, many = (b.args[0]["visible"] for b in timeline.layout.updatemenus[0].buttons)
    assert len(one) == len(timeline.data) == 4 and not any(a and b for a, b in zip(one, many))
    assert len(timeline.data[2].x) > len(timeline.data[0].x)  # 파이프라인: 세그먼트마다 기다림 막대 하나
    steps = ddp_step_figure(results)
    assert len(steps.data) == 4 and [b.label for b in steps.layout.updatemenus[0].buttons] == ["N=2", "N=3"]
    preset = measured_preset(runs[2])
    assert preset["n"] == 2 and preset["bw"] > 0 and preset["alpha"] > 0 and preset["compute"] > 0
    html = scaling_calculator("calc-test", measured=preset).data
    assert "<script" in html and "src=" not in html and "http" not in html
    assert "calc-test-measured" in html and "#calc-test" in html  # 4장 계산기의 스타일을 이 div에 맞춰 쓴다


@pytest.mark.timeout(1500)
def test_values_inside_every_range_pass_or_are_refused():
    """Each numeric parameter of bench at its bounds and in between (tests/test_engine_params.py's walk, the
    other parameters cheap, N=2): every claim passes or is n/a, or the run is refused; never exit 1 or 3."""
    from test_engine_params import walk, walk_cases

    walk("bench", walk_cases("bench"))


def test_caps_that_cannot_show_fewer_calls_are_not_applicable():
    """Issue 39: ``caps_mb=1e-300`` (one cap, below every tensor) failed a true claim. One cap, or caps all at most
    the smallest tensor, cannot show the effect (n/a); a DDP that ignores the cap still fails at caps that can."""
    from labs.lessons.bench.summary import fewer_calls_check

    tensors, bias_bytes = 24, 4 * 256
    assert not fewer_calls_check([24], tensors, [1e-300], bias_bytes).applicable
    assert not fewer_calls_check([24, 24], tensors, [1e-300, bias_bytes / 2**20], bias_bytes).applicable
    assert fewer_calls_check([24, 9, 1], tensors, [1e-300, 0.1, 25.0], bias_bytes).ok
    ignores_cap = fewer_calls_check([24, 24, 24], tensors, [0.1, 1.0, 25.0], bias_bytes)
    assert ignores_cap.applicable and not ignores_cap.ok
    grows = fewer_calls_check([9, 12], tensors, [0.1, 25.0], bias_bytes)
    assert grows.applicable and not grows.ok
