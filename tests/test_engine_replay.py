"""labs.replay: a run recorded by the book build is replayed only for the same lab, N, backend,
parameters, timeout and lab source code (a folder or an input file by its contents, chapter 6's
command with its temporary folder taken out), and its checks are computed anew from the records.
A record is JSON data checked when read: a cut, garbage, incomplete or old pickle record is skipped
with a one-line note and the lab runs for real."""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest

import labs
import labs.launch
import labs.replay
from labs.errors import RankFailedError
from labs.replay import RECORD_ENV, REPLAY_ENV
from labs.run_command import run_command

pytestmark = [pytest.mark.real_ranks, pytest.mark.timeout(120)]


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(RECORD_ENV, str(tmp_path))
    monkeypatch.setenv(REPLAY_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def spawn_counter(monkeypatch):
    calls = []
    real = labs.launch.spawn_ranks

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(labs.launch, "spawn_ranks", counting)
    return calls


def recorded_files(folder):
    return sorted(p.name for p in folder.rglob("*.json"))


def read_record(path: Path) -> dict:
    return labs.replay.decode(json.loads(path.read_text(encoding="utf-8"))["outcome"])


def write_record(path: Path, outcome) -> None:
    envelope = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**envelope, "outcome": labs.replay.encode(outcome)}), encoding="utf-8")


def test_same_inputs_replay_other_inputs_run(runs_dir, spawn_counter):
    first = labs.run("faults", nproc=2)
    again = labs.run("faults", nproc=2)
    other_n = labs.run("faults", nproc=3)
    other_param = labs.run("faults", nproc=2, fault_rank=1)

    assert spawn_counter == ["faults", "faults", "faults"]  # the second call did not spawn
    assert not first.replayed and again.replayed and not other_n.replayed and not other_param.replayed
    assert again.ranks == first.ranks and again.wall_seconds == first.wall_seconds
    assert again.report() == first.report()
    assert len(recorded_files(runs_dir)) == 3


def test_changed_lab_code_is_never_replayed(runs_dir, spawn_counter, monkeypatch):
    labs.run("faults", nproc=2)
    monkeypatch.setattr(labs.replay, "code_digest", lambda: "another version of labs/")
    assert not labs.run("faults", nproc=2).replayed
    assert len(spawn_counter) == 2


def test_checks_are_computed_anew_from_the_records(runs_dir, spawn_counter):
    labs.run("faults", nproc=2)
    [path] = list(runs_dir.rglob("*.json"))
    outcome = read_record(path)
    outcome["records"][1]["sum"] = 4.0  # a record the real all_reduce could not have produced
    write_record(path, outcome)

    replayed = labs.run("faults", nproc=2)
    assert replayed.replayed and not replayed.ok
    assert [c.name for c in replayed.failed()] == ["all_reduce_sum"]


def test_a_recorded_error_is_raised_again_without_spawning(runs_dir, spawn_counter):
    with pytest.raises(RankFailedError) as first:
        labs.run("faults", nproc=2, mode="raise", fault_rank=1, timeout=30)
    with pytest.raises(RankFailedError) as again:
        labs.run("faults", nproc=2, mode="raise", fault_rank=1, timeout=30)
    assert len(spawn_counter) == 1
    assert str(again.value) == str(first.value) and again.value.rank == 1


def test_nothing_is_recorded_or_replayed_without_the_variables(tmp_path, spawn_counter, monkeypatch):
    monkeypatch.delenv(RECORD_ENV, raising=False)
    monkeypatch.delenv(REPLAY_ENV, raising=False)
    labs.run("faults", nproc=2)
    labs.run("faults", nproc=2)
    assert len(spawn_counter) == 2
    assert not list(tmp_path.rglob("*.json"))


