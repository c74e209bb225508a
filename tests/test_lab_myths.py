"""Chapter 11: the ``myths`` lab on real gloo ranks, its figures and quiz, and its checks failing
when the recorded data is tampered with. Also the chapter 12 self-check box (``labs.checklist``).

The lab runs once per world size (module fixture); the failure tests change copies of the
recorded rank data and call ``summarize`` again, so a claim that stops holding is caught.
"""

from __future__ import annotations

import copy

import pytest
from conftest import assert_checks_hold, assert_only_these_fail, has_hangul, summarize_again

import labs
from labs import checklist, quiz
from labs.errors import LabConfigError
from labs.lessons import myths as myths_lab
from labs.tools.dataparallel import CountingDataParallel
from labs.viz import myths as figures

pytestmark = pytest.mark.timeout(180)

SHORT = {"steps": 30}  # 테스트는 짧게: 30스텝이면 복제본이 충분히 갈라진다


@pytest.fixture(scope="module")
def runs():
    return {n: labs.run("myths", nproc=n, **SHORT) for n in (1, 3, 4)}


# ----------------------------------------------------------------------------- real runs

@pytest.mark.parametrize("n", [1, 3, 4])
def test_all_checks_hold(runs, n):
    result = runs[n]
    assert_checks_hold(result)
    assert result.world_size == n and result.backend == "gloo"
    assert len({r["pid"] for r in result.ranks}) == n


@pytest.mark.parametrize("n", [1, 3, 4])
def test_ddp_holds_everything_fsdp_about_one_nth(runs, n):
    sharding = runs[n].data["sharding"]
    total = sharding["n_params"]
    assert total == 16 * 64 + 64 + 64 * 8 + 8
    ddp, fsdp = sharding["memory"]["ddp"], sharding["memory"]["fsdp"]
    assert [m["numel"] for m in ddp["params"]] == [total] * n
    assert [m["bytes"] for m in ddp["params"]] == [4 * total] * n
    assert sum(m["numel"] for m in fsdp["params"]) == total
    assert max(m["numel"] for m in fsdp["params"]) <= total / n + sharding["slack"]
    ops = {it["op"] for it in sharding["collectives"]["fsdp"]["forward"]}
    assert ops == ({"all_gather"} if n > 1 else set())


@pytest.mark.parametrize("n", [3, 4])
def test_unsynced_replicas_drift_and_lose(runs, n):
    drift = runs[n].data["drift"]
    assert set(drift["drift"]["ddp"]) == {0.0}
    assert drift["drift"]["unsynced"][0] == 0.0  # 같은 점에서 출발한다
    assert drift["drift"]["unsynced"][-1] > myths_lab.DRIFT_THRESHOLD
    assert len(drift["drift"]["unsynced"]) == SHORT["steps"] + 1
    assert drift["ddp_final_loss"] < sum(drift["unsynced_final_losses"]) / n
    assert drift["dataset_size"] == n * 4 * 2


def test_single_rank_has_nothing_to_drift(runs):
    drift = runs[1].data["drift"]
    assert drift["drift"]["unsynced"] == [0.0] * (SHORT["steps"] + 1)
    assert drift["ddp_final_loss"] == pytest.approx(drift["unsynced_final_losses"][0], rel=1e-6)


@pytest.mark.parametrize("n", [1, 3])
def test_process_layout(runs, n):
    dp = runs[n].data["dataparallel"]
    assert len({p["pid"] for p in dp["processes"]}) == n
    assert dp["dp_pid"] == dp["processes"][0]["pid"]
    assert not dp["dataparallel_measured"] and dp["device_ids"] == []  # 이 기계에는 GPU가 없다
    assert dp["calls"] == {"scatter": 0, "replicate": 0, "parallel_apply": 0, "gather": 0}
    assert "dataparallel_replicates_every_step" not in runs[n].checks


def test_parts_run_alone():
    result = labs.run("myths", nproc=2, parts=("drift",), steps=5)
    assert result.ok, result.report()
    assert result.data["parts"] == ["drift"]
    assert all(not name.startswith(("ddp_full", "fsdp", "dataparallel")) for name in result.checks)
    assert result.ranks[0]["sharding"] is None and result.ranks[0]["dataparallel"] is None


@pytest.mark.parametrize("parts", ["", "drift memory"])
def test_bad_parts_refused_before_spawn(parts):
    with pytest.raises(LabConfigError, match="parts"):
        labs.run("myths", nproc=2, parts=parts)


