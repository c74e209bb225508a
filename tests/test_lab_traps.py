"""Chapter 10: every trap's bug really shows its symptom on real gloo ranks, every fix really repairs it,
and each check fails when fed the other variant's records (a real wrong behaviour, not an edited number).

The bug runs are the ones the chapter makes: a hang is ended by the launcher's short timeout, an error
or a killed rank is caught by ``observe()``; the assertions are on what PyTorch really did.
"""

from __future__ import annotations

import copy
import inspect
from typing import TypedDict

import pytest

import labs
from labs.cli import EXIT_BAD_INPUT, main
from labs.ddp.traps import learning_rate_bug, learning_rate_fix
from labs.errors import LabCheckFailed, LabConfigError
from labs.lessons import traps
from labs.lessons.traps import checkpointing, partial_collective, unused
from labs.outcome import exception_message
from labs.tools.primitives import max_abs_diff

pytestmark = pytest.mark.timeout(300)


def run(trap: str, variant: str, nproc: int = 2, **params):
    return labs.run("traps", nproc=nproc, trap=trap, variant=variant, **params)


def inner(result) -> list[dict]:
    """The ranks' own measurements, as each trap's summary function takes them."""
    return [r["measured"] for r in result.ranks]


def failing(summary) -> set[str]:
    return {c.name for c in summary.checks if not c.ok}


@pytest.fixture(scope="module")
def no_sync_runs():
    return {v: run("no_sync", v) for v in traps.VARIANTS}


@pytest.fixture(scope="module")
def unused_runs():
    return {v: run("unused", v) for v in traps.VARIANTS}


@pytest.fixture(scope="module")
def epoch_runs():
    return {v: run("set_epoch", v) for v in traps.VARIANTS}


@pytest.fixture(scope="module")
def seed_runs():
    return {v: run("seed", v) for v in traps.VARIANTS}


@pytest.fixture(scope="module")
def lr_runs():
    return {v: run("lr_scaling", v) for v in traps.VARIANTS}


# ----------------------------------------------------------------------------- 1. no_sync

def test_no_sync_bug_syncs_every_micro_step(no_sync_runs):
    bug, fix = no_sync_runs["bug"], no_sync_runs["fix"]
    assert bug.ok, bug.report()
    assert fix.ok, fix.report()
    assert bug.data["measured"]["all_reduce_per_micro_step"] == [1, 1, 1, 1]  # tiny_mlp: 버킷 하나
    assert fix.data["measured"]["all_reduce_per_micro_step"] == [0, 0, 0, 1]
    # 통신 횟수만 다르고 결과는 같다: 두 실행의 최종 파라미터가 같다 (독립된 두 실행의 비교)
    assert max_abs_diff(bug.ranks[0]["measured"]["params"], fix.ranks[0]["measured"]["params"]) < 1e-6


def test_no_sync_checks_catch_the_other_variant(no_sync_runs):
    p = no_sync_runs["bug"].params
    bug, fix = inner(no_sync_runs["bug"]), inner(no_sync_runs["fix"])
    assert failing(traps.trap_summary("no_sync", bug, "fix", p)) == {"synced_micro_steps", "first_grad_still_local"}
    assert failing(traps.trap_summary("no_sync", fix, "bug", p)) == {"synced_micro_steps",
                                                                     "first_grad_already_averaged"}


# ----------------------------------------------------------------------------- 2. unused parameter

def test_unused_bug_raises_the_reducer_error_after_a_silent_first_step(unused_runs):
    bug = unused_runs["bug"]
    assert bug.ok, bug.report()
    assert bug.data["measured"]["error"].startswith(unused.PHRASE)
    assert "Parameter indices which did not receive grad for rank 0: 4 5" in bug.data["measured"]["error"]  # aux_head
    assert bug.data["measured"]["first_step_all_reduce"] == 0


def test_unused_fix_counts_the_extra_all_reduce(unused_runs):
    fix = unused_runs["fix"]
    assert fix.ok, fix.report()
    rows = fix.data["measured"]["rows"]
    assert rows["find_unused_parameters"]["all_reduce_per_step"] == [2, 2, 2]
    assert rows["static_graph"]["all_reduce_per_step"][1:] == [1, 1]
    assert fix.data["measured"]["n_param_tensors"] == 6


