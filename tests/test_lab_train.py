"""Chapter 6: the real training script on N ranks, its one-process reference, checkpoint and resume.

Every run here is a real gloo process group (``labs.run``), or the script itself in a subprocess.
The tamper tests feed ``summarize``/``compare_runs`` altered records to show each claim can fail.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from conftest import assert_checks_hold, clean_env, has_hangul, summarize_again

import labs
import labs.ddp.train_script as script
import labs.launch
from labs.context import RankContext
from labs.lessons import train as train_lab
from labs.lessons.train import compare_runs
from labs.tools import checkpoint_folder

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parent.parent
DEFAULTS = labs.get_lab("train").resolve_params({}, 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The chapter's runs at N=4 (uninterrupted, failed at epoch 3, resumed) and the same at N=2."""
    out = {}
    for n in (4, 2):
        ckpt = tmp_path_factory.mktemp(f"ckpt{n}")
        out[n] = {"full": labs.run("train", nproc=n)}
        with pytest.raises(labs.RankFailedError) as info:
            labs.run("train", nproc=n, ckpt_dir=str(ckpt), fail_at_epoch=3)
        out[n]["failure"] = info.value
        out[n]["resumed"] = labs.run("train", nproc=n, ckpt_dir=str(ckpt))
    return out


def _assert_training_ok(result, n: int) -> None:
    assert_checks_hold(result)
    assert result.world_size == n and len(result.ranks) == n
    assert len({r["pid"] for r in result.ranks}) == n
    assert result.data["per_rank_batch"] == DEFAULTS["global_batch"] // n
    history = result.data["summary"]["history"]
    assert [h["epoch"] for h in history] == list(range(1, DEFAULTS["epochs"] + 1))
    assert history[-1]["loss"] < history[0]["loss"] / 10, "the loss must fall while training"
    assert history[-1]["correct"] / history[-1]["total"] >= 0.9
    assert result.checks["set_epoch_reshuffles"].value == DEFAULTS["epochs"]
    assert result.checks["no_set_epoch_repeats"].value == 1
    assert result.checks["replicas_identical_at_end"].value == 1


@pytest.mark.parametrize("n", [1, 3])
def test_train_lab_matches_one_process(n):
    result = labs.run("train", nproc=n)
    _assert_training_ok(result, n)
    diff = result.checks["ddp_equals_single_process"]
    if n == 1:  # one rank: the same additions in the same order as the reference
        assert diff.value == 0.0
    else:
        assert 0.0 <= diff.value < diff.tolerance / 10
    assert result.checks["test_accuracy_equal"].value == 0


def test_chapter_run_and_resume_at_four_ranks(runs):
    full, failure, resumed = runs[4]["full"], runs[4]["failure"], runs[4]["resumed"]
    _assert_training_ok(full, 4)
    assert failure.rank == 3
    assert "InjectedFault" in str(failure) and has_hangul(str(failure))
    assert resumed.ok, resumed.report()
    assert resumed.data["summary"]["resumed_from"] == 2
    assert sorted(resumed.ranks[0]["orders"]) == [3, 4, 5, 6]  # only the epochs trained after the restart
    comparison = compare_runs(resumed.data["summary"], full.data["summary"], 3, resumed.backend)
    assert comparison.ok, comparison.report()
    assert comparison.checks["same_final_parameters"].tolerance > 0  # N ≥ 3: float32 tolerance


def test_resume_is_bitwise_at_two_ranks(runs):
    full, resumed = runs[2]["full"], runs[2]["resumed"]
    assert runs[2]["failure"].rank == 1
    comparison = compare_runs(resumed.data["summary"], full.data["summary"], 3, resumed.backend)
    assert comparison.ok, comparison.report()
    assert comparison.checks["same_final_parameters"].tolerance == 0.0
    assert comparison.data["bitwise"]
    assert resumed.data["summary"]["fingerprint"] == full.data["summary"]["fingerprint"]


# ----------------------------------------------------------------------------- the checks can fail

def test_tampered_records_fail_their_checks(runs):
    full = runs[4]["full"]
    ranks = copy.deepcopy(full.ranks)
    ranks[0]["params"][0] += 1e-3  # DDP 결과가 기준 학습과 어긋난 것처럼
    assert not summarize_again(train_lab, ranks, "gloo").checks["ddp_equals_single_process"].ok

    ranks = copy.deepcopy(full.ranks)
    ranks[1]["fingerprint"] = "000000000000"
    assert not summarize_again(train_lab, ranks, "gloo").checks["replicas_identical_at_end"].ok

    ranks = copy.deepcopy(full.ranks)
    for epoch in ranks[2]["orders"]:  # set_epoch를 잊은 것처럼: 모든 에폭이 에폭 1의 순서
        ranks[2]["orders"][epoch] = list(ranks[2]["orders"][1])
    result = summarize_again(train_lab, ranks, "gloo")
    assert not result.checks["set_epoch_reshuffles"].ok
    assert not result.checks["reference_same_samples"].ok

    ranks = copy.deepcopy(full.ranks)
    ranks[3]["history"][-1]["loss"] += 0.5  # 랭크마다 자기 손실만 찍은 것처럼
    assert not summarize_again(train_lab, ranks, "gloo").checks["logged_loss_is_global"].ok

    ranks = copy.deepcopy(full.ranks)
    ranks[0]["reference"]["history"][2]["loss"] += 1e-3
    assert not summarize_again(train_lab, ranks, "gloo").checks["loss_curves_agree"].ok


