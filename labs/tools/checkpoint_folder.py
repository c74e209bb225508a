"""A training run's checkpoint folder: one run holds it at a time, and its checkpoint resumes only under the
settings it was trained with.

The folder records those settings next to its checkpoint (:data:`CONFIG_NAME`): a run with other settings is
refused (exit 2) unless it starts fresh, and while a run holds the folder (a lock on the folder itself, released
when the run ends or its process dies) a second run is refused. Chapter 6's training script
(:mod:`labs.ddp.train_script`) uses it; the lock and the refusals are harness, not what the chapter teaches.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Iterator

import torch
import torch.distributed as dist

from ..context import RankContext

CHECKPOINT_NAME = "checkpoint.pt"
CONFIG_NAME = "run_config.json"  # what the checkpoints in the folder were trained with
# Every name a run writes in its checkpoint folder (each first as NAME.tmp, then replaced atomically).
FOLDER_FILES = tuple(name + tmp for name in (CHECKPOINT_NAME, CONFIG_NAME) for tmp in ("", ".tmp"))
# What labs.ddp.train_script.save_checkpoint writes: a file without these does not resume.
CHECKPOINT_KEYS = frozenset({"epoch", "model", "optimizer", "history"})


class CheckpointFolderError(RuntimeError):
    """The checkpoint folder cannot be used by this run (another configuration's, or in use)."""


def folder_conflict(ckpt_dir: str, settings: dict, fresh: bool) -> str | None:
    """Why a run with ``settings`` may not use ``ckpt_dir`` (Korean, says what to do), or ``None``."""
    folder = Path(ckpt_dir)
    return busy_message(folder) if folder_in_use(folder) else config_conflict(folder, settings, fresh)


def busy_message(folder: Path) -> str:
    return (f"체크포인트 폴더 {folder}를 다른 학습이 지금 쓰고 있습니다. 두 실행이 한 폴더에 쓰면 서로의 체크포인트를 "
            "덮어씁니다. 그 실행이 끝나기를 기다리거나 다른 폴더를 주세요.")


def config_conflict(folder: Path, settings: dict, fresh: bool) -> str | None:
    """Why the checkpoint in ``folder`` may not be resumed by a run with ``settings``, or ``None``."""
    if fresh or not (folder / CHECKPOINT_NAME).exists():
        return None
    how = "다른 폴더를 주거나, 옛 체크포인트를 지우고 처음부터 학습하려면 fresh=True(스크립트는 --fresh)로 실행하세요."
    try:
        saved = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return (f"체크포인트 폴더 {folder}의 체크포인트에는 어떤 설정으로 학습했는지 적은 {CONFIG_NAME}이(가) 없거나 "
                f"읽을 수 없어 이어서 학습할 수 없습니다. {how}")
    saved = saved if isinstance(saved, dict) else {}
    changed = [f"{name} {saved.get(name)!r} → {value!r}" for name, value in settings.items()
               if saved.get(name) != value]
    if changed:
        return (f"체크포인트 폴더 {folder}의 체크포인트는 다른 설정으로 학습한 것이라 이어서 학습할 수 없습니다"
                f"(저장된 설정 → 이번 설정: {', '.join(changed)}). {how}")
    return unreadable_checkpoint(folder / CHECKPOINT_NAME, how)


def unreadable_checkpoint(path: Path, how: str) -> str | None:
    """Why the checkpoint at ``path`` cannot be resumed (it does not load, or holds no model and optimizer
    state; Korean, ending with ``how``), or ``None``. A small file: loading it once before the ranks is cheap."""
    try:
        state = torch.load(path, map_location="cpu")
    except Exception as err:  # 잘렸거나 다른 파일: pickle, zip, torch가 저마다 다른 예외를 낸다
        why = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    else:
        if isinstance(state, dict) and CHECKPOINT_KEYS <= state.keys():
            return None
        why = "모델과 옵티마이저 상태가 없습니다"
    return (f"체크포인트 파일 {path}을(를) 읽을 수 없어 이어서 학습할 수 없습니다({why[:200]}). 학습이 저장 도중 끊겼거나 "
            f"다른 파일이 그 이름으로 놓였습니다. {how}")


def folder_in_use(folder: Path) -> bool:
    """Whether a run holds the folder's lock now (see :func:`checkpoint_folder`)."""
    if not folder.is_dir():
        return False
    fd, busy = _lock(folder)
    if fd is not None:
        os.close(fd)
    return busy


def _lock(folder: Path) -> tuple[int | None, bool]:
    """(the folder's descriptor holding an exclusive lock, or None; whether another process holds it).
    A file system that cannot lock a folder (some network file systems) gives (None, False): no lock."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None, True
    except OSError:
        os.close(fd)
        return None, False
    return fd, False


@contextlib.contextmanager
def checkpoint_folder(ckpt_dir: str, settings: dict, fresh: bool, ctx: RankContext) -> Iterator[Path | None]:
    """The checkpoint's path for the whole run, the folder held by rank 0 (a lock on the folder itself,
    released when the run ends or its process dies, so nothing is left behind).

    Rank 0 refuses a folder another run holds or one with another configuration's checkpoint, drops
    the old checkpoint when ``fresh`` and records this run's ``settings``, then tells every rank
    (one broadcast); on a refusal every rank raises :class:`CheckpointFolderError` before training.
    """
    if not ckpt_dir:
        yield None
        return
    folder = Path(ckpt_dir)
    fd, refusal = None, None
    try:
        if ctx.rank == 0:
            fd, refusal = _take_folder(folder, settings, fresh)
        # 랭크 0이 폴더를 잡고 설정을 적을 때까지 모두 기다린다: 그 전에 옛 체크포인트를 읽지 않게
        refused = torch.tensor([float(refusal is not None)], device=ctx.device)
        dist.broadcast(refused, src=0)
        if refused.item():
            raise CheckpointFolderError(refusal or f"랭크 0이 체크포인트 폴더 {folder}를 쓸 수 없다고 알렸습니다.")
        yield folder / CHECKPOINT_NAME
    finally:
        if fd is not None:
            os.close(fd)


def _take_folder(folder: Path, settings: dict, fresh: bool) -> tuple[int | None, str | None]:
    """Rank 0's part of :func:`checkpoint_folder`: (the folder's locked descriptor, why it is refused or None)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, busy = _lock(folder)
    if busy:
        return None, busy_message(folder)
    conflict = config_conflict(folder, settings, fresh)
    if conflict:
        return fd, conflict
    if fresh:
        (folder / CHECKPOINT_NAME).unlink(missing_ok=True)
    tmp = folder / (CONFIG_NAME + ".tmp")
    tmp.write_text(json.dumps(settings, indent=1), encoding="utf-8")
    os.replace(tmp, folder / CONFIG_NAME)
    return fd, None