def test_unused_checks_fail_on_a_broken_record(unused_runs):
    bug, fix = copy.deepcopy(inner(unused_runs["bug"])), copy.deepcopy(inner(unused_runs["fix"]))
    for r in bug:  # 예외가 나지 않았고 복제본이 같았다면
        r["runs"]["default"]["error"] = ""
        r["runs"]["default"]["params_after_first"] = bug[0]["runs"]["default"]["params_after_first"]
    assert failing(traps.trap_summary("unused", bug, "bug", unused_runs["bug"].params)) == {"reducer_error",
                                                                                            "replicas_drift_silently"}
    for r in fix:  # 추가 All-Reduce가 없었다면
        for step in r["runs"]["find_unused_parameters"]["log"]:
            step["items"] = [i for i in step["items"] if i["dtype"] != "int32"]
    assert "find_unused_extra_all_reduce" in failing(traps.trap_summary("unused", fix, "fix",
                                                                        unused_runs["fix"].params))


# ----------------------------------------------------------------------------- 3. evaluation on rank 0 only

def test_eval_rank0_bug_hangs_and_names_each_rank(no_leftover_children):
    bug = traps.observe("eval_rank0", "bug")
    assert bug.ok, bug.report()
    assert bug.data["measured"]["kind"] == "hang"
    assert sorted(bug.data["measured"]["where"]) == [0, 1]
    assert "eval_rank0_bug" in bug.data["measured"]["where"][1]  # 랭크 1은 barrier 줄에서 기다린다
    assert f"제한 시간 {traps.HANG_TIMEOUT:g}초" in bug.data["measured"]["message"]
    no_leftover_children()


def test_eval_rank0_fix_two_ways_agree():
    fix = run("eval_rank0", "fix")
    assert fix.ok, fix.report()
    assert abs(fix.data["measured"]["module_loss"] - fix.data["measured"]["all_ranks_loss"]) < 1e-6


# ----------------------------------------------------------------------------- 4. set_epoch

def test_set_epoch(epoch_runs):
    bug, fix = epoch_runs["bug"], epoch_runs["fix"]
    assert bug.ok and fix.ok, bug.report() + fix.report()
    assert bug.data["measured"]["repeated_global_batches"] == bug.data["measured"]["compared_global_batches"] > 0
    assert fix.data["measured"]["repeated_global_batches"] < fix.data["measured"]["compared_global_batches"]
    assert failing(traps.trap_summary("set_epoch", inner(bug), "fix", bug.params)) == {"distinct_epoch_orders"}
    assert failing(traps.trap_summary("set_epoch", inner(fix), "bug", fix.params)) == {"distinct_epoch_orders"}


# ----------------------------------------------------------------------------- 5. a collective only rank 0 calls

def test_partial_collective_bug_plain_and_detail(no_leftover_children):
    plain = traps.observe("partial_collective", "bug")
    [detail] = traps.observe_isolated("partial_collective", "bug")
    assert plain.ok, plain.report()
    assert detail.ok, detail.report()
    assert plain.data["measured"]["kind"] == "crash" and plain.data["measured"]["exitcode"] == -6  # gloo이 C++ 예외로 abort
    assert "Is there a distributed collective mismatch in your code?" in plain.data["measured"]["stderr"]
    assert detail.data["measured"]["kind"] == "error"
    assert "TensorShape=[2]" in detail.data["measured"]["message"] or "TensorShape=[8, 4]" in detail.data["measured"]["message"]
    no_leftover_children()


def test_partial_collective_fix():
    fix = run("partial_collective", "fix")
    assert fix.ok, fix.report()
    assert all(v is not None for v in fix.data["measured"]["logged"])


# ----------------------------------------------------------------------------- 6. different models

