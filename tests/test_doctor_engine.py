"""`labs doctor`'s engine: the ranks get what a real `torchrun --standalone` gives its workers (compared with one),
the reader's process holds no course code, `--steps`/`--batches` stop a long script cleanly, the CLI's JSON and
exit codes, and nothing outlives a rehearsal however it ends (Ctrl-C, SIGTERM, SIGKILL of the doctor)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import clean_env

from labs.doctor import examine
from labs.doctor.spawn import TORCHRUN_VARIABLES
from labs.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_SIGNAL

pytestmark = pytest.mark.real_ranks  # the rehearsals really run: never a recorded one (labs/replay.py)

REPO = Path(__file__).resolve().parents[1]
GALLERY = Path(__file__).resolve().parent / "doctor_scripts"

ENV_DUMP = """\
import json, os, sys
rank = os.environ["RANK"]
with open(f"env{rank}.json", "w") as f:
    json.dump({"env": {k: os.environ.get(k) for k in %r}, "argv": sys.argv, "path0": sys.path[0], "file": __file__,
               "name": __name__, "unbuffered": not sys.stdout.line_buffering and sys.stdout.write_through, "orig_flag": sys.orig_argv[1],
               "labs": sorted(m for m in sys.modules if m == "labs" or m.startswith("labs."))}, f)
""" % (TORCHRUN_VARIABLES + ("CUDA_VISIBLE_DEVICES",),)

# Run on every rank until the doctor stops it; prints what it did and runs its `finally`.
ENDLESS = """\
import sys
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = TensorDataset(torch.randn(64, 2), torch.randn(64, 1))
sampler = DistributedSampler(data)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 10**9
try:
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=4, sampler=sampler):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        print("epoch", epoch, "done", flush=True)
finally:
    print("finally ran on rank", dist.get_rank(), flush=True)