# ----------------------------------------------------------------------------- checks can fail

def test_sharding_checks_fail_when_a_rank_holds_less(runs):
    def tamper(ranks):
        ranks[1]["sharding"]["ddp"]["params"]["numel"] //= 2

    assert_only_these_fail(myths_lab, runs[3], tamper, {"ddp_full_params_every_rank"}, **SHORT)


def test_fsdp_checks_fail_when_shards_overlap(runs):
    def tamper(ranks):  # 랭크 0이 모델 전부를 가진 척: 샤드의 합이 모델보다 크고, 1/N도 아니다
        shard = ranks[0]["sharding"]["fsdp"]
        shard["params"]["numel"] = shard["grads"]["numel"] = ranks[0]["sharding"]["n_params"]

    assert_only_these_fail(myths_lab, runs[3], tamper, {"fsdp_shards_cover_model", "fsdp_per_rank_fraction"}, **SHORT)


def test_drift_checks_fail_when_ddp_replicas_differ(runs):
    def tamper(ranks):
        ranks[2]["drift"]["ddp"]["params"][-1][0] += 1e-3

    assert_only_these_fail(myths_lab, runs[3], tamper, {"ddp_drift_zero"}, **SHORT)


def test_drift_checks_fail_when_unsynced_replicas_stay_together(runs):
    def tamper(ranks):
        for r in ranks:
            r["drift"]["unsynced"] = copy.deepcopy(ranks[0]["drift"]["unsynced"])

    assert_only_these_fail(myths_lab, runs[3], tamper, {"unsynced_drift_grows", "unsynced_replicas_differ"}, **SHORT)


def test_loss_check_fails_when_ddp_is_worse(runs):
    def tamper(ranks):
        for r in ranks:
            r["drift"]["ddp"]["full_loss"][-1] = 10.0

    assert_only_these_fail(myths_lab, runs[3], tamper, {"ddp_not_worse_than_replicas"}, **SHORT)


def test_process_checks_fail_when_ranks_share_a_process(runs):
    def tamper(ranks):
        ranks[1]["dataparallel"]["pid"] = ranks[0]["dataparallel"]["pid"]

    assert_only_these_fail(myths_lab, runs[3], tamper, {"ddp_one_process_per_rank", "ddp_forward_in_own_main_thread"}, **SHORT)


def test_cpu_dataparallel_check_fails_if_it_replicated(runs):
    def tamper(ranks):
        ranks[0]["dataparallel"]["dataparallel"]["calls"]["replicate"] = 1

    assert_only_these_fail(myths_lab, runs[3], tamper, {"dataparallel_cpu_calls_module"}, **SHORT)


def test_gpu_dataparallel_checks_are_made_and_can_fail(runs):
    """With ≥ 2 GPUs the lab adds the replicate/gather/thread checks (summarize logic only)."""
    def as_two_gpus(ranks, replicate_calls):
        dp = ranks[0]["dataparallel"]["dataparallel"]
        dp.update(device_ids=[0, 1], gpus=2,
                  calls={"scatter": 3, "replicate": replicate_calls, "parallel_apply": 3, "gather": 3},
                  forward_where=[[dp["pid"], t] for _ in range(3) for t in (101, 102)])

    ranks = copy.deepcopy(runs[3].ranks)
    as_two_gpus(ranks, 3)
    ok = summarize_again(myths_lab, ranks, "nccl", **SHORT)
    assert ok.checks["dataparallel_replicates_every_step"].ok and ok.checks["dataparallel_threads"].ok
    assert "dataparallel_cpu_calls_module" not in ok.checks and ok.data["dataparallel"]["dataparallel_measured"]
    assert_only_these_fail(myths_lab, runs[3], lambda r: as_two_gpus(r, 1), {"dataparallel_replicates_every_step"}, **SHORT)


# ----------------------------------------------------------------------------- figures and quiz

def test_figures_build_from_a_run(runs):
    result = runs[4]
    memory = figures.memory_figure(result.data["sharding"]["memory"])
    assert len(memory.data) == 6 and all(len(t.x) == 4 for t in memory.data)
    drift = figures.drift_figure(result.data["drift"])
    assert len(drift.data) == 3 + 4
    assert drift.frames and drift.frames[-1].name == str(SHORT["steps"])