def test_shape_bug_error_and_fix():
    bug = traps.observe("shape", "bug")
    assert bug.ok, bug.report()
    assert bug.data["measured"]["rank"] == 1 and "sizes [9, 4]" in bug.data["measured"]["message"]
    fix = run("shape", "fix")
    assert fix.ok, fix.report()


def test_outcome_checks_fail_when_the_bug_stops_failing():
    # PyTorch가 버그를 더는 멈추거나 거부하지 않는다면: 결과 종류 확인이 실패한다
    for trap in ("shape", "eval_rank0"):
        checks = traps.outcome_checks(trap, {"kind": "ok"}, "gloo")
        assert not checks[0].ok
    detail = traps.outcome_checks("partial_collective", {"kind": "error", "message": "other", "debug": "DETAIL"}, "gloo")
    assert [c.ok for c in detail] == [True, False, False]
    plain = traps.outcome_checks("partial_collective", {"kind": "crash", "stderr": ""}, "gloo")
    assert [c.ok for c in plain] == [True, False]
    hang = traps.outcome_checks("eval_rank0", {"kind": "hang", "where": {0: "집합 통신 밖에서 멈춤 (x)", 1: "집합 통신에서 …"}},
                                "gloo")
    assert [c.ok for c in hang] == [True, False]


def test_detail_reading_order_is_what_10_5_reads():
    # 10.5절의 읽는 법: 예외를 낸 랭크의 지문, 다른 랭크의 지문, 다른 점. 문장이 달라지면 확인이 실패한다
    fp = "Rank {} is running collective: CollectiveFingerPrint(SequenceNumber={}, OpType={})"
    message = (f"{partial_collective.MISMATCH_PHRASE}. {fp.format(1, 4, 'ALLREDUCE')}, but {fp.format(0, 0, 'GATHER')}."
               f"{partial_collective.DIFFER_PHRASE}: Sequence number: 4vs 0")
    read = lambda m, rank: traps.outcome_checks(  # noqa: E731
        "partial_collective", {"kind": "error", "message": m, "debug": "DETAIL", "rank": rank}, "gloo")[2]
    assert read(message, 1).ok
    assert not read(message, 0).ok  # 예외를 낸 랭크의 지문이 먼저가 아니다
    assert not read(message.replace(partial_collective.DIFFER_PHRASE, "x"), 1).ok  # 다른 점을 적은 줄이 없다
    assert not read(message.replace("Rank 0 is", "Rank 1 is"), 1).ok  # 상대 랭크의 지문이 없다


def test_the_peer_line_of_another_length_is_read_as_its_length():
    # 10.5절: 길이가 다른 상대 지문은 길이 k를 OpType(k)로 읽은 것(ProcessGroupWrapper.cpp), 순번 0·모양 없음
    from labs.viz import traps as figures

    own = {"rank": 0, "seq": 4, "op": "ALLREDUCE", "shapes": ["[2]"]}
    assert figures.length_artifact({"rank": 1, "seq": 0, "op": "SCATTER", "shapes": []})
    assert figures.OP_TYPES.index("SCATTER") == 8 and figures.OP_TYPES.index("GATHER") == 7  # Work.hpp
    assert not figures.length_artifact(own)
    assert not figures.length_artifact({"rank": 1, "seq": 3, "op": "ALLREDUCE", "shapes": ["[8, 4]"]})


# ----------------------------------------------------------------------------- 9. activation checkpointing

@pytest.fixture(scope="module")
def checkpointing_runs():
    return {v: run("checkpointing", v) for v in traps.VARIANTS}


def test_reentrant_checkpointing_marks_a_shared_parameter_ready_twice(checkpointing_runs):
    bug = checkpointing_runs["bug"]
    assert bug.ok, bug.report()
    assert bug.data["measured"]["error"].startswith(checkpointing.PHRASE)


def test_both_checkpointing_fixes_train_like_one_process(checkpointing_runs):
    fix = checkpointing_runs["fix"]
    assert fix.ok, fix.report()
    assert set(fix.data["measured"]["rows"]) == {"non_reentrant", "static_graph"}


