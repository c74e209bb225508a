"""Chapter 14's harness: run the reader's recipe as the reader would, and compare where the two scripts arrive.

The scripts (``recipe/train_single.py`` and ``recipe/train_ddp.py``) import nothing from this package: a reader
copies them. Here each run gets a folder of its own holding a copy of ``recipe/`` (the scripts write their checkpoint
into the folder they run in), runs a command line :mod:`labs.commands` renders (the CPU variant of what the page
shows: N CPU ranks with gloo instead of N GPUs) and reads the checkpoint it leaves. The same global batch B must reach
the same parameters as the single-device script within chapter 5's tolerance.

``python -m labs.recipe --workdir DIR`` runs the single script once and the DDP script (and any broken variant) and
prints one JSON object; chapter 14 runs that line through :func:`labs.run_command.run_command`, so `make test` replays
the build's run, keyed by the copies of the scripts in ``DIR`` (the run's ``TMPDIR``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import torch

from . import commands
from .doctor import DoctorReport, examine
from .tools.primitives import ATOL, RTOL

SOURCE = Path(__file__).resolve().parents[1] / commands.RECIPE_DIR
FILES = (commands.RECIPE_SINGLE, commands.RECIPE_DDP, commands.RECIPE_SBATCH)
CHECKPOINT = {commands.RECIPE_SINGLE: "train_single.pt", commands.RECIPE_DDP: "train_ddp.pt"}  # the scripts' default

_UNSCALE = "            scaler.unscale_(optimizer)  # 자르기 전에 배율을 걷어 낸다: 자르는 것은 진짜 그래디언트\n"
_CLIP = "            nn.utils.clip_grad_norm_(model.parameters(), args.clip)\n"
_NO_SYNC = "                with model.no_sync() if k < K - 1 else nullcontext():\n"
_FORWARD = ("                    with torch.autocast(device.type, dtype=torch.float16, enabled=on_gpu):\n"
            "                        loss = F.cross_entropy(model(xk), yk)\n")
_FORWARD_OUTSIDE = ("                with torch.autocast(device.type, dtype=torch.float16, enabled=on_gpu):\n"
                    "                    loss = F.cross_entropy(model(xk), yk)\n")
_BACKWARD = "                    scaler.scale(loss / K).backward()  # K개 평균의 평균 = 배치 B개의 평균\n"

# Mistakes a reader makes in the DDP file, each one edit of it (the text replaced occurs exactly once).
BROKEN: dict[str, tuple[str, str]] = {
    # 배율이 곱해진 그래디언트를 자른다: 노름이 2^16배라 거의 모든 스텝이 아주 작게 잘린다
    "clip_before_unscale": (_UNSCALE + _CLIP, _CLIP + _UNSCALE),
    # 에폭마다 같은 순서: 한 장치 스크립트는 에폭마다 새로 섞는다
    "no_set_epoch": ("        sampler.set_epoch(epoch)  # 에폭마다 다른 순서: 순서는 (seed, epoch)로 정해진다\n", ""),
    # 순전파가 no_sync 밖: 역전파가 마이크로 배치마다 All-Reduce한다 (결과는 같고 통신만 K배)
    "forward_outside_no_sync": (_NO_SYNC + _FORWARD + _BACKWARD, _FORWARD_OUTSIDE + _NO_SYNC + _BACKWARD),
}


class Run(TypedDict):
    """One command line run in its own folder."""

    command: str
    returncode: int
    log: list[str]        # rank 0's epoch lines
    stderr_tail: str


class Comparison(TypedDict):
    """A DDP checkpoint against the single-device one (chapter 5's rule |w − w_1| ≤ atol + rtol·|w_1|)."""

    max_diff: float
    tolerance: float      # atol + rtol·max|w_1|: the rule at the largest parameter
    within: bool          # the rule holds for every parameter
    bitwise: bool
    epochs: list[int]     # epochs done by (single, DDP)


def copy_recipe(dest: Path, source: Path = SOURCE) -> Path:
    """``dest/recipe/`` holding the recipe's files, as a reader copies them; returns ``dest``."""
    (dest / commands.RECIPE_DIR).mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(source / name, dest / commands.RECIPE_DIR / name)
    return dest


def break_recipe(folder: Path, variant: str) -> None:
    """Apply the broken ``variant`` to ``folder/recipe/train_ddp.py`` in place."""
    path = folder / commands.RECIPE_DIR / commands.RECIPE_DDP
    old, new = BROKEN[variant]
    text = path.read_text(encoding="utf-8")
    if text.count(old) != 1:
        raise ValueError(f"{variant}: the edited text occurs {text.count(old)} times in {path}")
    path.write_text(text.replace(old, new), encoding="utf-8")


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def shell_env() -> dict[str, str]:
    """A reader's shell on this machine: this Python's folder first on PATH (its ``python`` and ``torchrun``),
    no torchrun variables inherited, and every rank on 127.0.0.1."""
    env = {key: value for key, value in os.environ.items() if key not in TORCHRUN_VARS}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if sys.platform.startswith("linux"):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # 모든 랭크가 이 기계 안에 있다
    return env


def start(line: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a command line as the reader types it (``bash -c``) in ``cwd``, in a process group of its own."""
    return subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env or shell_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def finish(proc: subprocess.Popen, line: str, timeout: float = 300) -> Run:
    """Wait for ``proc``; past ``timeout`` the whole process group (torchrun and its ranks) gets SIGTERM,
    then SIGKILL, and TimeoutError is raised."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        raise TimeoutError(f"{timeout:g}초 안에 끝나지 않아 멈췄습니다: {line}") from None
    except BaseException:  # Ctrl-C, or SIGTERM to `python -m labs.recipe`: the ranks end too
        _stop(proc)
        raise
    return {"command": line, "returncode": proc.returncode, "log": epoch_lines(out), "stderr_tail": err[-8000:]}


def run(line: str, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None) -> Run:
    """:func:`start` then :func:`finish`."""
    return finish(start(line, cwd, env), line, timeout)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the run's process group (torchrun passes it to its ranks), SIGKILL if it is still there."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
            proc.communicate(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


_EPOCH_LINE = re.compile(r"^에폭 (\d+)/\d+  손실 ([\d.]+)  테스트 정확도 (\d+)/(\d+)$")


def epoch_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if _EPOCH_LINE.match(line)]


def parse_log(lines: list[str]) -> list[tuple[int, float, int, int]]:
    """(epoch, mean loss, correct, total) of each epoch line the scripts print."""
    return [(int(m[1]), float(m[2]), int(m[3]), int(m[4])) for m in map(_EPOCH_LINE.match, lines) if m]


def parameters(checkpoint: Path) -> tuple[torch.Tensor, int]:
    """(every parameter of the checkpoint's model, flattened in float64; the epochs it has done)."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    return torch.cat([t.flatten().double() for t in state["model"].values()]), int(state["epoch"])


def compare(single: Path, ddp: Path) -> Comparison:
    """The DDP checkpoint ``ddp`` against the single-device checkpoint ``single``."""
    (reference, single_epochs), (other, ddp_epochs) = parameters(single), parameters(ddp)
    diff = (other - reference).abs()
    return {"max_diff": float(diff.max()), "tolerance": ATOL + RTOL * float(reference.abs().max()),
            "within": bool((diff <= ATOL + RTOL * reference.abs()).all()), "bitwise": bool(diff.max() == 0),
            "epochs": [single_epochs, ddp_epochs]}


def checkpoint(folder: Path, script: str) -> Path:
    return folder / CHECKPOINT[script]


class Report(TypedDict):
    """What ``python -m labs.recipe`` prints."""

    nproc: int                           # the DDP runs' CPU ranks
    single: Run
    ddp: dict[str, Run]                  # variant ("" = the recipe as it is) → its run
    comparison: dict[str, Comparison]    # variant → its checkpoint against the single one


def run_all(workdir: Path, nproc: int, variants: tuple[str, ...] = ("",), timeout: float = 300) -> Report:
    """The single script once and the DDP script under torchrun for every variant, each in a folder of its own
    under ``workdir`` (copied from ``workdir/recipe``)."""
    source = workdir / commands.RECIPE_DIR
    folders = {name: copy_recipe(workdir / "runs" / (name or "ddp"), source) for name in variants}
    single_folder = copy_recipe(workdir / "runs" / "single", source)
    single = run(commands.recipe_single(), single_folder, timeout)
    report: Report = {"nproc": nproc, "single": single, "ddp": {}, "comparison": {}}
    for name, folder in folders.items():
        if name:
            break_recipe(folder, name)
        report["ddp"][name] = run(commands.recipe_torchrun(nproc), folder, timeout)
        if single["returncode"] == 0 and report["ddp"][name]["returncode"] == 0:
            report["comparison"][name] = compare(checkpoint(single_folder, commands.RECIPE_SINGLE),
                                                 checkpoint(folder, commands.RECIPE_DDP))
    return report


# ----------------------------------------------------------------------------- chapter 14.6: the doctor

GALLERY = SOURCE.parent / "tests" / "doctor_scripts"  # the doctor's gallery: `# doctor: kind` marks each mistake's line
DOCTOR_ARGS = ("--epochs", "2")  # two epochs: enough for set_epoch's repeated order
_MARKER = "# doctor: "


@dataclass(frozen=True)
class DoctorCase:
    """One script the chapter gives the doctor: the recipe, a broken variant of it, or a script of the gallery."""

    name: str      # "" (the recipe), a key of BROKEN, or a file of GALLERY
    mistake: str   # Korean, for the page's table ("" for the recipe)
    kind: str      # the finding the mistake must get ("" for the recipe: none)
    line: str      # text of the line it must be found at (the recipe variants; the gallery marks its own)

    @property
    def script(self) -> str:
        return self.name if self.name.endswith(".py") else f"{commands.RECIPE_DIR}/{commands.RECIPE_DDP}"

    @property
    def args(self) -> tuple[str, ...]:
        return () if self.name.endswith(".py") else DOCTOR_ARGS

    @property
    def command(self) -> str:
        return commands.doctor(self.script, self.args)

    def expected_line(self, folder: Path) -> int:
        """The line of ``folder/script`` the finding must name (1-based)."""
        gallery = self.name.endswith(".py")
        marker = f"{_MARKER}{self.kind}" if gallery else self.line
        lines = (GALLERY / self.name if gallery else folder / self.script).read_text(encoding="utf-8").splitlines()
        found = [number for number, text in enumerate(lines, 1) if marker in text]
        if len(found) != 1:
            raise ValueError(f"{self.name}: {marker!r} occurs {len(found)} times in {self.script}")
        return found[0]


DOCTOR_CASES = (
    DoctorCase("", "", "", ""),
    DoctorCase("clip_before_unscale", "clip_grad_norm_을 scaler.unscale_ 위로 옮김", "clip_scaled", _CLIP.strip()),
    DoctorCase("no_set_epoch", "sampler.set_epoch(epoch)을 지움", "same_order", "for x, y in loader:"),
    DoctorCase("forward_outside_no_sync", "순전파를 no_sync() 밖으로 옮김", "accumulation_sync",
               "loss = F.cross_entropy(model(xk), yk)"),
    DoctorCase("bug_rank0_collective.py", "if rank == 0: 안에서 all_reduce", "collective_mismatch", ""),
    DoctorCase("bug_every_rank_saves.py", "모든 랭크가 같은 파일에 torch.save", "same_file", ""),
    DoctorCase("bug_unused_head.py", "순전파가 쓰지 않는 층까지 DDP로 감쌈", "unused_parameters", ""),
)


def doctor_case(workdir: Path, case: DoctorCase) -> tuple[Path, DoctorReport]:
    """The doctor run on ``case`` from a folder of its own under ``workdir``, as the reader types its command there;
    returns (that folder, the report)."""
    folder = workdir / "doctor" / (case.name.removesuffix(".py") or "recipe")
    if case.name.endswith(".py"):
        folder.mkdir(parents=True)
        text = (GALLERY / case.name).read_text(encoding="utf-8")  # the reader's copy has no answer in it
        (folder / case.name).write_text(re.sub(rf"\s*{_MARKER}\S+", "", text), encoding="utf-8")
    else:
        copy_recipe(folder)
        if case.name:
            break_recipe(folder, case.name)
    with contextlib.chdir(folder):
        return folder, examine(case.script, nproc=commands.CPU_RANKS, args=list(case.args))


def main(argv: list[str] | None = None) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run_command's deadline: stop the runs first
    parser = argparse.ArgumentParser(prog="python -m labs.recipe", description="14장의 두 스크립트를 실행하고 비교합니다.")
    parser.add_argument("--workdir", type=Path, required=True, help="recipe/ 복사본이 있는 폴더 (실행마다 하위 폴더)")
    parser.add_argument("--nproc", type=int, default=commands.CPU_RANKS, help="DDP 스크립트의 CPU 랭크 수")
    parser.add_argument("--variant", action="append", default=[], choices=sorted(BROKEN),
                        help="recipe 그대로에 더해 실행할 잘못된 변형")
    args = parser.parse_args(argv)
    if not (args.workdir / commands.RECIPE_DIR / commands.RECIPE_DDP).is_file():
        parser.error(f"{args.workdir}/{commands.RECIPE_DIR}/에 스크립트가 없습니다. 먼저 labs.recipe.copy_recipe로 복사하세요.")
    print(json.dumps(run_all(args.workdir, args.nproc, ("", *args.variant)), ensure_ascii=False))


if __name__ == "__main__":
    main()
