"""Chapter 14's recipe, run for real: the two scripts of ``recipe/`` under the command lines the page shows.

Every command line comes from ``labs.commands`` (the same functions chapter 14 renders), run as a reader types it in a
folder holding a copy of ``recipe/``, with the placeholders filled in: 8 GPUs → 2 CPU ranks (gloo), ``HEAD_NODE`` →
127.0.0.1 and a free port, a Slurm GPU partition → the CPU partition line on a real single-node cluster. Each DDP run
must reach the parameters of the single-device script for the same global batch B, within chapter 5's tolerance
(atol + rtol·|w|, torch.testing's float32 defaults: the two runs add the same gradients in another order), and
bitwise with one rank (the same sums in the same order). The comparison is independent of the DDP file: the
single-device script is the reference. Broken variants of the DDP file show each check failing for a real mistake.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import re
import socket
import time
from pathlib import Path

import pytest
from conftest import clean_env
from slurm_cluster import running_cluster

from labs import commands, recipe
from labs.viz import recipe as changes_view

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parent.parent
CHAPTER = REPO / "book" / "14_recipe.ipynb"
PROBE = Path(__file__).resolve().parent / "recipe_probe.py"
RANKS = commands.CPU_RANKS       # CPU ranks per node in every run here
EPOCHS, BATCH, ACCUM, TRAIN = 6, 96, 2, 1440  # the scripts' defaults and the training set's size
STEPS = TRAIN // BATCH           # optimizer steps per epoch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, agent, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and agent.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"첫 에이전트가 {timeout:g}초 안에 127.0.0.1:{port}에서 기다리지 않았습니다")


def _run(tmp: Path, name: str, line: str, variant: str = "") -> tuple[recipe.Run, Path]:
    """``line`` in a folder of its own holding a copy of recipe/ (broken as ``variant``): (the run, the folder)."""
    folder = recipe.copy_recipe(tmp / name)
    if variant:
        recipe.break_recipe(folder, variant)
    result = recipe.run(line, folder, timeout=300)
    assert result["returncode"] == 0, f"{line}\n{result['stderr_tail']}"
    return result, folder


def _ddp_checkpoint(folder: Path) -> Path:
    return recipe.checkpoint(folder, commands.RECIPE_DDP)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[recipe.Run, Path]:
    """The single-device script with its defaults: the reference every DDP run is compared with."""
    run, folder = _run(tmp_path_factory.mktemp("single"), "single", commands.recipe_single())
    return run, recipe.checkpoint(folder, commands.RECIPE_SINGLE)


@pytest.fixture(scope="module")
def one_node(tmp_path_factory) -> tuple[recipe.Run, Path]:
    """The 8-GPU line with 2 CPU ranks."""
    line = commands.recipe_torchrun(nproc=RANKS)
    assert line == commands.recipe_torchrun().replace("--nproc_per_node=8", f"--nproc_per_node={RANKS}")
    run, folder = _run(tmp_path_factory.mktemp("one-node"), "ddp", line)
    return run, _ddp_checkpoint(folder)


def _epochs(run: recipe.Run) -> list[int]:
    return [epoch for epoch, *_ in recipe.parse_log(run["log"])]


def test_single_script_learns(single):
    run, _ = single
    log = recipe.parse_log(run["log"])
    assert [epoch for epoch, *_ in log] == list(range(1, EPOCHS + 1))
    assert log[-1][1] < log[0][1] / 5 and log[-1][2] / log[-1][3] >= 0.85, run["log"]


def test_one_gpu_line_is_bitwise_the_single_script(single, tmp_path):
    """One rank adds the same gradients in the same order as one device: the parameters are bitwise the same."""
    run, folder = _run(tmp_path, "one-gpu", commands.recipe_torchrun(1))
    comparison = recipe.compare(single[1], _ddp_checkpoint(folder))
    assert comparison["bitwise"] and comparison["epochs"] == [EPOCHS, EPOCHS], comparison
    assert run["log"] == single[0]["log"]


def test_one_node_line_reaches_the_single_parameters(single, one_node):
    comparison = recipe.compare(single[1], one_node[1])
    assert comparison["within"] and comparison["epochs"] == [EPOCHS, EPOCHS], comparison
    assert not comparison["bitwise"], "랭크 2개가 한 장치와 비트 단위로 같다면 비교가 무엇을 재는지 다시 보세요"
    assert _epochs(one_node[0]) == list(range(1, EPOCHS + 1)), "로그는 랭크 0만 한 번씩 찍는다"


def test_two_nodes_line_reaches_the_single_parameters(single, tmp_path):
    """Two torchrun agents (two "nodes" of 2 CPU ranks, N = 4) meet at 127.0.0.1 exactly as two hosts would."""
    port = _free_port()
    line = commands.recipe_nodes(nproc=RANKS, head="127.0.0.1", port=port)
    assert line == commands.recipe_nodes().replace("HEAD_NODE:29500", f"127.0.0.1:{port}").replace(
        "--nproc_per_node=8", f"--nproc_per_node={RANKS}")
    folder = recipe.copy_recipe(tmp_path / "nodes")  # 두 노드가 같은 폴더를 본다: 공유 파일 시스템
    agents = [recipe.start(line, folder)]
    try:
        _wait_listening(port, agents[0])  # 첫 에이전트가 랑데부 저장소를 연 뒤에 둘째 노드
        agents.append(recipe.start(line, folder))
        runs = [recipe.finish(agent, line, timeout=300) for agent in agents]
    finally:
        for agent in agents:
            if agent.poll() is None:
                recipe._stop(agent)
    assert [r["returncode"] for r in runs] == [0, 0], runs[0]["stderr_tail"] + runs[1]["stderr_tail"]
    assert sorted(len(r["log"]) for r in runs) == [0, EPOCHS], "로그는 랭크 0이 있는 노드 하나만 찍는다"
    comparison = recipe.compare(single[1], _ddp_checkpoint(folder))
    assert comparison["within"] and not comparison["bitwise"], comparison


def test_resumed_run_reaches_the_uninterrupted_parameters(one_node, tmp_path):
    """Stopped after 3 epochs and run again, every rank reads the checkpoint (map_location) and goes on from epoch 4.
    With N = 2 the All-Reduce adds two values (a + b = b + a), so the end is bitwise the uninterrupted run's."""
    line = commands.recipe_torchrun(nproc=RANKS)
    first, folder = _run(tmp_path, "resume", f"{line} --epochs 3")
    second = recipe.run(line, folder, timeout=300)
    assert second["returncode"] == 0, second["stderr_tail"]
    assert _epochs(first) == [1, 2, 3] and _epochs(second) == list(range(4, EPOCHS + 1))
    assert second["log"] == one_node[0]["log"][3:]
    comparison = recipe.compare(one_node[1], _ddp_checkpoint(folder))
    assert comparison["bitwise"], comparison