def test_phase_table_counts_the_chapter_run(runs):
    phases = runs[4]["full"].data["phases"]
    assert phases["construct"].get("broadcast", 0) >= 1  # 랭크 0의 파라미터를 나눠 준다
    assert [s.get("all_reduce") for s in phases["steps"]] == [1, 1, 1]  # 작은 모델: 버킷 하나
    assert [s.get("broadcast", 0) > 0 for s in phases["steps"]] == [False, True, False]
    assert phases["evaluate"] == {"all_reduce": 1} and phases["log"] == {"all_reduce": 1}
    assert phases["checkpoint"] == {"barrier": 1}
    resumed = runs[4]["resumed"]  # 체크포인트를 쓰며 남은 에폭만 학습한 실행도 단계별 합과 같다
    assert resumed.checks["phases_explain_whole_run"].ok and resumed.data["epochs_trained"] == 4


def test_hidden_collective_in_the_loop_fails_the_phase_check(monkeypatch):
    """A broken script: a barrier hidden in the per-epoch log line (not in any counted phase).

    The training runs in this process as a process group of one (the phase counts see gloo's
    collectives there too); the same records summarize to a pass without the hidden barrier."""
    ctx = RankContext(0, 1, 0, "gloo", script.torch.device("cpu"))
    params = labs.get_lab("train").resolve_params({"epochs": 2}, 1)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        honest = train_lab.rank_fn(ctx, **params)
        monkeypatch.setattr(script, "log", lambda *args: dist.barrier())
        broken = train_lab.rank_fn(ctx, **params)
    finally:
        dist.destroy_process_group()
    assert summarize_again(train_lab, [honest], "gloo", epochs=2).checks["phases_explain_whole_run"].ok
    check = summarize_again(train_lab, [broken], "gloo", epochs=2).checks["phases_explain_whole_run"]
    assert not check.ok
    assert check.value[0]["barrier"] == 2 and "barrier" not in check.expected[0]  # 에폭마다 하나씩 숨은 통신


def test_bad_fault_epoch_is_refused_before_spawning():
    with pytest.raises(labs.LabConfigError) as info:
        labs.run("train", nproc=2, epochs=3, fail_at_epoch=5)
    assert has_hangul(str(info.value))


def test_tampered_resume_fails_comparison(runs):
    full = runs[2]["full"].data["summary"]
    resumed = copy.deepcopy(runs[2]["resumed"].data["summary"])
    resumed["params"][5] += 1e-7  # N=2에서는 마지막 비트 하나도 허용하지 않는다
    result = compare_runs(resumed, full, 3, "gloo")
    assert not result.checks["same_final_parameters"].ok
    assert not compare_runs(runs[2]["resumed"].data["summary"], full, 4, "gloo").checks["resumed_from_checkpoint"].ok


# ----------------------------------------------------------------------------- the script itself

def test_script_runs_as_one_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labs.ddp.train_script", "--epochs", "3"], cwd=tmp_path,
                          env=clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "시작: 월드 크기 1" in proc.stdout
    summary = script.read_result(proc.stdout)
    assert summary["world_size"] == 1 and summary["restarts"] == 0 and len(summary["history"]) == 3


