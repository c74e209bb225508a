"""`labs doctor` on its gallery (tests/doctor_scripts/): real training scripts in different styles, run unchanged
on two CPU ranks. Correct ones pass with no finding; each broken one is diagnosed with the real cause at the
line its `# doctor: KIND` comment marks, and nothing else; a script that fails by itself exits 3 at its line.

What the doctor compares is independent of the doctor: the ranks' own parameter fingerprints, the samples
their DataLoaders really yielded, the collectives they really called, the paths they really wrote, the
GradScaler's own state and the All-Reduces the process group really ran (the profiler), so each broken
script below is a real wrong behaviour caught, not an edited number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labs import recipe
from labs.doctor import FINDING_KINDS, DoctorReport, Finding, examine
from labs.errors import EXIT_CHECK_FAILED, EXIT_LAB_ERROR, EXIT_OK

pytestmark = pytest.mark.real_ranks  # the rehearsals really run: never a recorded one (labs/replay.py)

GALLERY = Path(__file__).resolve().parent / "doctor_scripts"
MARK = re.compile(r"# doctor: (\w+)")
HANG_TIMEOUT = 45.0  # the scripts that hang: the doctor ends them (a deadlock it sees at once, the rest at the deadline)
SCRIPTS = sorted(p.name for p in GALLERY.glob("*.py"))
_runs: dict[str, DoctorReport] = {}


def marks(name: str) -> list[tuple[str, int]]:
    """The (kind, line) pairs the script's `# doctor: KIND` comments mark."""
    lines = (GALLERY / name).read_text(encoding="utf-8").splitlines()
    return [(m[1], number) for number, line in enumerate(lines, 1) if (m := MARK.search(line))]


def doctor(name: str, tmp_path_factory: pytest.TempPathFactory) -> DoctorReport:
    """The doctor's report on gallery script ``name`` (run once per test session, in a fresh folder)."""
    if name not in _runs:
        _runs[name] = examine(GALLERY / name, nproc=2, timeout=HANG_TIMEOUT, cwd=tmp_path_factory.mktemp(name[:-3]))
    return _runs[name]


def found(report: DoctorReport, kind: str) -> Finding:
    return next(f for f in report.findings if f["kind"] == kind)


def test_the_gallery_has_ten_scripts_or_more_of_each_outcome():
    kinds = {k for name in SCRIPTS for k, _ in marks(name)} - {"failure"}
    assert len([s for s in SCRIPTS if s.startswith("ok_")]) >= 5
    assert len([s for s in SCRIPTS if s.startswith("bug_")]) >= 10
    assert kinds <= set(FINDING_KINDS), kinds - set(FINDING_KINDS)
    assert len(kinds) >= 10, "갤러리가 발견의 종류를 10개 이상 보여야 합니다"
    for name in SCRIPTS:
        assert name.startswith("ok_") != bool(marks(name)), f"{name}: ok_는 표시가 없고, 나머지는 표시가 있어야 합니다"


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s.startswith("ok_")])
def test_a_correct_script_has_no_finding(name, tmp_path_factory):
    report = doctor(name, tmp_path_factory)
    assert report.exit_code == EXIT_OK, report.report()
    assert report.findings == [] and report.failure is None
    assert report.summary["steps"] > 0 and report.summary["ddp"], "학습하지 않은 실행은 통과로 치지 않습니다"
    assert report.report().startswith("labs doctor:") and "발견한 문제 없음" in report.report()


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s.startswith("bug_")])
def test_a_broken_script_is_found_at_its_line(name, tmp_path_factory):
    report = doctor(name, tmp_path_factory)
    expected = marks(name)
    assert report.exit_code == EXIT_CHECK_FAILED, report.report()
    got = [(f["kind"], f["site"]["line"] if f["site"] else None) for f in report.findings]
    assert sorted(got) == sorted(expected), report.report()
    for f in report.findings:
        assert f["site"] is not None and f["site"]["file"].endswith(name)
        assert MARK.search(f["site"]["code"]), f"보고한 줄의 코드가 표시한 줄이 아닙니다: {f['site']}"
        assert f["title"] and f["measured"] and f["fix"]
    assert all(f"({kind})" in report.report() for kind, _ in expected)


