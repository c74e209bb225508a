"""The README's launch commands, run for real: two torchrun agents that rendezvous as two nodes,
and the sbatch scripts on a real single-node Slurm cluster (slurmctld + slurmd + munged).

Every command line comes from ``labs.commands`` (the same function README.md and the appendix
render), with the placeholders filled in: ``HEAD_NODE`` → 127.0.0.1 and a free port, 8 GPUs per
node → 2 CPU ranks, the script folder → its absolute path (so the jobs run from a temporary folder,
which also shows the scripts find the repository from any working directory).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import clean_env, describe
from slurm_cluster import SlurmCluster, running_cluster

from labs import commands
from labs.ddp.train_script import read_result
from labs.lessons.train import compare_runs

pytestmark = pytest.mark.timeout(600)  # the training fixture runs two Slurm jobs of at most JOB_TIMEOUT each

REPO = Path(__file__).resolve().parent.parent
SLURM_DIR = str(REPO / commands.SLURM_DIR)
RANKS = 2            # CPU ranks per node (per agent) in every test here
TRAIN_EPOCHS = 8
JOB_TIMEOUT = 180.0  # seconds one Slurm job may take before the test cancels it and fails


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _shell_env(**extra: str) -> dict:
    """The reader's shell: the venv's torchrun first on PATH, no torchrun variables inherited."""
    return clean_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra)


def _report(text: str) -> dict:
    """The numbers in the lab's Korean report (``LabResult.report``) printed by rank 0."""
    head = re.findall(r"실습 (\S+) · 월드 크기 N=(\d+) · 백엔드 (\w+)", text)
    tally = re.findall(r"결과: 확인 (\d+)개 중 (\d+)개 통과", text)
    assert len(head) == 1 and len(tally) == 1, f"보고서가 한 번 나와야 합니다:\n{text[-3000:]}"
    return {"lab": head[0][0], "world_size": int(head[0][1]), "backend": head[0][2],
            "checks": int(tally[0][0]), "passed": int(tally[0][1]), "failed": text.count("[실패]")}


def _assert_all_passed(text: str, lab: str, world_size: int) -> None:
    report = _report(text)
    assert report["lab"] == lab and report["world_size"] == world_size and report["backend"] == "gloo", report
    assert report["checks"] > 0 and report["passed"] == report["checks"] and report["failed"] == 0, text[-3000:]


def test_report_parser_sees_a_failed_check():
    text = ("실습 replicas · 월드 크기 N=4 · 백엔드 gloo\n[통과] a: 1\n[실패] b: 2\n결과: 확인 2개 중 1개 통과\n")
    with pytest.raises(AssertionError):
        _assert_all_passed(text, "replicas", 4)
    with pytest.raises(AssertionError):
        _assert_all_passed(text.replace("N=4", "N=2").replace("[실패]", "[통과]").replace("1개 통과", "2개 통과"),
                           "replicas", 4)
    with pytest.raises(AssertionError):  # no report at all
        _assert_all_passed("", "replicas", 4)


# ----------------------------------------------------------------------------- two agents, two "nodes"