def test_presentation_code_does_not_invalidate_recordings_but_lesson_code_does(tmp_path, monkeypatch):
    """The digest covers what ranks run (lessons, lab packages such as bench/, models, the engine),
    not figures or quizzes."""
    import shutil

    copy = tmp_path / "labs"
    shutil.copytree(Path(labs.replay.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(labs.replay, "__file__", str(copy / "replay.py"))
    labs.replay.code_digest.cache_clear()
    try:
        before = labs.replay.code_digest()
        (copy / "viz" / "cost.py").write_text((copy / "viz" / "cost.py").read_text() + "\n# a figure changed\n")
        labs.replay.code_digest.cache_clear()
        assert labs.replay.code_digest() == before
        (copy / "lessons" / "faults.py").write_text((copy / "lessons" / "faults.py").read_text() + "\n# a lesson changed\n")
        labs.replay.code_digest.cache_clear()
        changed = labs.replay.code_digest()
        assert changed != before
        measure = copy / "lessons" / "bench" / "measure.py"  # 패키지로 나눈 실습의 파일도 덮는다
        measure.write_text(measure.read_text() + "\n# a lab package changed\n")
        labs.replay.code_digest.cache_clear()
        assert labs.replay.code_digest() != changed
    finally:
        labs.replay.code_digest.cache_clear()


def test_a_run_of_other_code_keeps_the_books_records(runs_dir, spawn_counter, monkeypatch):
    """A test that runs a broken copy of labs/ while recording must not wipe what the book recorded."""
    labs.run("faults", nproc=2)
    with monkeypatch.context() as patch:
        patch.setattr(labs.replay, "code_digest", lambda: "a broken copy of labs/")
        labs.run("faults", nproc=2)
    assert labs.run("faults", nproc=2).replayed
    assert len(spawn_counter) == 2 and len(list(runs_dir.iterdir())) == 2


def test_trap_outcome_is_replayed_and_checked_anew(runs_dir, spawn_counter):
    """A trap that ends in an error (chapter 10) is recorded as its outcome; the replay spawns
    nothing, yields the same outcome, and a tampered outcome fails the trap's check."""
    from labs.lessons import traps

    first = traps.observe("shape", "bug")
    again = traps.observe("shape", "bug")
    assert spawn_counter == ["traps"] and first.ok and again.ok, first.report()
    assert again.data["measured"] == first.data["measured"] and again.report() == first.report()
    (path,) = [p for p in runs_dir.rglob("traps-outcome-*.json")]
    recorded = read_record(path)
    recorded["outcome"]["kind"] = "ok"  # 기록이 "예외 없이 끝났다"고 말하면 확인이 잡아야 한다
    write_record(path, recorded)
    assert not traps.observe("shape", "bug").ok
    assert spawn_counter == ["traps"]


def test_a_folder_parameter_is_keyed_by_contents_and_restored(runs_dir, spawn_counter, tmp_path):
    """Chapter 6's pair: a run that fails after writing a checkpoint, then the run that resumes
    from it. Recorded in folder ``a``, both replay in a new folder ``b`` (whose name differs): the
    failed run's replay leaves ``b`` holding the very checkpoint the real run wrote, so the resume
    that follows has the same key. A run whose folder holds something else runs for real."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    settings = {"epochs": 3, "fail_at_epoch": 3}
    with pytest.raises(RankFailedError):
        labs.run("train", nproc=1, ckpt_dir=str(a), **settings)
    written = labs.replay.folder_files(str(a))
    resumed = labs.run("train", nproc=1, ckpt_dir=str(a), epochs=3)
    assert written and spawn_counter == ["train", "train"]

    with pytest.raises(RankFailedError):
        labs.run("train", nproc=1, ckpt_dir=str(b), **settings)
    assert labs.replay.folder_files(str(b)) == written
    again = labs.run("train", nproc=1, ckpt_dir=str(b), epochs=3)
    assert again.replayed and again.data["summary"] == resumed.data["summary"]
    assert labs.replay.folder_files(str(b)) == labs.replay.folder_files(str(a))
    assert spawn_counter == ["train", "train"]  # both calls in b were replays

    # ``a`` now holds the finished run's checkpoint: a fresh call there is a new input, not a replay
    # of the first failure (keying by the folder's name would have replayed it)
    finished = labs.run("train", nproc=1, ckpt_dir=str(a), epochs=3)
    assert not finished.replayed and finished.data["summary"]["resumed_from"] == 3
    assert spawn_counter == ["train", "train", "train"]


def test_an_input_file_is_keyed_by_contents(runs_dir, spawn_counter, tmp_path):
    """Chapter 9 grades the reader's file from a fresh temporary folder: the same contents under
    another name replay; other contents under the same name run."""
    reference = (Path(labs.__file__).parent / "ddp" / "miniddp.py").read_text(encoding="utf-8")
    first, second = tmp_path / "a" / "my_ddp.py", tmp_path / "b" / "my_ddp.py"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(reference, encoding="utf-8")
    small = {"classes": ["PerParameterDDP"], "steps": 1, "width": 4, "depth": 2}

    ran = labs.grade(first, nproc=1, **small)
    again = labs.grade(second, nproc=1, **small)
    assert spawn_counter == ["grade"] and again.replayed and again.report() == ran.report()

    second.write_text(reference + "\n# 내용이 바뀌었다\n", encoding="utf-8")
    changed = labs.grade(second, nproc=1, **small)
    assert spawn_counter == ["grade", "grade"] and not changed.replayed


def test_a_command_is_keyed_by_its_line_with_the_temporary_folder_taken_out(runs_dir, tmp_path):
    """Chapter 6 runs torchrun in a fresh temporary folder: the same command line in another folder
    replays (nothing starts: the recorded pid comes back, no file is written), while another line,
    or a folder that holds something, runs."""
    script = "import os, sys; open(sys.argv[1], 'w').write('ran'); print(os.getpid())"

    def in_folder(name: str, *extra: str):
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        env = {**os.environ, "TMPDIR": str(folder)}
        return run_command([sys.executable, "-c", script, str(folder / "out.txt"), *extra], env, timeout=60), folder

    first, a = in_folder("a")
    again, b = in_folder("b")
    assert first.returncode == 0 and (a / "out.txt").exists()
    assert again.stdout == first.stdout and not (b / "out.txt").exists()

    other, c = in_folder("c", "another-argument")
    assert (c / "out.txt").exists() and other.stdout != first.stdout

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "left.txt").write_text("something")
    _, d = in_folder("d")
    assert (d / "out.txt").exists()


class RunsCode:
    """Unpickling this runs code: it writes ``path`` (a record must never be unpickled)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (self.path, "ran"))


def cut_to_rank_0(path: Path) -> None:
    outcome = read_record(path)
    outcome["records"] = outcome["records"][:1]
    write_record(path, outcome)


def missing_key(path: Path) -> None:
    outcome = read_record(path)
    del outcome["records"][1]["sum"]
    write_record(path, outcome)


def wrong_type(path: Path) -> None:
    """Issue 39: a record whose value has another type than the lab declares ended in the summary's TypeError."""
    outcome = read_record(path)
    outcome["records"][1]["sum"] = str(outcome["records"][1]["sum"])
    write_record(path, outcome)


def ranks_swapped(path: Path) -> None:
    outcome = read_record(path)
    outcome["records"][0] = dict(outcome["records"][1])  # rank 1 twice, rank 0 missing
    write_record(path, outcome)


def old_pickle(path: Path) -> None:
    """The format before version 2: a pickle, here one whose loading would run code."""
    path.with_suffix(".pkl").write_bytes(pickle.dumps({"records": [RunsCode(path.with_name("ran.txt"))]}))
    path.unlink()


def pickle_in_place(path: Path) -> None:
    path.write_bytes(pickle.dumps({"records": [RunsCode(path.with_name("ran.txt"))]}))


CORRUPTIONS = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "JSON이 아님"),
    "garbage": (lambda p: p.write_bytes(os.urandom(300)), "건너뜁니다"),
    "empty": (lambda p: p.write_bytes(b""), "JSON이 아님"),
    "rank_list_cut": (cut_to_rank_0, "월드 크기 2개가 아니라 1개"),
    "missing_key": (missing_key, "빠진 키 sum"),
    "wrong_type": (wrong_type, "타입이 다른 값: sum(str"),
    "ranks_not_once_each": (ranks_swapped, "랭크 0..1이 한 번씩"),
    "other_version": (lambda p: p.write_text(p.read_text().replace('"version": 2', '"version": 1')), "형식 버전 1"),
    "old_pickle": (old_pickle, "옛 pickle 형식"),
    "pickle_in_place": (pickle_in_place, "건너뜁니다"),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_an_invalid_record_is_skipped_with_a_note_and_the_lab_runs(runs_dir, spawn_counter, capfd, corruption):
    """Each way a record file can be wrong: one Korean line naming the file, then a real run (N ranks,
    every check passing), never a traceback, a replay of a wrong record, or code run by loading it."""
    labs.run("faults", nproc=2)
    [path] = list(runs_dir.rglob("*.json"))
    corrupt, reason = CORRUPTIONS[corruption]
    corrupt(path)
    capfd.readouterr()

    result = labs.run("faults", nproc=2)
    err = capfd.readouterr().err
    assert not result.replayed and result.ok and result.world_size == 2 and len(result.ranks) == 2
    assert spawn_counter == ["faults", "faults"]
    [note] = [line for line in err.splitlines() if "건너뜁니다" in line]
    assert reason in note and path.stem in note and "실제로 실행합니다" in note, err
    assert not path.with_name("ran.txt").exists()
    assert read_record(path)["records"] == result.ranks  # the real run wrote a valid record again
    assert labs.run("faults", nproc=2).replayed