def test_checkpointing_checks_fail_on_the_other_variant(checkpointing_runs):
    bug, fix = inner(checkpointing_runs["bug"]), inner(checkpointing_runs["fix"])
    params = checkpointing_runs["fix"].params
    as_fix = [{**r, "runs": {"non_reentrant": r["runs"]["reentrant"], "static_graph": r["runs"]["reentrant"]}}
              for r in bug]  # 재진입 체크포인트를 고침이라고 내밀면
    assert {"non_reentrant_trains", "static_graph_trains", "non_reentrant_matches_single",
            "static_graph_matches_single"} <= failing(traps.trap_summary("checkpointing", as_fix, "fix", params))
    as_bug = [{**r, "runs": {"reentrant": r["runs"]["non_reentrant"]}} for r in fix]
    assert failing(traps.trap_summary("checkpointing", as_bug, "bug", params)) == {"reducer_ready_twice", "no_step_done"}


# ----------------------------------------------------------------------------- 7. lr scaling

def test_lr_scaling(lr_runs):
    bug, fix = lr_runs["bug"], lr_runs["fix"]
    assert bug.ok and fix.ok, bug.report() + fix.report()
    assert bug.data["measured"]["baseline"] == fix.data["measured"]["baseline"]  # 같은 기준 학습
    assert failing(traps.trap_summary("lr_scaling", inner(bug), "fix", bug.params)) == {"final_loss_vs_single"}
    assert failing(traps.trap_summary("lr_scaling", inner(fix), "bug", fix.params)) == {"final_loss_vs_single"}


def test_learning_rate_schedule():
    assert learning_rate_bug(0.1, 4, 0, 4) == 0.1
    assert [round(learning_rate_fix(0.1, 4, s, 4), 6) for s in range(6)] == [0.175, 0.25, 0.325, 0.4, 0.4, 0.4]


# ----------------------------------------------------------------------------- 8. seeds

def test_seed(seed_runs):
    bug, fix = seed_runs["bug"], seed_runs["fix"]
    assert bug.ok and fix.ok, bug.report() + fix.report()
    b = bug.params["per_rank_batch"]
    assert set(bug.data["measured"]["distinct_masks"]) == {b}
    assert failing(traps.trap_summary("seed", inner(bug), "fix", bug.params)) == {"distinct_masks_in_global_batch",
                                                                                  "identical_noise_ranks"}
    assert failing(traps.trap_summary("seed", inner(fix), "bug", fix.params)) == {"distinct_masks_in_global_batch",
                                                                                  "identical_noise_ranks"}


# ----------------------------------------------------------------------------- engine edges

def test_each_trap_declares_only_the_parameters_its_rank_function_reads():
    # 함정마다 모듈 하나: 그 랭크 함수가 받는 인자(키워드 전용)가 곧 그 함정의 인자다. 나머지(trap, variant, stderr_dir)는 모든 함정의 것
    lab = traps.LAB
    assert set(lab.params) == {"trap", "variant", "stderr_dir"} and lab.case_key == "trap"
    assert list(lab.cases) == list(traps.TRAPS) == list(lab.params["trap"].options)
    for name, module in traps.TRAPS.items():
        reads = {p.name for p in inspect.signature(module.rank_fn).parameters.values() if p.kind is p.KEYWORD_ONLY}
        assert reads == set(module.PARAMS), name
        assert lab.cases[name].params == module.PARAMS and lab.cases[name].validate is getattr(module, "validate", None)
        assert set(module.RECORDS) == set(module.DATA) == set(traps.VARIANTS), name
        assert hasattr(module, "outcome_checks") == hasattr(module, "BUG_OUTCOME") == ((name, "bug") in traps.EXPECTED)