def test_tables_show_the_measured_values(runs):
    result = runs[3]
    held = figures.held_table(result).data
    assert f"{result.data['sharding']['n_params']:,}" in held and held.count("<tr>") == 1 + 3
    drift = figures.drift_table(result).data
    assert f"{result.data['drift']['ddp_final_loss']:.4f}" in drift
    processes = figures.process_table(result).data
    assert all(str(p["pid"]) in processes for p in result.data["dataparallel"]["processes"])
    checks = figures.checks_table(result, ["ddp_drift_zero"], "확인").data
    assert result.checks["ddp_drift_zero"].criterion() in checks  # 기준은 확인의 종류대로 적는다


def test_fingerprint_grid_marks_differences():
    def record(r: int, run: str) -> dict:
        second = f"c{r}" if run == "no_sync" and r > 0 else "bbbbbb0"
        return {"fingerprints": ["aaaaaa0", second]}

    ranks = [{"rank": r, **{run: record(r, run) for run, _ in figures.RUN_LABELS}} for r in range(3)]
    fig = figures.fingerprint_grid_figure(ranks)
    assert [list(row) for row in fig.data[0].z] == [[0, 0], [0, 0], [0, 0]]
    no_sync = fig.layout.updatemenus[0].buttons[2].args[0]["z"][0]
    assert no_sync == [[0, 0], [0, 1], [0, 1]]


def test_myth_quiz_quotes_measured_values(runs):
    import types

    forward = types.SimpleNamespace(data={"counts": {"plain": {"forward": [{}, {"broadcast": 2}, {}],
                                                               "backward": [{"all_reduce": 1}] * 3}}})
    update = types.SimpleNamespace(world_size=4, data={"spread": {"sgd": [0.0] * 5, "adam": [0.0] * 5}})
    evidence = figures.myth_evidence(runs[4], forward, update)
    questions = figures.myth_questions(evidence)
    by_id = {q.id.removeprefix("ch11-myth-"): q for q in questions}
    myths = ["sharding", "forward", "different-models", "no-sync", "dataparallel"]
    assert [k for k in by_id if k in myths] == myths  # the chapter's five misconceptions, in its order
    answers = {k: next(c.text for c in q.choices if c.correct) for k, q in by_id.items()}
    assert {k for k, a in answers.items() if a == "오해다"} == set(myths)
    # "always answer 오해" must not win: the true statements are close to half of the quiz
    assert 0.4 <= sum(a == "사실이다" for a in answers.values()) / len(answers) <= 0.6
    for q in questions:
        assert sum(c.correct for c in q.choices) == 1 and has_hangul(q.explanation)
    assert f"{evidence['n_params']:,}" in by_id["sharding"].choices[1].why
    assert f"{evidence['drift_final']:.3f}" in by_id["no-sync"].choices[1].why
    assert evidence["forward_with_comm"] == 1 and evidence["ddp_processes"] == 4
    html = figures.myth_quiz(evidence)
    assert html.count('class="ddp-quiz-q"') == len(questions) and html.count('data-correct="1"') == len(questions)


# ----------------------------------------------------------------------------- 12장 자기 점검 상자

def test_checklist_box_html():
    html = checklist.to_html("dp-idea", "answer-dp-idea")
    assert 'data-item="dp-idea"' in html and 'data-answer="answer-dp-idea"' in html
    assert 'aria-controls="answer-dp-idea"' in html and "<textarea" in html
    assert checklist.STORAGE_KEY in html and "__STORAGE_KEY__" not in html
    assert checklist.STORAGE_KEY != quiz.STORAGE_KEY
    assert "http" not in html  # 오프라인: 외부 주소 없음
    assert checklist.SelfCheck("dp-idea", "answer-dp-idea")._repr_html_() == html


@pytest.mark.parametrize("item", ["Bad Id", "x\"onmouseover", ""])
def test_checklist_refuses_bad_ids(item):
    with pytest.raises(ValueError):
        checklist.to_html(item, "answer-ok")


def test_counting_dataparallel_counts_each_step_part():
    """The counter wraps the methods ``DataParallel.forward`` calls (here called directly: no GPU needed)."""
    import torch

    dp = CountingDataParallel(torch.nn.Linear(2, 2))
    for name in CountingDataParallel.COUNTED:
        try:
            getattr(dp, name)()
        except (TypeError, AttributeError):
            pass  # 인자가 없어 실패해도 호출 자체는 세어졌어야 한다
    assert dp.calls == dict.fromkeys(CountingDataParallel.COUNTED, 1)