@pytest.mark.parametrize("name", [s for s in SCRIPTS if s.startswith("fail_")])
def test_a_script_that_fails_by_itself_exits_3_at_its_line(name, tmp_path_factory):
    report = doctor(name, tmp_path_factory)
    (_, line), = marks(name)
    assert report.exit_code == EXIT_LAB_ERROR, report.report()
    assert report.failure is not None and report.failure["explained_by"] == ""
    assert report.failure["site"] is not None and report.failure["site"]["line"] == line
    text = report.report()
    assert f"{name}:{line}" in text and report.failure["type"] in text
    assert "labs/doctor/rank" not in report.failure["text"], "traceback은 읽는 사람의 파일에서 시작해야 합니다"


def test_a_cuda_call_without_a_cpu_stand_in_names_its_line(tmp_path_factory):
    report = doctor("fail_cuda_only.py", tmp_path_factory)
    assert report.failure is not None and report.failure["kind"] == "cuda"
    assert "GPU 없이 대신할 수 없습니다" in report.report() and "is_available" in report.report()


def test_three_ranks(tmp_path_factory):
    report = examine(GALLERY / "ok_main_accumulate.py", nproc=3, cwd=tmp_path_factory.mktemp("three"))
    assert report.exit_code == EXIT_OK, report.report()
    s = report.summary
    assert (s["world_size"], s["batch_per_rank"], s["accumulation"], s["global_batch"]) == (3, 4, 2, 24)
    broken = examine(GALLERY / "bug_no_sampler.py", nproc=3, steps=4, cwd=tmp_path_factory.mktemp("three_bug"))
    assert broken.kinds == ["data_overlap"] and broken.findings[0]["data"]["overlap"] == 32  # 4 steps × 8 samples


# What each finding measured: the values come from the ranks, and each says what really went wrong.

def test_no_sampler_means_both_ranks_see_the_whole_dataset(tmp_path_factory):
    data = found(doctor("bug_no_sampler.py", tmp_path_factory), "data_overlap")["data"]
    assert data["sampler"] == "RandomSampler" and data["method"] == "index"
    assert data["overlap"] == data["seen"] == 64  # the whole dataset on both ranks, in the first epoch


def test_single_device_script_trains_the_same_data_twice(tmp_path_factory):
    data = found(doctor("bug_single_device.py", tmp_path_factory), "data_overlap")["data"]
    assert data["overlap"] == data["seen"] == 48


def test_missing_set_epoch_repeats_the_order(tmp_path_factory):
    data = found(doctor("bug_no_set_epoch.py", tmp_path_factory), "same_order")["data"]
    assert data["sampler_epoch"] == 0 and data["compared"] == 24  # 48 samples / 2 ranks, in the same order twice


def test_no_ddp_drifts_at_the_first_step_by_its_gradients(tmp_path_factory):
    data = found(doctor("bug_no_ddp.py", tmp_path_factory), "replicas_differ")["data"]
    assert data["step"] == 1 and data["cause"] == "gradients"
    assert len(set(data["sums"])) == 2  # the two ranks' parameter sums after step 1


def test_a_rank_0_only_load_drifts_before_the_first_step(tmp_path_factory):
    data = found(doctor("bug_rank0_loads.py", tmp_path_factory), "replicas_differ")["data"]
    assert data["step"] == 1 and data["cause"] == "before"


def test_flag_after_forward_leaves_the_last_micro_step_unsynced(tmp_path_factory):
    data = found(doctor("bug_flag_after_forward.py", tmp_path_factory), "unsynced_step")["data"]
    assert (data["microsteps"], data["synced"], data["step"]) == (2, 1, 1)


def test_accumulation_without_no_sync_all_reduces_every_micro_step(tmp_path_factory):
    report = doctor("bug_accumulate_every_step.py", tmp_path_factory)
    data = found(report, "accumulation_sync")["data"]
    assert data["microsteps"] == 4
    assert data["all_reduce"] == 4  # what the process group really ran in one step (the profiler): 4, not 1
    good = doctor("ok_main_accumulate.py", tmp_path_factory).summary
    assert good["accumulation"] == 2 and good["collectives_per_step"] == {"all_reduce": 1}


def test_clipping_before_unscale_sees_the_scaled_gradients(tmp_path_factory):
    data = found(doctor("bug_clip_before_unscale.py", tmp_path_factory), "clip_scaled")["data"]
    assert data["scale"] == 65536.0 and data["norm"] > 1000  # a norm of scaled gradients