def _start_agent(command: str, cwd: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", command], cwd=cwd, env={**_shell_env(), **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_listening(port: int, agent: subprocess.Popen, timeout: float) -> None:
    """Until the first agent's rendezvous store accepts connections (so it is the host)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and agent.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"첫 에이전트가 {timeout:g}초 안에 랑데부 포트 {port}를 열지 않았습니다")


def _tree(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        root = psutil.Process(proc.pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _stop(*agents: subprocess.Popen) -> None:
    for agent in agents:
        for p in _tree(agent):
            try:
                p.kill()
            except psutil.Error:
                pass
        agent.communicate()


def test_two_agents_rendezvous_as_two_nodes(tmp_path, no_leftover_children):
    port = _free_port()
    command = commands.torchrun_nodes(nproc=RANKS, head="127.0.0.1", port=port)
    assert command == commands.torchrun_nodes().replace("HEAD_NODE:29500", f"127.0.0.1:{port}").replace(
        "--nproc_per_node=8", f"--nproc_per_node={RANKS}")
    head = _start_agent(command, tmp_path)
    other = None
    try:
        _wait_listening(port, head, 60)
        other = _start_agent(command, tmp_path)
        outputs = [agent.communicate(timeout=180) for agent in (head, other)]
    finally:
        _stop(head, *([other] if other else []))
    assert [head.returncode, other.returncode] == [0, 0], outputs[0][1][-3000:] + outputs[1][1][-3000:]
    reports = [out for out, _ in outputs if "결과: 확인" in out]
    assert len(reports) == 1, "보고서는 랭크 0이 있는 에이전트 하나만 출력한다"
    _assert_all_passed(reports[0], "replicas", 2 * RANKS)
    assert re.search(rf"distinct_processes: {2 * RANKS}\b", reports[0])
    no_leftover_children()


def _worker_rank(agent: subprocess.Popen) -> dict[int, psutil.Process]:
    """The agent's lab worker by its RANK (empty until the worker has started)."""
    found = {}
    for p in _tree(agent)[1:]:
        try:
            if "labs" in " ".join(p.cmdline()) and "RANK" in p.environ():
                found[int(p.environ()["RANK"])] = p
        except psutil.Error:
            continue
    return found


def _connected(a: psutil.Process, b: psutil.Process) -> bool:
    """Whether the two processes hold the two ends of an established TCP connection (gloo's pair once the group
    has formed), so a kill now happens inside the lab, not during init_process_group."""
    try:
        ends = {(c.laddr, c.raddr) for c in a.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED and c.raddr}
        return any((c.raddr, c.laddr) in ends for c in b.net_connections("tcp")
                   if c.status == psutil.CONN_ESTABLISHED and c.raddr)
    except psutil.Error:
        return False


@pytest.mark.timeout(300)
def test_a_killed_agent_takes_its_rank_along_and_the_survivor_names_the_lost_node(tmp_path, no_leftover_children):
    """Two agents × 1 rank; rank 1 stays out of the all_reduce rank 0 waits in; its agent is SIGKILLed (an OOM kill).
    Its worker ends with it (it watches the agent), so rank 0's connection breaks: the survivor ends non-zero at once
    with a Korean line naming the lost peer, long before the lab's 300 s limit."""
    port = _free_port()
    command = commands.torchrun_nodes("faults", nproc=1, head="127.0.0.1", port=port,
                                      params={"mode": "hang", "fault_rank": 1}) + " --timeout 300"
    head = _start_agent(command, tmp_path)
    other, worker = None, None
    try:
        _wait_listening(port, head, 60)
        other = _start_agent(command, tmp_path)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            workers = _worker_rank(head) | _worker_rank(other)
            if len(workers) == 2 and _connected(workers[0], workers[1]):
                break
            time.sleep(0.5)
        time.sleep(2)  # 그룹이 생긴 뒤 랭크 0이 all_reduce에 들어갈 때까지
        victim = head if 1 in _worker_rank(head) else other
        survivor = other if victim is head else head
        worker = _worker_rank(victim)[1]
        victim.kill()
        killed = time.monotonic()
        _, err = survivor.communicate(timeout=60)
        ended = time.monotonic() - killed
        worker_gone = not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    except subprocess.TimeoutExpired:
        worker_gone, ended, err = worker is None or not worker.is_running(), math.inf, "(60초 안에 끝나지 않음)"
    finally:
        if worker is not None and worker.is_running():
            worker.kill()  # 고아가 된 랭크: 죽은 에이전트의 파이프를 붙잡고 있다
        _stop(head, *([other] if other else []))
    assert worker_gone, "에이전트가 죽었는데 그 랭크가 계속 돈다"
    assert survivor.returncode != 0 and ended < 30, (survivor.returncode, ended, err[-2000:])
    assert "다른 랭크와의 연결이 끊겼습니다(상대 127.0.0.1:" in err, err[-2000:]
    no_leftover_children()


def test_one_node_torchrun_runs_a_lab_in_place(tmp_path, no_leftover_children):
    """The appendix's one-node command; in TMPDIR it leaves only torchrun's own torchelastic_* folder (the agent's
    log folder, which the appendix says torch does not remove), none of the ranks' labs-rank* folders."""
    command = commands.torchrun_one_node("faults", nproc=RANKS)
    assert command == commands.torchrun_one_node("faults").replace("=8", f"={RANKS}")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    agent = _start_agent(command, tmp_path, TMPDIR=str(tmp))
    try:
        out, err = agent.communicate(timeout=180)
    finally:
        _stop(agent)
    assert agent.returncode == 0, err[-3000:]
    _assert_all_passed(out, "faults", RANKS)
    left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
    assert len(left) == 1 and left[0].startswith("torchelastic_"), left
    no_leftover_children()


def test_a_restarted_attempt_forms_its_group_again(tmp_path, no_leftover_children):
    """Issue 39: with ``--max-restarts 1`` the agent starts the ranks again after a rank died; the new attempt must
    join a new group and run the lab (here it meets the same fault again), not wait for the old one. Two attempts,
    each ending in rank 0's Korean line naming the lost connection, and the agent's non-zero exit."""
    command = commands.torchrun_one_node("faults", nproc=RANKS, params={"mode": "kill", "fault_rank": 1}).replace(
        "torchrun ", "torchrun --max-restarts=1 ", 1)
    agent = _start_agent(command, tmp_path)
    try:
        out, err = agent.communicate(timeout=180)
    finally:
        _stop(agent)
    assert agent.returncode != 0
    assert (out + err).count("다른 랭크와의 연결이 끊겼습니다") == 2, (out + err)[-4000:]
    no_leftover_children()


def test_a_hung_rank_under_torchrun_is_named_with_its_place(tmp_path, no_leftover_children):
    """F7: each rank's watchdog reports at the deadline. Rank 0 prints the spawn launcher's report (the hung
    rank outside a collective, its peers waiting in one), and torchrun's root cause is the hung rank."""
    hung, timeout = 1, 10
    command = commands.torchrun_one_node("faults", nproc=3, params={"mode": "hang", "fault_rank": hung})
    # --standalone: a free rendezvous port (other jobs on this machine may hold 29500)
    command = command.replace("torchrun ", "torchrun --standalone ", 1) + f" --timeout {timeout}"
    started = time.monotonic()
    agent = _start_agent(command, tmp_path)
    try:
        out, err = agent.communicate(timeout=150)
    finally:
        _stop(agent)
    elapsed = time.monotonic() - started
    assert agent.returncode not in (0, None), err[-3000:]
    reports = [line for line in err.splitlines() if line.startswith("실습 실행 실패")]
    assert len(reports) == 1, err[-4000:]
    assert f"제한 시간 {timeout}초" in reports[0] and "끝나지 않은 랭크: 0, 1, 2" in reports[0]
    assert re.search(rf"랭크 {hung}: 집합 통신 밖에서 멈춤 \(faults\.py \d+행 rank_fn\(\)\)", err), err[-4000:]
    for rank in (0, 2):
        assert re.search(rf"랭크 {rank}: 집합 통신에서 다른 랭크를 기다리는 중 \(faults\.py", err), err[-4000:]
    root = err[err.index("Root Cause"):]
    assert re.search(rf"rank\s*: {hung} \(local_rank: {hung}\)\s*exitcode\s*: 3 ", root), root[:1500]
    assert "Timed out" not in err and "DistBackendError" not in err  # no gloo timeout: the watchdog came first
    assert elapsed < 120, f"{elapsed:.0f}초"
    no_leftover_children()


def _ranks_idle(ranks: list[psutil.Process], seconds: float = 1.0) -> bool:
    """All ranks used (almost) no CPU for ``seconds``: past torch's import and the group's setup,
    each is blocked in the all_reduce or in the hanging rank's sleep loop."""
    try:
        before = [sum(p.cpu_times()[:2]) for p in ranks]
        time.sleep(seconds)
        return all(sum(p.cpu_times()[:2]) - b < 0.05 * seconds for p, b in zip(ranks, before))
    except psutil.NoSuchProcess:
        return False


def test_a_dead_node_makes_the_other_fail_quickly(tmp_path, no_leftover_children):
    """Rank 3 never reaches the all_reduce; ranks 0-2 wait in it. Then the second "node" dies
    (its agent and both its ranks, SIGKILL): the head's agent must exit with an error, not hang."""
    port = _free_port()
    command = commands.torchrun_nodes("faults", nproc=RANKS, head="127.0.0.1", port=port,
                                      params={"mode": "hang", "fault_rank": 2 * RANKS - 1})
    head = _start_agent(command, tmp_path)
    other = None
    try:
        _wait_listening(port, head, 60)
        other = _start_agent(command, tmp_path)
        deadline = time.monotonic() + 120
        while True:
            ranks = [p for agent in (head, other) for p in _tree(agent)[1:]]
            if len(ranks) == 2 * RANKS and _ranks_idle(ranks) and _ranks_idle(ranks):  # twice: not just starved
                break
            assert time.monotonic() < deadline, f"랭크 {2 * RANKS}개가 집합 통신에 들어가지 않았습니다: {describe(ranks)}"
            assert head.poll() is None and other.poll() is None, "에이전트가 먼저 끝났습니다"
            time.sleep(0.2)
        assert head.poll() is None, "고장 난 랭크를 기다리는 동안 첫 노드는 살아 있어야 한다"
        for p in _tree(other):  # 노드 하나가 통째로 죽는다
            p.kill()
        killed = time.monotonic()
        _, err = head.communicate(timeout=90)
        elapsed = time.monotonic() - killed
    finally:
        _stop(head, *([other] if other else []))
    assert head.returncode not in (0, None)
    assert elapsed < 30, f"남은 노드가 {elapsed:.1f}초나 걸려서야 끝났습니다"
    assert "ChildFailedError" in err and "labs FAILED" in err and "Root Cause" in err, err[-3000:]
    assert re.search(r"Connection closed by peer|Connection reset by peer|Socket closed", err), err[-3000:]
    no_leftover_children()


# ----------------------------------------------------------------------------- Slurm, one real node

@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("slurm"), env=clean_env()) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def submit_dir(tmp_path_factory) -> Path:
    """Where the jobs are submitted from: not the repository."""
    return tmp_path_factory.mktemp("submit")


