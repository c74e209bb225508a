"""``python -m labs``: list, run (spawned or in place under torchrun), JSON output, exit codes."""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPLAY_VARS, clean_env, has_hangul

import labs
from labs.cli import main
from labs.errors import EXIT_BAD_INPUT, EXIT_LAB_ERROR, EXIT_OK, EXIT_SIGNAL
from labs.torchrun import REQUIRED, TorchrunEnv, detect
from labs.torchrun import VARIABLES as TORCHRUN_VARIABLES

pytestmark = pytest.mark.timeout(120)

REPLICAS_CHECKS = {
    "distinct_processes", "replicas_differ_before_ddp", "replicas_identical_after_ddp",
    "equal_to_rank0_initial", "fingerprints_after_ddp", "per_rank_batch_sizes", "no_overlap",
    "padding_repeats_leading", "full_coverage", "drop_last_shards",
}


def labs_cli(*args: str, timeout: float = 90, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "labs", *args], capture_output=True, text=True,
                          encoding="utf-8", timeout=timeout, env=clean_env(**env))


def single_json(stdout: str) -> dict:
    """Parse stdout as exactly one JSON object (nothing before or after it)."""
    text = stdout.strip()
    obj, end = json.JSONDecoder().raw_decode(text)
    assert text[end:].strip() == "", f"more than one JSON document / extra output: {text[end:][:200]!r}"
    assert isinstance(obj, dict)
    return obj


def test_list_shows_every_lab_with_korean_description():
    proc = labs_cli("list")

    assert proc.returncode == EXIT_OK, proc.stderr
    lines = proc.stdout.splitlines()
    catalog = labs.all_labs()
    assert catalog, "the catalog must not be empty"
    listed = [line.split()[0] for line in lines if line.strip()]
    assert listed == list(catalog), f"list must show the catalog in order: {proc.stdout!r}"
    for name, lab in catalog.items():
        matching = [line for line in lines if line.split()[0] == name]
        assert len(matching) == 1, f"{name} not listed once in {proc.stdout!r}"
        line = matching[0]
        assert lab.description in line
        assert has_hangul(line)
        assert f"기본 N={lab.default_nproc}" in line


def test_run_replicas_json_on_three_ranks():
    proc = labs_cli("run", "replicas", "--nproc", "3", "--json")

    assert proc.returncode == EXIT_OK, proc.stderr
    report = single_json(proc.stdout)
    assert {"lab", "world_size", "backend", "ok", "checks"} <= set(report)
    assert report["lab"] == "replicas"
    assert report["world_size"] == 3
    assert report["backend"] == "gloo"
    assert report["ok"] is True
    assert set(report["checks"]) == REPLICAS_CHECKS
    for name, check in report["checks"].items():
        assert {"kind", "ok", "value", "expected", "tolerance", "criterion", "description"} <= set(check), name
        assert check["ok"] is True, (name, check)
        assert has_hangul(check["description"]), name
    assert report["checks"]["distinct_processes"]["value"] == 3
    assert report["checks"]["per_rank_batch_sizes"]["value"] == [[4, 4]]
    identical = report["checks"]["replicas_identical_after_ddp"]
    assert (identical["kind"], identical["value"], identical["expected"], identical["tolerance"]) == ("close", 0.0, 0.0, 0.0)


def test_run_plain_report_is_korean(capsys):
    # in-process through cli.main (a subprocess costs an import of torch and every lesson)
    code = main(["run", "faults", "--nproc", "2"])

    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "실습 faults · 월드 크기 N=2 · 백엔드 gloo" in out
    assert "[통과] all_reduce_sum" in out
    assert "결과: 확인 1개 중 1개 통과" in out


def test_raising_rank_exits_3_and_names_the_rank():
    proc = labs_cli("run", "faults", "--nproc", "2", "--param", "mode='raise'", "--param", "fault_rank=1")

    assert proc.returncode == EXIT_LAB_ERROR, (proc.returncode, proc.stderr)
    assert "실습 실행 실패" in proc.stderr
    assert "랭크 1" in proc.stderr
    assert "의도한 실패" in proc.stderr
    assert proc.stdout.strip() == ""