def test_unused_parameters_are_named(tmp_path_factory):
    report = doctor("bug_unused_head.py", tmp_path_factory)
    assert found(report, "unused_parameters")["data"]["parameters"] == ["regress.weight", "regress.bias"]
    assert report.failure is not None and report.failure["explained_by"] == "unused_parameters"


def test_every_rank_writing_one_file_names_each_rank(tmp_path_factory):
    f = found(doctor("bug_every_rank_saves.py", tmp_path_factory), "same_file")
    assert [line["rank"] for line in f["lines"]] == [0, 1] and f["data"]["path"].endswith("checkpoint.pt")


def test_ranks_on_one_gpu(tmp_path_factory):
    report = doctor("bug_shared_gpu.py", tmp_path_factory)
    assert found(report, "shared_gpu")["data"]["index"] == 0
    assert {m["what"] for m in report.mappings} >= {"backend", ".cuda()"}


def test_a_collective_in_if_rank_0_names_each_ranks_line(tmp_path_factory):
    f = found(doctor("bug_rank0_collective.py", tmp_path_factory), "collective_mismatch")
    by_rank = {line["rank"]: line for line in f["lines"]}
    assert "all_reduce" in by_rank[0]["what"] and by_rank[0]["site"]["line"] == 21
    assert "All-Reduce" in by_rank[1]["what"] and by_rank[1]["site"]["line"] == 15  # DDP's backward of the next step


def test_a_deadlock_is_ended_as_soon_as_every_rank_waits(tmp_path_factory):
    report = doctor("bug_broadcast_in_if.py", tmp_path_factory)
    f = found(report, "collective_mismatch")
    assert f["data"]["deadlock_after"] is not None and not f["data"]["timed_out"]
    assert report.wall_seconds < HANG_TIMEOUT
    first = {r: next(line for line in f["lines"] if line["rank"] == r) for r in (0, 1)}
    assert {r: line["site"]["line"] for r, line in first.items()} == {0: 12, 1: 19}  # rank 1 is in DDP's constructor
    assert all(line["site"] is not None for line in f["lines"])


def test_a_hang_outside_collectives_ends_at_the_deadline_with_each_ranks_line(tmp_path_factory):
    report = doctor("bug_wait_for_file.py", tmp_path_factory)
    f = found(report, "collective_mismatch")
    assert f["data"]["timed_out"] and f["data"]["culprit"] == 1
    assert report.failure is not None and report.failure["kind"] == "timeout"
    assert report.wall_seconds < HANG_TIMEOUT + 15
    lines = {line["rank"]: line for line in f["lines"]}
    assert lines[0]["site"]["line"] == 16 and "기다리다 멈춤" in lines[0]["what"]  # rank 0 in the All-Reduce
    assert lines[1]["site"]["line"] == 14 and "밖" in lines[1]["what"]  # rank 1 polling for the file


def test_the_summary_counts_b_n_k(tmp_path_factory):
    s = doctor("ok_plain.py", tmp_path_factory).summary
    assert (s["world_size"], s["batch_per_rank"], s["accumulation"], s["global_batch"]) == (2, 8, 1, 16)
    assert s["steps"] == 12 and s["backend"] == "gloo"  # 96 samples / 2 ranks / 8 per batch, 2 epochs
    assert s["collectives_per_step"] == {"all_reduce": 1} and s["seconds_per_step"] > 0


@pytest.mark.parametrize("case", [c for c in recipe.DOCTOR_CASES if not c.name.endswith(".py")],
                         ids=lambda c: c.name or "recipe")
def test_the_recipe_has_no_finding_and_each_broken_variant_is_found_at_its_line(case, tmp_path):
    """Chapter 14.6's recipe cases: the copyable recipe passes; each one-line edit of it is named where it was made."""
    folder, report = recipe.doctor_case(tmp_path, case)
    if not case.kind:
        assert report.exit_code == EXIT_OK and not report.findings, report.report()
        return
    assert report.exit_code == EXIT_CHECK_FAILED and report.kinds == [case.kind], report.report()
    assert report.findings[0]["site"]["line"] == case.expected_line(folder), report.report()