def _read(path: str) -> str:
    return Path(path).read_text(errors="replace") if Path(path).is_file() else ""


def _finish(slurm: SlurmCluster, job_id: int) -> tuple[dict, str, str]:
    """Wait for the job; return its fields, its output file (stdout) and its error file (stderr)."""
    info = slurm.wait(job_id, JOB_TIMEOUT)
    out, err = _read(info["StdOut"]), _read(info["StdErr"])
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{out[-2000:]}\n{err[-4000:]}"
    return info, out, err


def test_sbatch_lab_passes_all_checks(slurm, submit_dir):
    command = commands.sbatch_lab("replicas", cpu_ranks=RANKS, slurm_dir=SLURM_DIR)
    job_id = slurm.submit(command, cwd=submit_dir)
    info, text, _ = _finish(slurm, job_id)
    out, err = (submit_dir / f"ddp-lab-{job_id}.{ext}" for ext in ("out", "err"))  # #SBATCH: the submit folder
    assert Path(info["StdOut"]) == out and Path(info["StdErr"]) == err and out.is_file() and err.is_file()
    assert f"출력 파일: {out}" in text and f"오류 출력: {err}" in text and f"저장소: {REPO}" in text
    assert f"노드 1대 × 랭크 {RANKS}개, 백엔드 gloo" in text
    _assert_all_passed(text, "replicas", RANKS)