@pytest.mark.parametrize("variant", ["clip_before_unscale", "no_set_epoch"])
def test_the_comparison_catches_a_broken_ddp_file(single, tmp_path, variant):
    _, folder = _run(tmp_path, variant, commands.recipe_torchrun(nproc=RANKS), variant)
    comparison = recipe.compare(single[1], _ddp_checkpoint(folder))
    assert not comparison["within"] and comparison["max_diff"] > 10 * comparison["tolerance"], comparison


def _gradient_all_reduces(tmp: Path, variant: str) -> list[int]:
    """Per rank, the All-Reduces of a whole gradient (one bucket here) the process group ran in one epoch."""
    folder = recipe.copy_recipe(tmp / (variant or "ddp"))
    if variant:
        recipe.break_recipe(folder, variant)
    probe = f"{commands.recipe_torchrun(nproc=RANKS)} --epochs 1".replace(
        f"{commands.RECIPE_DIR}/{commands.RECIPE_DDP}", f"{PROBE} {folder} {commands.RECIPE_DIR}/{commands.RECIPE_DDP}")
    run = recipe.run(probe, folder, timeout=300)
    assert run["returncode"] == 0, run["stderr_tail"]
    params, _ = recipe.parameters(_ddp_checkpoint(folder))
    ranks = [json.loads((folder / f"probe-rank{r}.json").read_text(encoding="utf-8")) for r in range(RANKS)]
    return [sum(1 for item in items if item["op"] == "all_reduce" and item["numel"] == params.numel())
            for items in ranks]


