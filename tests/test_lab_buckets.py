"""Chapter 7: the ``buckets``, ``accumulation`` and ``uneven`` labs on real gloo ranks, and their checks failing.

Each lab runs once per world size (module fixtures); the failure tests tamper with copies of the
recorded rank data and call the lab's ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import pytest
from conftest import assert_checks_hold, assert_only_these_fail

import labs
from labs.ddp.buckets import group_by_size
from labs.lessons import accumulation as accumulation_lab
from labs.lessons import buckets as buckets_lab
from labs.lessons import uneven as uneven_lab
from labs.viz import internals as figures
from labs.widgets import internals as widget

pytestmark = pytest.mark.timeout(180)

CHAPTER_CAPS = ["0.1", "0.5", "1", "25", "default"]
CHAPTER_COUNTS = [12, 6, 3, 1, 2]  # Linear(256, 256) × 12: 가중치 하나 0.25 MiB, 전체 약 3 MiB
SMALL_BUCKETS = {"caps_mb": (0.1, "default"), "depth": 8, "width": 128}  # N=1용: 가볍게


@pytest.fixture(scope="module")
def bucket_runs():
    return {1: labs.run("buckets", nproc=1, **SMALL_BUCKETS), 3: labs.run("buckets", nproc=3)}


@pytest.fixture(scope="module")
def accumulation_runs():
    return {n: labs.run("accumulation", nproc=n) for n in (1, 3)}


@pytest.fixture(scope="module")
def uneven_runs():
    return {n: labs.run("uneven", nproc=n) for n in (1, 3)}


# ----------------------------------------------------------------------------- buckets

def test_bucket_rule():
    # 크기가 상한 "이상"이 되는 순간 닫는다. 첫 버킷만 다른 상한을 쓸 수 있다.
    def predict(sizes, first, limit):
        return group_by_size(list(range(len(sizes))), limit, first, nbytes=sizes.__getitem__)

    assert predict([1, 1, 1, 1], 2, 2) == [[0, 1], [2, 3]]
    assert predict([1, 1, 1, 1], 1, 3) == [[0], [1, 2, 3]]
    assert predict([5, 1, 1], 2, 2) == [[0], [1, 2]]
    assert predict([1, 1, 1], 10, 10) == [[0, 1, 2]]
    assert buckets_lab.bucket_limits("default") == (1024 * 1024, 25 * 1024 * 1024)
    assert buckets_lab.bucket_limits("25") == (25 * 1024 * 1024,) * 2
    caps = buckets_lab.LAB.params["caps_mb"]  # 위젯의 글자 입력도 이 명세로 읽는다
    assert caps.parse("caps_mb", "0.05 0.25 2 default") == (0.05, 0.25, 2.0, "default")
    for bad in ("0.5 -1", " ", "0.5 x"):
        with pytest.raises(labs.LabConfigError):
            caps.parse("caps_mb", bad)


def test_buckets_chapter_run(bucket_runs):
    result = bucket_runs[3]
    assert_checks_hold(result)
    rows = result.data["rows"]
    assert [row["cap"] for row in rows] == CHAPTER_CAPS
    assert [row["steady"] for row in rows] == CHAPTER_COUNTS
    assert [row["per_iteration"] for row in rows] == [[1, c, c] for c in CHAPTER_COUNTS]
    assert all(row["broadcast"][0] == 0 and row["broadcast"][1] > 0 and row["broadcast"][2] == 0 for row in rows)
    assert result.data["first_bucket_bytes"] == 1024 * 1024
    assert result.checks["launched_before_backward_end"].value == 3 * 4  # 랭크 3개 × 버킷이 2개 이상인 cap 4개
    assert result.checks["launched_in_index_order"].value == 3 * 4
    for r in result.ranks:  # 통신 훅이 본 버킷 수 = 세어 본 All-Reduce 수
        assert [len(run["timeline"]["buckets"]) for run in r["runs"]] == CHAPTER_COUNTS


def test_buckets_single_rank(bucket_runs):
    result = bucket_runs[1]
    assert_checks_hold(result)
    # 128×128 float32 = 64 KiB짜리 가중치 8개(약 0.5 MiB): 0.1 MiB면 두 층씩 4개, 기본값은 첫 버킷(1 MiB) 하나
    assert [row["steady"] for row in result.data["rows"]] == [4, 1]
    assert "count_decreases_with_cap" not in result.checks  # 숫자 cap이 하나뿐이면 재지 않는다
    assert result.checks["launched_before_backward_end"].value == 1


def test_buckets_checks_can_fail(bucket_runs):
    result = bucket_runs[3]

    def one_rank_counts_more(ranks):
        ranks[1]["runs"][0]["all_reduce"][-1] += 1

    assert_only_these_fail(buckets_lab, result, one_rank_counts_more, {"counts_same_on_all_ranks"})

    def prediction_misses(ranks):
        for r in ranks:
            r["runs"][2]["all_reduce"][-1] = 7

    assert_only_these_fail(buckets_lab, result, prediction_misses,
                           {"counts_match_prediction", "count_decreases_with_cap"})

    def no_overlap(ranks):
        for b in ranks[2]["runs"][0]["timeline"]["buckets"]:
            b["launch"] = max(ranks[2]["runs"][0]["timeline"]["ready"]) + 1.0

    assert_only_these_fail(buckets_lab, result, no_overlap, {"launched_before_backward_end"})

    def launched_out_of_order(ranks):  # 뒤 번호의 버킷이 먼저 시작된 기록
        buckets = ranks[1]["runs"][0]["timeline"]["buckets"]
        buckets[0], buckets[1] = buckets[1], buckets[0]

    assert_only_these_fail(buckets_lab, result, launched_out_of_order, {"launched_in_index_order"})

    def returned_too_early(ranks):
        timeline = ranks[0]["runs"][1]["timeline"]
        timeline["buckets"][-1]["done"] = timeline["backward_returned"] + 0.01

    assert_only_these_fail(buckets_lab, result, returned_too_early, {"backward_waits_for_buckets"})

    def first_iteration_bucketed(ranks):
        ranks[0]["runs"][0]["all_reduce"][0] = 12

    assert_only_these_fail(buckets_lab, result, first_iteration_bucketed, {"first_iteration_one_bucket"})


def test_overlap_checks_not_applicable_without_two_buckets():
    # cap이 모델보다 크면 버킷이 하나뿐: 겹침과 순서는 잴 수 없으므로 통과로 꾸미지 않고 "해당 없음"
    result = labs.run("buckets", nproc=2, caps_mb=(25.0,), depth=2, width=64)
    assert result.ok, result.report()
    for name in ("launched_before_backward_end", "launched_in_index_order"):
        assert not result.checks[name].applicable and result.checks[name].value is None
    assert result.checks["counts_match_prediction"].value == [1]


def test_widget_reads_caps_with_the_lab_spec(monkeypatch):
    panels = {}
    monkeypatch.setattr(widget, "launch_panel", lambda controls, action: panels.setdefault("action", action))
    monkeypatch.setattr(widget, "run", lambda *a, **k: pytest.fail("bad caps must not launch ranks"))
    widget.bucket_explorer()
    caps = panels["action"].__closure__
    text_box = next(c.cell_contents for c in caps if type(c.cell_contents).__name__ == "Text")
    text_box.value = "0.5 -1"
    message = panels["action"]()
    assert len(message) == 1 and "caps_mb" in message[0] and "-1" in message[0]


def test_bucket_figures(bucket_runs):
    result = bucket_runs[3]
    counts = figures.bucket_count_figure(result.data["rows"])
    assert list(counts.data[0].y) == CHAPTER_COUNTS
    assert len(counts.layout.sliders[0].steps) == 3
    timeline = figures.overlap_timeline_figure(result.ranks[0])
    assert len(timeline.layout.sliders[0].steps) == len(CHAPTER_CAPS)
    assert sum(1 for t in timeline.data if t.visible) == 3  # 순전파, 층별 역전파, 버킷: 한 cap만 보인다
    table = figures.bucket_table(result).data
    assert table.count("<tr>") == 1 + len(CHAPTER_CAPS) and "첫 버킷 1 MiB, 나머지 25 MiB" in table
    alt = figures.bucket_count_alt(result.data["rows"])
    assert all(f"{figures.cap_label(c)} {k}번" in alt for c, k in zip(CHAPTER_CAPS, CHAPTER_COUNTS))


# ----------------------------------------------------------------------------- accumulation

@pytest.mark.parametrize("n", [1, 3])
def test_accumulation_checks_hold(accumulation_runs, n):
    result = accumulation_runs[n]
    assert_checks_hold(result)
    k = accumulation_lab.LAB.params["micro_steps"].default
    assert result.data["counts"] == {"sync_every": k, "no_sync": 1, "big_batch": 1}
    assert max(result.data["max_diff_vs_big"].values()) <= 1e-6
    assert ("grads_local_inside_no_sync" in result.checks) == (n > 1)


def test_accumulation_checks_can_fail(accumulation_runs):
    result = accumulation_runs[3]

    def drifted(ranks):
        for r in ranks:
            r["no_sync"]["params"][0] += 1e-3

    assert_only_these_fail(accumulation_lab, result, drifted, {"no_sync_matches_big_batch"})

    def synced_anyway(ranks):
        for r in ranks:
            r["no_sync"]["all_reduce"] = r["sync_every"]["all_reduce"]

    assert_only_these_fail(accumulation_lab, result, synced_anyway,
                           {"allreduce_saved", "no_sync_same_as_big_batch_count"})

    def already_synced(ranks):
        for r in ranks:
            r["no_sync"]["grad_before_last"] = ranks[0]["no_sync"]["grad_before_last"]

    assert_only_these_fail(accumulation_lab, result, already_synced, {"grads_local_inside_no_sync"})


# ----------------------------------------------------------------------------- uneven

@pytest.mark.parametrize("n", [1, 3])
def test_uneven_checks_hold(uneven_runs, n):
    result = uneven_runs[n]
    assert_checks_hold(result)
    d = result.data
    assert d["counts"] == [4 + 6 * r for r in range(n)]
    assert d["iterations"] == [2 + r for r in range(n)]
    assert len(set(d["join_all_reduce"])) == 1 and d["join_all_reduce"][0] >= max(d["iterations"])
    assert d["max_diff"]["weighted"] <= 1e-6
    if n > 1:
        assert d["max_diff"]["naive"] > 1e-2  # 그래디언트 크기에 맞먹는 차이
        assert "join_divides_by_initial_n" in result.checks
    else:
        assert "naive_differs_from_global" not in result.checks


def test_sample_weights_are_a_mean():
    # 어떤 방법이든 가중치 × Σn의 평균은 1: 평균 그래디언트의 가중치 합이 1이다.
    counts = [4, 10, 16]
    for fix in figures.FIX_LABELS:
        weights = [w for rank in figures.sample_weights(counts, fix) for w in rank]
        assert sum(weights) == pytest.approx(sum(counts))
    assert figures.sample_weights(counts, "naive")[0][0] == pytest.approx(2.5)


def test_uneven_checks_can_fail(uneven_runs):
    result = uneven_runs[3]

    def weighting_forgotten(ranks):
        for r in ranks:
            r["max_diff"]["weighted"] = r["max_diff"]["naive"]

    assert_only_these_fail(uneven_lab, result, weighting_forgotten, {"weighted_matches_global"})

    def naive_happens_to_match(ranks):
        for r in ranks:
            r["max_diff"]["naive"] = 0.0

    assert_only_these_fail(uneven_lab, result, naive_happens_to_match, {"naive_differs_from_global"})

    def rank_stopped_early(ranks):
        ranks[2]["join"]["iterations"] -= 1
        ranks[2]["join"]["all_reduce"] -= 2

    assert_only_these_fail(uneven_lab, result, rank_stopped_early, {"join_finished", "join_same_allreduce_count"})

    def solo_not_divided(ranks):
        ranks[2]["join"]["solo_diff"] = [0.05]

    assert_only_these_fail(uneven_lab, result, solo_not_divided, {"join_divides_by_initial_n"})


def test_uneven_figures(uneven_runs):
    result = uneven_runs[3]
    weights = figures.sample_weight_figure(result.data["counts"], result.data["max_diff"], result.data["pad_vs_full"])
    assert len(weights.layout.updatemenus[0].buttons) == len(figures.FIX_LABELS)
    join = figures.join_timeline_figure(result.ranks)
    assert len(join.data) == 2 * 3
