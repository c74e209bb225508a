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


def describe_frames(frames: list[tuple[str, int, str]]) -> str:
    """``frames``: (file, line, function), most recent call first."""
    if not frames:
        return "스택을 읽지 못함"
    # DDP's own collectives (buffer broadcast, bucket rebuild) start in C++ from its forward.
    in_collective = any("distributed_c10d" in f or "torch/distributed" in f or f.endswith("nn/parallel/distributed.py")
                        for f, _, _ in frames)
    lab_frames = [(f, line, fn) for f, line, fn in frames
                  if "/labs/" in f and Path(f).name not in ("launch.py", "hangwatch.py")]
    f, line, fn = (lab_frames or frames)[0]
    place = f"{Path(f).name} {line}행 {fn}()"
    return f"{WAITING} ({place})" if in_collective else f"{OUTSIDE} ({place})"


def describe_faulthandler(text: str) -> str:
    """A faulthandler dump ('File "…/x.py", line 12 in fn', most recent call first) as a phrase."""
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text)
    return describe_frames([(f, int(line), fn) for f, line, fn in frames])


def describe_thread(thread: threading.Thread) -> str:
    """Where ``thread`` (of this process) is right now."""
    frame = sys._current_frames().get(thread.ident) if thread.ident is not None else None
    summary = traceback.extract_stack(frame) if frame is not None else []
    return describe_frames([(s.filename, s.lineno or 0, s.name) for s in reversed(summary)])