def test_accumulation_all_reduces_once_per_step(tmp_path):
    """The profiler counts what the process group ran: with forward and backward inside no_sync() for the first K-1
    micro-batches, one gradient All-Reduce per optimizer step; with the forward outside, one per micro-batch (the
    result is the same, so only this count shows the mistake)."""
    assert _gradient_all_reduces(tmp_path, "") == [STEPS] * RANKS
    assert _gradient_all_reduces(tmp_path, "forward_outside_no_sync") == [STEPS * ACCUM] * RANKS


def test_grad_scaler_on_the_cpu_changes_no_value(single, tmp_path):
    """The scripts keep GradScaler on on the CPU: it multiplies the loss by a power of two and divides the gradients
    back, so the fp32 parameters are bitwise those of the same script without a scaler."""
    folder = recipe.copy_recipe(tmp_path / "no-scaler")
    path = folder / commands.RECIPE_DIR / commands.RECIPE_SINGLE
    text = path.read_text(encoding="utf-8")
    old = "    scaler = torch.amp.GradScaler(device.type)\n"
    assert text.count(old) == 1
    path.write_text(text.replace(old, "    scaler = torch.amp.GradScaler(device.type, enabled=False)\n"), encoding="utf-8")
    run = recipe.run(commands.recipe_single(), folder, timeout=300)
    assert run["returncode"] == 0, run["stderr_tail"]
    assert recipe.compare(single[1], recipe.checkpoint(folder, commands.RECIPE_SINGLE))["bitwise"]


def test_bad_input_gets_a_korean_message(tmp_path):
    folder = recipe.copy_recipe(tmp_path / "bad")
    plain = recipe.run(f"python {commands.RECIPE_DIR}/{commands.RECIPE_DDP}", folder, timeout=120)
    assert plain["returncode"] == 2 and "torchrun으로 실행하세요" in plain["stderr_tail"], plain
    uneven = recipe.run(f"{commands.recipe_torchrun(nproc=RANKS)} --batch 98", folder, timeout=120)
    assert uneven["returncode"] != 0 and "나누어떨어지지 않습니다" in uneven["stderr_tail"], uneven
    # 랭크는 안내를 찍고 종료 코드 2로 끝난다: 스크립트의 traceback은 없다 (torchrun은 자기 요약을 덧붙인다)
    assert re.search(r"exitcode\s*:\s*2\b", uneven["stderr_tail"]), uneven["stderr_tail"]
    assert f'{commands.RECIPE_DDP}", line' not in uneven["stderr_tail"]
    assert not (folder / recipe.CHECKPOINT[commands.RECIPE_DDP]).exists()


# ----------------------------------------------------------------------------- Slurm, one real node

@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("slurm"), env=clean_env(GLOO_SOCKET_IFNAME="lo")) as cluster:
        yield cluster


def test_sbatch_line_reaches_the_single_parameters(slurm, single, tmp_path):
    line = commands.recipe_sbatch(cpu_ranks=RANKS)
    assert line.endswith(commands.recipe_sbatch()[len("sbatch "):])
    folder = recipe.copy_recipe(tmp_path / "submit")
    # 독자가 가상환경을 켠 셸: 그 python과 torchrun이 PATH의 맨 앞 (sbatch는 제출한 셸의 환경을 작업에 넘긴다)
    job_id = slurm.submit(line, cwd=folder, extra_env={"PATH": f"{recipe.shell_env()['PATH']}{os.pathsep}{slurm.env['PATH']}"})
    info = slurm.wait(job_id, 300)
    out = (folder / f"ddp-recipe-{job_id}.out").read_text(errors="replace")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", f"{info}\n{out[-3000:]}"
    assert f"노드 1대 × 랭크 {RANKS}개" in out and len(recipe.epoch_lines(out)) == EPOCHS, out[-3000:]
    comparison = recipe.compare(single[1], _ddp_checkpoint(folder))
    assert comparison["within"], comparison


def test_sbatch_script_matches_its_documented_lines():
    script = (REPO / commands.RECIPE_DIR / commands.RECIPE_SBATCH).read_text(encoding="utf-8")
    assert f"#SBATCH --gpus-per-node={commands.GPUS_PER_NODE}" in script and "#SBATCH --nodes=2" in script
    assert commands.recipe_sbatch(cpu_ranks=commands.CPU_RANKS) in script
    assert f'NPROC_PER_NODE="${{NPROC_PER_NODE:-{commands.CPU_RANKS}}}"' in script
    assert f"{commands.RECIPE_DIR}/{commands.RECIPE_DDP}" in script