def _rank_process(slurm: SlurmCluster, rank: int) -> psutil.Process | None:
    """The first attempt's process for ``rank`` of this cluster's training job."""
    for p in slurm.leftovers():
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("RANK") == str(rank) and env.get("TORCHELASTIC_RESTART_COUNT") == "0":
            return p
    return None


def _kill_rank_after_epoch(slurm: SlurmCluster, job_id: int, rank: int, epoch: int) -> None:
    """Wait for rank 0's log line of ``epoch`` (written after its checkpoint), then SIGKILL ``rank``.

    The log's path and the victim are looked up once, before the line can appear, so that only a
    file read stands between the line and the kill (on a busy machine `scontrol` and a scan of every
    process took longer than the epochs that followed)."""
    deadline = time.monotonic() + JOB_TIMEOUT
    marker = f"에폭 {epoch}/{TRAIN_EPOCHS}"
    out = victim = None
    while time.monotonic() < deadline:
        if out is None:
            path = slurm.job(job_id).get("StdOut")
            out = Path(path) if path else None
        if victim is None:
            victim = _rank_process(slurm, rank)
        if out is not None and victim is not None and out.is_file() and marker in out.read_text(errors="replace"):
            victim.kill()
            return
        time.sleep(0.05)
    raise AssertionError(f"{JOB_TIMEOUT:g}초 안에 '{marker}' 줄이 나오지 않았거나 죽일 랭크 프로세스를 찾지 못했습니다")