def _assert_korean_bad_input(code, stdout: str, stderr: str, fragments: list[str]) -> None:
    assert code == EXIT_BAD_INPUT, (code, stdout, stderr)
    assert has_hangul(stderr), stderr
    for fragment in fragments:
        assert fragment in stderr, f"{fragment!r} not in {stderr!r}"
    assert "Traceback" not in stderr
    assert stdout.strip() == ""


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["run", "replica"], ["오류", "알 수 없는 실습 이름", "혹시 'replicas'"], id="unknown-lab"),
    pytest.param(["run", "faults", "--nproc", "0"], ["오류", "랭크 수(nproc)", "0"], id="nproc-0"),
    pytest.param(["run", "faults", "--frobnicate"], ["오류", "명령줄 인자가 잘못되었습니다", "--help"], id="bad-flag"),
])
def test_bad_input_exits_2_with_korean_error(args, fragments):
    proc = labs_cli(*args)

    _assert_korean_bad_input(proc.returncode, proc.stdout, proc.stderr, fragments)


@pytest.mark.parametrize("args, fragments", [
    pytest.param(["run", "faults", "--param", "nope=1"], ["오류", "없는 인자", "nope"], id="unknown-param"),
    pytest.param(["run", "faults", "--param", "fault_rank"], ["오류", "KEY=VALUE"], id="param-no-equals"),
    pytest.param(["run", "faults", "--param", "fault_rank=1.5"], ["오류", "fault_rank", "정수"], id="param-float"),
    pytest.param(["run", "faults", "--timeout", "0"], ["오류", "timeout"], id="timeout-0"),
    pytest.param(["run", "faults", "--timeout", "1e14"], ["오류", "timeout", "86400초"], id="timeout-1e14"),
    pytest.param(["run", "faults", "--timeout", "1e-320"], ["오류", "timeout", "0.001초"], id="timeout-denormal"),
    pytest.param(["run", "faults", "--backend", "mpi"], ["오류", "명령줄 인자가 잘못되었습니다"], id="bad-backend"),
    pytest.param(["run", "faults", "--nproc", "two"], ["오류", "명령줄 인자가 잘못되었습니다"], id="nproc-not-int"),
    pytest.param([], ["오류", "명령줄 인자가 잘못되었습니다"], id="no-command"),
])
def test_bad_input_in_process_returns_2_with_korean_error(capsys, args, fragments):
    # the same cli.main as above, without paying for a fresh interpreter per case
    try:
        code = main(args)
    except SystemExit as exit_:  # argparse errors leave through parser.exit()
        code = exit_.code
    captured = capsys.readouterr()

    _assert_korean_bad_input(code, captured.out, captured.err, fragments)


# Streams that cannot encode Hangul: a latin-1 PYTHONIOENCODING, an ASCII locale with Python's UTF-8 mode off.
UNENCODABLE = {"latin-1": {"PYTHONIOENCODING": "latin-1"},
               "ascii-locale": {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}}


@pytest.mark.parametrize("env", UNENCODABLE.values(), ids=list(UNENCODABLE))
@pytest.mark.parametrize("args, code, stream", [
    (("list",), EXIT_OK, "stdout"),
    (("run", "faults", "--nproc", "2"), EXIT_OK, "stdout"),
    (("run", "faults", "--param", "nope=1"), EXIT_BAD_INPUT, "stderr"),
], ids=["list", "run", "error"])
def test_korean_output_survives_a_terminal_that_cannot_encode_it(env, args, code, stream):
    """Before: UnicodeEncodeError and exit 1. Now the CLI writes UTF-8 to a stream whose encoding has no Hangul."""
    proc = labs_cli(*args, **env)

    assert proc.returncode == code, proc.stderr
    assert has_hangul(getattr(proc, stream)) and "UnicodeEncodeError" not in proc.stderr, proc.stderr


def test_an_unexpected_error_exits_3_with_one_korean_line_naming_the_saved_traceback(tmp_path):
    """An error the engine does not expect (here: LABS_RECORD_DIR under a file, so the record cannot be
    written) was exit 1, "a check failed", with a raw traceback; now exit 3, one Korean line, the traceback
    in a file in TMPDIR that the line names."""
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = labs_cli("run", "faults", "--nproc", "2", LABS_RECORD_DIR=str(blocker / "records"), TMPDIR=str(tmpdir))

    assert proc.returncode == EXIT_LAB_ERROR, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and has_hangul(lines[0]) and "Traceback" not in lines[0], proc.stderr
    saved = list(tmpdir.glob("labs-error-*.txt"))
    assert len(saved) == 1 and str(saved[0]) in lines[0], (lines, saved)
    assert "Traceback" in saved[0].read_text(encoding="utf-8")