@pytest.mark.real_ranks  # the chapter's cell replays this command from the build; here it runs
def test_torchrun_restart_resumes_bitwise(runs, tmp_path):
    """The chapter's command: the last rank dies in epoch 3, torchrun restarts once, the result is unchanged."""
    from labs import commands
    from labs.run_command import run_command

    line = commands.torchrun_restart(script=str(REPO / "labs" / "ddp" / "train_script.py"), ckpt_dir=str(tmp_path / "ckpt"))
    cmd, settings = commands.torchrun_restart_argv(line, sys.executable)
    assert settings == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    env = clean_env(TMPDIR=str(tmp_path), GLOO_SOCKET_IFNAME="lo", **settings)

    proc = run_command(cmd, env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.findall(r"재시작 횟수 (\d)", proc.stdout) == ["0", "1"]
    assert "InjectedFault" in proc.stderr
    summary = script.read_result(proc.stdout)
    assert summary["restarts"] == 1 and summary["resumed_from"] == 2
    assert summary["fingerprint"] == runs[2]["full"].data["summary"]["fingerprint"]


# ----------------------------------------------------------------------------- the chapter notebook (its includes: test_book_includes.py)

def test_chapter_notebook_is_commit_ready():
    notebook = json.loads((REPO / "book" / "06_train.ipynb").read_text(encoding="utf-8"))
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert os.path.exists(REPO / "book" / "quizzes" / "06_train.yml")


# ----------------------------------------------------------------------------- a reused checkpoint folder

SMALL = ["--nproc", "2", "--param", "epochs=2"]


def _cli(capsys, folder: Path, *extra: str) -> tuple[int, str]:
    from labs.cli import main

    capsys.readouterr()
    code = main(["run", "train", *SMALL, "--param", f"ckpt_dir={folder}", *extra])
    return code, capsys.readouterr().err


@pytest.mark.real_ranks
def test_a_reused_folder_resumes_the_same_run_and_refuses_another(tmp_path, capsys, monkeypatch):
    """The same command twice passes (the second resumes to nothing to do, its checks still measured);
    another configuration in that folder is refused in Korean before any rank starts, unless fresh."""
    folder = tmp_path / "ckpt"
    assert _cli(capsys, folder) == (0, "")
    assert sorted(p.name for p in folder.iterdir()) == [checkpoint_folder.CHECKPOINT_NAME, checkpoint_folder.CONFIG_NAME]
    again = labs.run("train", nproc=2, epochs=2, ckpt_dir=str(folder))
    assert again.ok and again.data["summary"]["resumed_from"] == 2 and again.data["epochs_trained"] == 0
    assert again.checks["ddp_equals_single_process"].applicable and again.checks["phases_explain_whole_run"].ok
    assert not again.checks["reference_same_samples"].applicable

    spawned = []
    monkeypatch.setattr(labs.launch, "spawn_ranks", lambda *args, **kw: spawned.append(args) or [])
    for other in (["--param", "lr=0.2"], ["--param", "global_batch=64"], ["--param", "epochs=3"],
                  ["--nproc", "4"]):
        code, err = _cli(capsys, folder, *other)
        assert code == 2 and "다른 설정으로 학습한 것" in err and "fresh=True" in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert spawned == []
    monkeypatch.undo()

    before = (folder / checkpoint_folder.CHECKPOINT_NAME).read_bytes()
    assert _cli(capsys, folder, "--param", "lr=0.2", "--param", "fresh=true") == (0, "")
    assert (folder / checkpoint_folder.CHECKPOINT_NAME).read_bytes() != before
    assert json.loads((folder / checkpoint_folder.CONFIG_NAME).read_text())["lr"] == 0.2
    assert _cli(capsys, folder, "--param", "lr=0.2") == (0, "")  # 새 설정으로 이어서(할 일 없음)


@pytest.mark.real_ranks
def test_a_folder_without_its_configuration_is_refused(tmp_path, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / checkpoint_folder.CHECKPOINT_NAME).write_bytes(b"a checkpoint from before run_config.json")
    code, err = _cli(capsys, folder)
    assert code == 2 and checkpoint_folder.CONFIG_NAME in err and has_hangul(err), err


@pytest.mark.real_ranks
def test_a_second_run_in_a_folder_in_use_is_refused(tmp_path, capsys):
    """Two runs at once in one folder: the first holds it (a lock on the folder, no file left behind),
    the second is refused in Korean before spawning; once the first ends the folder is free again."""
    folder = tmp_path / "ckpt"
    first = subprocess.Popen([sys.executable, "-m", "labs", "run", "train", "--nproc", "1", "--param", "epochs=20",
                              "--param", f"ckpt_dir={folder}"], env=clean_env(), cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not checkpoint_folder.folder_in_use(folder):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)
        code, err = _cli(capsys, folder, "--param", "epochs=20")
        assert code == 2 and "다른 학습이 지금 쓰고 있습니다" in err and "Traceback" not in err, err
        out, first_err = first.communicate(timeout=600)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, first_err
    assert not checkpoint_folder.folder_in_use(folder)
    assert sorted(p.name for p in folder.iterdir()) == [checkpoint_folder.CHECKPOINT_NAME, checkpoint_folder.CONFIG_NAME]


def test_the_script_refuses_another_configuration_with_exit_2(tmp_path):
    def script_run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "labs.ddp.train_script", "--epochs", "2", "--no-progress",
                               "--ckpt-dir", str(tmp_path / "ckpt"), *args], cwd=tmp_path,
                              env=clean_env(TMPDIR=str(tmp_path)), capture_output=True, text=True, timeout=120)

    assert script_run().returncode == 0
    refused = script_run("--lr", "0.2")
    assert refused.returncode == 2 and "lr 0.1 → 0.2" in refused.stderr and "--fresh" in refused.stderr
    assert "Traceback" not in refused.stderr and "RESULT" not in refused.stdout
    fresh = script_run("--lr", "0.2", "--fresh")
    assert fresh.returncode == 0 and script.read_result(fresh.stdout)["resumed_from"] == 0
    again = script_run("--lr", "0.2")
    assert again.returncode == 0 and script.read_result(again.stdout)["resumed_from"] == 2