@pytest.fixture(scope="module")
def train_jobs(slurm, submit_dir) -> dict:
    """train.sbatch twice with the same settings: uninterrupted, and with rank 1 killed (SIGKILL)
    after epoch 2's checkpoint, so that torchrun --max-restarts resumes it."""
    command = commands.sbatch_train(TRAIN_EPOCHS, cpu_ranks=RANKS, slurm_dir=SLURM_DIR)
    runs = {}
    for name in ("full", "killed"):
        job_id = slurm.submit(command, cwd=submit_dir)
        if name == "killed":
            _kill_rank_after_epoch(slurm, job_id, rank=RANKS - 1, epoch=2)
        _, text, err = _finish(slurm, job_id)
        runs[name] = {"job_id": job_id, "text": text, "err": err, "summary": read_result(text)}
    return runs


def test_sbatch_train_reaches_the_accuracy(train_jobs, submit_dir):
    run = train_jobs["full"]
    summary = run["summary"]
    assert summary["world_size"] == RANKS and summary["restarts"] == 0 and summary["resumed_from"] == 0
    history = summary["history"]
    assert [h["epoch"] for h in history] == list(range(1, TRAIN_EPOCHS + 1))
    assert history[-1]["loss"] < history[0]["loss"] / 10
    assert history[-1]["correct"] / history[-1]["total"] >= 0.9
    ckpt = submit_dir / "checkpoints" / f"ddp-train-{run['job_id']}"
    assert f"체크포인트: {ckpt}" in run["text"] and (ckpt / "checkpoint.pt").is_file()


def test_killed_rank_resumes_to_the_same_parameters(train_jobs):
    full, killed = train_jobs["full"]["summary"], train_jobs["killed"]["summary"]
    text = train_jobs["killed"]["text"]
    assert re.findall(r"재시작 횟수 (\d)", text) == ["0", "1"]
    err = train_jobs["killed"]["err"]
    assert re.search(r"exitcode\s*:\s*-9|Signals\.SIGKILL|signal 9", err, re.IGNORECASE), err[-3000:]
    assert killed["restarts"] == 1 and 2 <= killed["resumed_from"] < TRAIN_EPOCHS
    # compare_runs' first check is where the run resumed; the kill's epoch is what we read above
    comparison = compare_runs(killed, full, killed["resumed_from"] + 1, "gloo")
    assert comparison.ok, comparison.report()
    assert comparison.checks["same_final_parameters"].tolerance == 0.0 and comparison.data["bitwise"]