def test_a_closed_pipe_ends_quietly():
    """``python -m labs list | head -1``: the reader of stdout is gone; no BrokenPipeError traceback, the exit
    status a program killed by SIGPIPE has."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "labs", "list", "--params"], stdout=write, stderr=subprocess.PIPE,
                              text=True, encoding="utf-8", timeout=90, env=clean_env())
    finally:
        os.close(write)

    assert proc.returncode == EXIT_SIGNAL + signal.SIGPIPE and proc.stderr == "", proc.stderr


def _torchelastic_dirs(root: str) -> set[str]:
    return set(glob.glob(os.path.join(root, "torchelastic_*")))


def test_torchrun_in_place_prints_one_report_from_rank_0(tmp_path):
    # torchrun makes a torchelastic_* folder under TMPDIR: point it at tmp_path so nothing is
    # left in /tmp (and no other job's folder there is ever touched).
    system_tmp = tempfile.gettempdir()
    before = _torchelastic_dirs(system_tmp)
    env = clean_env(TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
             "-m", "labs", "run", "replicas", "--json"],
            capture_output=True, text=True, encoding="utf-8", timeout=100, env=env)
    finally:
        ours = _torchelastic_dirs(str(tmp_path))
        if not ours:  # TMPDIR was not honoured: remove what this run created in /tmp
            for path in _torchelastic_dirs(system_tmp) - before:
                shutil.rmtree(path, ignore_errors=True)

    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    assert proc.stdout.count('"lab"') == 1, proc.stdout
    report = single_json(proc.stdout)
    assert report["lab"] == "replicas"
    assert report["world_size"] == 2
    assert report["backend"] == "gloo"
    assert set(report["checks"]) == REPLICAS_CHECKS
    assert all(c["ok"] is True for c in report["checks"].values()), report["checks"]
    assert report["checks"]["distinct_processes"]["value"] == 2
    assert ours, "torchrun should have used the redirected TMPDIR"


# ----------------------------------------------------------------------------- torchrun or a stale shell

def _real_torchrun_env(tmp_path) -> dict[str, str]:
    """The torchrun variables of a real worker (rank 0 of 2): `torchrun --no-python env` prints them."""
    env = clean_env(TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "--no-python", "env"], capture_output=True, text=True, timeout=100, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key in TORCHRUN_VARIABLES and (key != "RANK" or value == "0"):
            seen.setdefault(key, value)
    return seen


def test_a_real_workers_variables_make_a_consistent_set(tmp_path):
    """The judge accepts exactly what torchrun gives a worker, and only from its agent."""
    env = _real_torchrun_env(tmp_path)
    assert set(REQUIRED) <= set(env), sorted(set(REQUIRED) - set(env))
    agent = [sys.executable, str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node=2", "x.py"]
    assert detect(env, parent=agent).in_place
    assert detect(env, parent=[sys.executable, "-m", "torch.distributed.run", "x.py"]).in_place
    shell = detect(env, parent=["-bash"])
    assert not shell.in_place and "bash" in shell.reason and set(shell.leftovers) == set(env)
    for key, value, why in [("RANK", "2", "RANK=2"), ("LOCAL_RANK", "-1", "LOCAL_RANK"),
                            ("WORLD_SIZE", "two", "WORLD_SIZE"), ("MASTER_PORT", "70000", "MASTER_PORT"),
                            ("TORCHELASTIC_RESTART_COUNT", "1", "RESTART_COUNT")]:
        verdict = detect({**env, key: value}, parent=agent)
        assert not verdict.in_place and why in verdict.reason, (key, verdict)
    missing = dict(env)
    del missing["GROUP_RANK"]
    assert "GROUP_RANK 없음" in detect(missing, parent=agent).reason
    assert detect({}, parent=["-bash"]) == TorchrunEnv(False)


STALE = {
    "master-only": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    "rank-world-master": {"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                          "MASTER_PORT": "29511"},
    "run-id-alone": {"TORCHELASTIC_RUN_ID": "stale-job"},
}


@pytest.mark.parametrize("stale", [*STALE, "real-worker"])
def test_stale_torchrun_variables_do_not_fool_the_cli(tmp_path, stale):
    """F2: variables left in a shell (or a whole worker's set, copied) make no torchrun rank: --nproc ranks
    are spawned, the report comes back, and one Korean line names the ignored variables."""
    leftovers = _real_torchrun_env(tmp_path) if stale == "real-worker" else STALE[stale]
    proc = labs_cli("run", "faults", "--nproc", "2", "--json", timeout=90, **leftovers)

    assert proc.returncode == EXIT_OK, (proc.returncode, proc.stderr[-3000:])
    report = single_json(proc.stdout)
    assert report["world_size"] == 2 and report["ok"] is True
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and has_hangul(lines[0]), proc.stderr[-3000:]
    assert "무시" in lines[0] and "unset" in lines[0]
    for key in leftovers:
        assert key in lines[0], (key, lines[0])


def test_grade_without_a_path_grades_the_reference():
    """`python -m labs grade` (no file) grades labs/ddp/miniddp.py, as its help says."""
    proc = labs_cli("grade", timeout=240)
    assert proc.returncode == EXIT_OK, proc.stderr[-3000:]
    assert "클래스 PerParameterDDP" in proc.stdout and "클래스 BucketedDDP" in proc.stdout
    assert proc.stdout.count("모두 통과했습니다") == 2, proc.stdout[-2000:]


# ----------------------------------------------------------------------------- where the course and its files live


def test_a_full_tmpdir_is_refused_in_korean_before_any_rank_starts(monkeypatch, capsys, tmp_path):
    """Issue 39: with a few KB left in TMPDIR a rank's torch.save failed with an English C++ error (exit 3)."""
    from collections import namedtuple

    import labs.launch

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(labs.launch.shutil, "disk_usage", lambda path: usage(1 << 20, (1 << 20) - 4096, 4096))
    monkeypatch.setattr(labs.launch._Rank, "start", lambda self: pytest.fail("a rank started on a full TMPDIR"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for name in REPLAY_VARS:  # make test replays the book's runs: this one must reach the launcher
        monkeypatch.delenv(name, raising=False)
    code = main(["run", "faults", "--nproc", "2"])
    err = capsys.readouterr().err
    assert code == 2 and has_hangul(err) and "4 KiB" in err and "TMPDIR" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_checkout_in_a_folder_with_spaces_and_hangul_runs_and_grades(tmp_path):
    """Issue 39: the course copied to "내 코스 폴더", TMPDIR "임시 폴더", a graded file "내 ddp.py": all run. The TMPDIR
    is long too (pytest's folder): with over ~75 bytes the fork server's socket path was too long for AF_UNIX."""
    course, tmp = tmp_path / "내 코스 폴더", tmp_path / "임시 폴더"
    shutil.copytree(Path(labs.__file__).parent, course / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    tmp.mkdir()
    reader = course / "내 ddp.py"
    shutil.copy(course / "labs" / "ddp" / "miniddp.py", reader)
    env = clean_env(PYTHONPATH=str(course), TMPDIR=str(tmp))
    where = subprocess.run([sys.executable, "-c", "import labs; print(labs.__file__)"], cwd=course, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(course / "labs" / "__init__.py")
    for args in (["run", "faults", "--nproc", "2"], ["grade", str(reader)]):
        done = subprocess.run([sys.executable, "-m", "labs", *args], cwd=course, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    assert sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")) == []


def test_two_grades_of_one_file_at_once_both_pass(tmp_path):
    """Issue 39: two `labs grade` of the same file at the same time (two terminals): separate ports and folders."""
    reader = tmp_path / "mine.py"
    shutil.copy(Path(labs.__file__).parent / "ddp" / "miniddp.py", reader)
    env = clean_env(TMPDIR=str(tmp_path))
    grades = [subprocess.Popen([sys.executable, "-m", "labs", "grade", str(reader)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [grade.communicate(timeout=600) for grade in grades]
    assert [grade.returncode for grade in grades] == [0, 0], [err[-2000:] for _, err in outputs]
    assert all("모두 통과" in out for out, _ in outputs), [out[-1000:] for out, _ in outputs]


@pytest.mark.parametrize("delay", [0.2, 0.6])
def test_ctrl_c_while_torch_loads_ends_in_one_korean_line(delay):
    """Issue 39: Ctrl-C during `python -m labs …`'s first second (labs/__init__ imports torch before the CLI's handler)
    ended in a KeyboardInterrupt traceback from inside torch's import and exit -2."""
    cli = subprocess.Popen([sys.executable, "-m", "labs", "list"], env=clean_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == EXIT_SIGNAL + signal.SIGINT, (cli.returncode, err[-2000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("중단") and "Traceback" not in err, err[-2000:]