# ----------------------------------------------------------------------------- the files and the page

@pytest.mark.parametrize("name", [commands.RECIPE_SINGLE, commands.RECIPE_DDP])
def test_recipe_files_stand_alone(name):
    """A reader copies the files: they import nothing from this repository."""
    tree = ast.parse((REPO / commands.RECIPE_DIR / name).read_text(encoding="utf-8"))
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert modules <= {"argparse", "os", "contextlib", "pathlib", "torch", "sklearn"}, modules


def _chapter() -> tuple[str, str]:
    cells = json.loads(CHAPTER.read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return markdown, code


def test_the_page_explains_every_change_once_in_order():
    changes = changes_view.changes()
    markdown, code = _chapter()
    glued = re.findall(r"```\{glue:md\} ch14-change-(\d+)\n```", markdown)
    assert glued == [str(c.number) for c in changes] and len(changes) == len(changes_view.STARTS)
    items = re.findall(r"^\*\*([①-⑳])\*\* (.+)$", markdown, re.M)
    assert [number for number, _ in items] == [chr(ord("①") + i) for i in range(len(changes))]
    assert all("{ref}`" in text for _, text in items), "바꾼 곳마다 그것을 잰 절을 {ref}로 가리킨다"
    assert all(any(sign == "+" for sign, _ in c.lines) for c in changes)
    assert 'glue(f"ch14-change-{change.number}", change.markdown()' in code


def _code(name: str) -> list[str]:
    """The file's lines after its module docstring."""
    text = (REPO / commands.RECIPE_DIR / name).read_text(encoding="utf-8")
    return text.splitlines()[ast.parse(text).body[0].end_lineno:]


def test_the_changes_are_every_changed_line():
    """Every line a unified diff of the two files shows (after the module docstrings) is in exactly one change."""
    diff = [line for line in difflib.unified_diff(_code(commands.RECIPE_SINGLE), _code(commands.RECIPE_DDP), n=0,
                                                  lineterm="") if not line.startswith(("---", "+++", "@@"))]
    shown = [f"{sign}{text}" for change in changes_view.changes() for sign, text in change.lines]
    assert diff and sorted(shown) == sorted(diff)


def test_a_moved_anchor_is_caught(monkeypatch):
    monkeypatch.setattr(changes_view, "STARTS", (*changes_view.STARTS, "this line is not in the file"))
    with pytest.raises(ValueError, match="is on 0 added lines"):
        changes_view.changes()


def test_the_page_renders_and_runs_the_tested_commands():
    _, code = _chapter()
    assert "commands.bash_block(*commands.recipe_commands()" in code
    assert "commands.recipe_commands()" in code and '"-m", "labs.recipe"' in code
    assert set(commands.recipe_commands()) <= set(commands.page_commands())
    assert commands.recipe_commands() == [
        "python recipe/train_single.py",
        "torchrun --standalone --nproc_per_node=1 recipe/train_ddp.py",
        "torchrun --standalone --nproc_per_node=8 recipe/train_ddp.py",
        "torchrun --nnodes=2 --nproc_per_node=8 --rdzv-backend=c10d --rdzv-endpoint=HEAD_NODE:29500 recipe/train_ddp.py",
        "sbatch recipe/train_ddp.sbatch",
        "NPROC_PER_NODE=2 sbatch --nodes=1 --gpus-per-node=0 --cpus-per-task=2 recipe/train_ddp.sbatch",
    ]


def test_broken_variants_edit_one_place_each(tmp_path):
    for variant in recipe.BROKEN:
        folder = recipe.copy_recipe(tmp_path / variant)
        before = (folder / commands.RECIPE_DIR / commands.RECIPE_DDP).read_text(encoding="utf-8")
        recipe.break_recipe(folder, variant)
        after = (folder / commands.RECIPE_DIR / commands.RECIPE_DDP).read_text(encoding="utf-8")
        assert before != after
        compile(after, variant, "exec")