def test_slurm_stops_and_leaves_nothing(slurm):
    daemons = list(slurm.procs.values())
    assert len(daemons) == 3 and all(p.poll() is None for p in daemons)
    slurm.stop()
    assert all(p.poll() is not None for p in daemons)
    left = slurm.leftovers()
    assert not left, f"Slurm 작업의 프로세스가 남았습니다: {describe(left)}"


# ----------------------------------------------------------------------------- one source for the docs

def test_readme_shows_exactly_the_tested_commands():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = {line.split("  #")[0].strip() for line in readme.splitlines()}
    missing = [c for c in commands.readme_commands() if c not in lines]
    assert not missing, f"README.md에 labs.commands가 만드는 명령줄이 그대로 있어야 합니다: {missing}"
    assert "pytest tests/test_engine_cluster_commands.py" in readme


def test_scripts_name_the_commands_they_document():
    lab = (REPO / "labs" / "slurm" / "ddp_lab.sbatch").read_text(encoding="utf-8")
    train = (REPO / "labs" / "slurm" / "train.sbatch").read_text(encoding="utf-8")
    assert commands.sbatch_lab() in lab and commands.sbatch_lab(cpu_ranks=commands.CPU_RANKS) in lab
    assert commands.sbatch_train(6, cpu_ranks=commands.CPU_RANKS) in train
    for script in (lab, train):
        assert f"#SBATCH --gpus-per-node={commands.GPUS_PER_NODE}" in script
    common = (REPO / "labs" / "slurm" / "torchrun.sh").read_text(encoding="utf-8")
    assert f'NPROC_PER_NODE="${{NPROC_PER_NODE:-{commands.CPU_RANKS}}}"' in common  # the documented default
    assert "train.sbatch [에폭 수]" in train and f'EPOCHS="${{1:-{commands.TRAIN_EPOCHS}}}"' in train


def test_appendix_renders_its_commands_from_labs_commands():
    notebook = json.loads((REPO / "book" / "appendix_gpu.ipynb").read_text(encoding="utf-8"))
    markdown = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")
    assert "```bash" not in markdown and not re.search(r"^\s*(torchrun|sbatch|NPROC_PER_NODE=)", markdown, re.M)
    for call in ("torchrun_one_node()", "lab_commands()", "torchrun_nodes()", "sbatch_lab()", "sbatch_train()",
                 "sbatch_lab(cpu_ranks=", "sbatch_header(", "GPU_CHECK"):
        assert f"commands.{call}" in code, call
    rendered = commands.bash_block(commands.sbatch_lab(), comments=("설명",)).data
    assert rendered == f"```bash\n# 설명\n{commands.sbatch_lab()}\n```"


LAUNCH_WORDS = ("torchrun ", "sbatch ", "NPROC_PER_NODE=", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=")


def _fenced_launch_lines(text: str) -> list[str]:
    """Lines in fenced code blocks (```…```) that launch something, comments cut off."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        command = line.split("  #")[0].strip()
        if fenced and command.startswith(LAUNCH_WORDS):
            found.append(command)
    return found


def test_no_page_types_a_launch_command_of_its_own():
    """A command a reader copies from README.md or a chapter is one labs.commands renders (and the
    tests above run), never a hand-typed copy that can drift."""
    import json

    rendered = (set(commands.readme_commands()) | {c for _, c in commands.lab_commands()}
                | set(commands.page_commands()))
    pages = [REPO / "README.md", *sorted((REPO / "book").glob("*.md"))]
    texts = {p.name: p.read_text(encoding="utf-8") for p in pages}
    for nb in sorted((REPO / "book").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        texts[nb.name] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    typed = [(name, line) for name, text in texts.items() for line in _fenced_launch_lines(text)
             if line not in rendered]
    assert texts and not typed, ("손으로 쓴 실행 명령이 있습니다. labs/commands.py의 함수로 만들어 보이세요 "
                                 f"(README는 그 문자열을 그대로): {typed}")
