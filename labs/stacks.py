"""Where a stuck rank is: its Python stack turned into one Korean phrase (in or outside a collective).

The spawn launcher reads a stack that faulthandler wrote on request; a rank under torchrun reads
its own main thread's frames (:mod:`labs.hangwatch`). Both end in :func:`describe_frames`.
"""

from __future__ import annotations

import re
import sys
import threading
import traceback
from pathlib import Path

OUTSIDE = "집합 통신 밖에서 멈춤"
WAITING = "집합 통신에서 다른 랭크를 기다리는 중"
# loss.backward() under DDP: the reducer's All-Reduce runs from autograd's C++ engine, no c10d frame in Python
BACKWARD = "역전파 안에서 기다리는 중(DDP라면 버킷 All-Reduce가 다른 랭크를 기다림)"
STOPPED = "정지된 프로세스(SIGSTOP·디버거): 스택을 보낼 수 없다. 다른 랭크는 이 랭크를 기다린다"


def describe_frames(frames: list[tuple[str, int, str]]) -> str:
    """``frames``: (file, line, function), most recent call first."""
    if not frames:
        return "스택을 읽지 못함"
    # DDP's own collectives (buffer broadcast, bucket rebuild) start in C++ from its forward.
    in_collective = any("distributed_c10d" in f or "torch/distributed" in f or f.endswith("nn/parallel/distributed.py")
                        for f, _, _ in frames)
    in_backward = any("torch/autograd/" in f for f, _, _ in frames)
    lab_frames = [(f, line, fn) for f, line, fn in frames
                  if "/labs/" in f and Path(f).name not in ("launch.py", "hangwatch.py")]
    f, line, fn = (lab_frames or frames)[0]
    state = WAITING if in_collective else BACKWARD if in_backward else OUTSIDE
    return f"{state} ({Path(f).name} {line}행 {fn}())"


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, a debugger): state T or t in /proc (False where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def describe_faulthandler(text: str) -> str:
    """A faulthandler dump ('File "…/x.py", line 12 in fn', most recent call first) as a phrase."""
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text)
    return describe_frames([(f, int(line), fn) for f, line, fn in frames])


def describe_thread(thread: threading.Thread) -> str:
    """Where ``thread`` (of this process) is right now."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    summary = traceback.extract_stack(frame) if frame is not None else []
    return describe_frames([(s.filename, s.lineno or 0, s.name) for s in reversed(summary)])