class Reads(dict):
    """A parameter dict that notes which keys a summary read."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


def test_each_summary_reads_only_its_trap_parameters(no_sync_runs, unused_runs, epoch_runs, seed_runs, lr_runs,
                                                     checkpointing_runs):
    for runs in (no_sync_runs, unused_runs, epoch_runs, seed_runs, lr_runs, checkpointing_runs):
        for result in runs.values():
            trap = result.params["trap"]
            params = Reads(result.params)
            summary = traps.trap_summary(trap, inner(result), result.params["variant"], params)
            assert {c.name for c in summary.checks} == set(result.checks)
            assert params.read <= set(traps.TRAPS[trap].PARAMS), (trap, params.read)


@pytest.mark.parametrize("pairs, unknown", [(["trap=shape", "steps=3"], "steps"),
                                            (["micro_steps=8", "trap=set_epoch"], "micro_steps"),
                                            (["epochs=3"], "epochs")])  # trap을 주지 않으면 기본값 no_sync의 인자
def test_a_parameter_another_trap_reads_is_refused_before_any_rank_starts(no_spawn, capsys, pairs, unknown):
    code = main(["run", "traps", "--nproc", "2", *[arg for pair in pairs for arg in ("--param", pair)]])
    err = capsys.readouterr().err
    trap = next((p.split("=")[1] for p in pairs if p.startswith("trap=")), "no_sync")
    assert code == EXIT_BAD_INPUT and "Traceback" not in err, err
    assert f"실습 'traps'의 trap={trap}에 없는 인자입니다: {unknown}." in err, err
    assert "쓸 수 있는 인자:" in err and "stderr_dir" in err
    with pytest.raises(LabConfigError, match=f"trap={trap}에 없는 인자입니다: {unknown}"):
        labs.run("traps", nproc=2, **dict(p.split("=") for p in pairs))
    assert traps.LAB.parse_params(["micro_steps=8", "trap=no_sync"]) == {"micro_steps": 8, "trap": "no_sync"}


def test_a_trap_summary_with_undeclared_keys_fails_naming_the_trap(monkeypatch):
    class Other(TypedDict):
        something: int

    ranks = [{"before": [0.0], "after": [0.0]}, {"before": [1.0], "after": [0.0]}]
    assert traps.trap_summary("shape", ranks, "fix", {}).data == {}
    monkeypatch.setitem(traps.TRAPS["shape"].DATA, "fix", Other)
    with pytest.raises(TypeError, match="traps/shape.*missing \\['something'\\]"):
        traps.trap_summary("shape", ranks, "fix", {})


def test_bad_trap_name_is_refused_before_spawning():
    with pytest.raises(LabConfigError, match="trap"):
        labs.run("traps", nproc=2, trap="nope")


def test_exception_message_takes_the_exception_text():
    tb = ('Traceback (most recent call last):\n  File "x.py", line 1, in f\n    g()\n'
          "RuntimeError: first line: detail\nsecond line\n")
    assert exception_message(tb) == "first line: detail\nsecond line"


def test_a_failed_outcome_raises_on_assert_ok():
    params = traps.LAB.resolve_params({"trap": "shape", "variant": "bug"}, 2)
    result = traps.LAB.finish_outcome({"kind": "ok"}, 2, "gloo", params)
    assert (result.world_size, result.ranks, result.data["measured"]) == (2, [], {"kind": "ok"})
    with pytest.raises(LabCheckFailed):
        result.assert_ok()


def test_too_few_samples_for_the_global_batch_is_refused():
    with pytest.raises(LabConfigError, match="samples"):
        labs.run("traps", nproc=4, trap="lr_scaling", samples=8)


def test_a_rank_inside_ddp_forward_is_reported_in_a_collective():
    # DDP의 버퍼 broadcast와 버킷 재구성은 C++에서 시작해 파이썬 c10d 프레임이 없다: DDP 순전파 프레임으로 알아본다.
    from labs.stacks import describe_faulthandler

    stack = ('Thread 0x1 (most recent call first):\n'
             '  File "/v/torch/nn/parallel/distributed.py", line 2420 in _sync_buffers\n'
             '  File "/v/torch/nn/parallel/distributed.py", line 1790 in _pre_forward\n'
             '  File "/w/labs/lessons/traps/common.py", line 26 in loss_of\n')
    assert describe_faulthandler(stack).startswith("집합 통신에서")
    assert describe_faulthandler(stack.replace("nn/parallel/distributed.py", "nn/modules/linear.py")).startswith("집합 통신 밖")