"""

SLEEPER = """\
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
open(f"started{dist.get_rank()}", "w").write(str(os.getpid()))
time.sleep(600)
"""


def test_the_ranks_get_what_torchrun_gives_its_workers(tmp_path, monkeypatch):
    ours, theirs = tmp_path / "doctor", tmp_path / "torchrun"
    for folder in (ours, theirs):
        folder.mkdir()
        (folder / "envdump.py").write_text(ENV_DUMP)
    real = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "envdump.py", "a", "--b"], cwd=theirs, env=clean_env(), capture_output=True, text=True,
                          timeout=180)
    assert real.returncode == 0, real.stderr[-2000:]
    monkeypatch.chdir(ours)
    examine("envdump.py", nproc=2, args=["a", "--b"])
    for rank in (0, 1):
        got, want = (json.loads((f / f"env{rank}.json").read_text()) for f in (ours, theirs))
        differ = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "CUDA_VISIBLE_DEVICES"}
        assert {k for k, v in got["env"].items() if v is not None} == {k for k, v in want["env"].items() if v is not None} \
            | {"CUDA_VISIBLE_DEVICES"}
        assert {k: v for k, v in got["env"].items() if k not in differ} == {k: v for k, v in want["env"].items()
                                                                            if k not in differ}
        assert got["env"]["CUDA_VISIBLE_DEVICES"] == "" and got["env"]["TORCHELASTIC_ERROR_FILE"]
        assert got["env"]["RANK"] == got["env"]["LOCAL_RANK"] == str(rank) and got["env"]["WORLD_SIZE"] == "2"
        assert got["argv"] == want["argv"] == ["envdump.py", "a", "--b"]
        assert (got["name"], got["unbuffered"], got["orig_flag"]) == (want["name"], want["unbuffered"], want["orig_flag"])
        assert Path(got["path0"]) == ours.resolve() and Path(want["path0"]) == theirs.resolve()
        assert got["file"] == str(ours / "envdump.py") and want["file"] == str(theirs / "envdump.py")
        assert got["labs"] == [], "랭크 프로세스에 코스의 코드가 들어가면 안 됩니다"


def test_steps_stop_every_rank_cleanly_after_k_steps(tmp_path):
    (tmp_path / "endless.py").write_text(ENDLESS)
    proc = subprocess.run([sys.executable, "-m", "labs", "doctor", "endless.py", "--steps", "3", "--show-output"],
                          cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "최적화 스텝 3번" in proc.stdout and "발견한 문제 없음" in proc.stdout
    assert "finally ran on rank 0" in proc.stdout and "finally ran on rank 1" in proc.stdout  # the script's own cleanup


def test_batches_end_every_epoch_early_and_the_epochs_go_on(tmp_path):
    (tmp_path / "endless.py").write_text(ENDLESS)
    report = examine(tmp_path / "endless.py", args=["3"], batches=2, cwd=tmp_path)
    assert report.exit_code == EXIT_OK, report.report()
    assert report.summary["steps"] == 6  # 3 epochs × 2 batches
    assert all(f"epoch {e} done" in out.stdout for out in report.outputs for e in range(3))


def test_the_json_has_the_findings_and_the_exit_code(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "labs", "doctor", str(GALLERY / "bug_no_sampler.py"), "--steps", "2",
                           "--json"], cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == EXIT_CHECK_FAILED, proc.stderr
    report = json.loads(proc.stdout)
    assert report["exit_code"] == proc.returncode and report["nproc"] == 2
    assert [f["kind"] for f in report["findings"]] == ["data_overlap"]
    assert report["findings"][0]["site"]["line"] == 11 and report["summary"]["steps"] == 2


def test_the_build_records_a_rehearsal_and_the_tests_replay_it(tmp_path, monkeypatch):
    import labs.doctor.recorded as recorded
    from labs.replay import RECORD_ENV, REPLAY_ENV

    folder = tmp_path / "scripts"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text((GALLERY / "bug_no_sampler.py").read_text())
    monkeypatch.setenv(RECORD_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(REPLAY_ENV, str(tmp_path / "runs"))
    first = examine(script, steps=2, cwd=tmp_path)
    assert list((tmp_path / "runs").rglob("doctor-*.json"))

    def no_rank(*args: object) -> None:
        raise AssertionError("기록이 있는데 랭크를 띄웠습니다")

    monkeypatch.setattr(recorded, "rehearse", no_rank)
    again = examine(script, steps=2, cwd=tmp_path)
    assert again.to_dict() == first.to_dict() and again.kinds == ["data_overlap"]
    script.write_text(script.read_text() + "# changed\n")  # another script: no record, so it really runs
    with pytest.raises(AssertionError, match="랭크를 띄웠습니다"):
        examine(script, steps=2, cwd=tmp_path)


def _doctor(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], Path]:
    """The doctor on ``script`` in its own process group (as a terminal starts it), with its own TMPDIR."""
    (tmp_path / "job.py").write_text(script)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "labs", "doctor", "job.py", "--timeout", "300"], cwd=tmp_path,
                            env=clean_env(PYTHONPATH=str(REPO), TMPDIR=str(tmp)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc, tmp


def _rank_pids(tmp_path: Path, proc: subprocess.Popen[bytes]) -> list[int]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return [int((tmp_path / f"started{r}").read_text()) for r in (0, 1)]
        except (OSError, ValueError):
            time.sleep(0.2)
    pytest.fail(f"랭크가 시작하지 않았습니다: {proc.communicate(timeout=10)}")


def _gone(pids: list[int], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_rank_and_removes_the_folder(tmp_path, signum):
    proc, tmp = _doctor(tmp_path, SLEEPER)
    pids = _rank_pids(tmp_path, proc)
    assert [p.name for p in tmp.iterdir()] and all(p.name.startswith("labs-doctor-") for p in tmp.iterdir())
    os.killpg(proc.pid, signum)  # Ctrl-C reaches the terminal's whole foreground group; the ranks have their own
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_SIGNAL + signum, err.decode()
    assert "Traceback" not in err.decode() and "중단" in err.decode()
    assert _gone(pids) and list(tmp.iterdir()) == []


def test_killing_the_doctor_ends_its_ranks_and_their_folder(tmp_path):
    proc, tmp = _doctor(tmp_path, SLEEPER)
    pids = _rank_pids(tmp_path, proc)
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(pids), "doctor가 죽은 뒤에도 랭크가 살아 있습니다"
    deadline = time.monotonic() + 10
    while list(tmp.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert list(tmp.iterdir()) == []
