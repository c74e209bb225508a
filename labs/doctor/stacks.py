"""A rank's faulthandler dump (every thread, written on the doctor's request) read back: the main thread's
frames, its innermost line of the reader's code, and whether it was waiting inside torch.distributed."""

from __future__ import annotations

import re

from .rank.record import ReaderFiles, Site

_SECTION = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+) \(most recent call first\):$", re.M)
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)', re.M)
_COLLECTIVE = ("torch/distributed/", "torch/nn/parallel/distributed.py", "torch/autograd/", "torch/_tensor.py")


def main_frames(dump: str, thread: int | None) -> list[tuple[str, int, str]]:
    """The frames (file, line, function; innermost first) of thread ``thread`` (the main one) in ``dump``."""
    sections = list(_SECTION.finditer(dump))
    wanted = f"0x{thread:016x}" if thread is not None else None
    for i, match in enumerate(sections):
        if wanted is None or match[1] == wanted:
            end = sections[i + 1].start() if i + 1 < len(sections) else len(dump)
            return [(f, int(line), fn) for f, line, fn in _FRAME.findall(dump[match.end():end])]
    return []


def stuck_at(dump: str, thread: int | None, reader: ReaderFiles) -> tuple[Site | None, bool]:
    """The reader's innermost line in the main thread, and whether the thread was inside torch.distributed,
    DDP or a backward pass (waiting for other ranks) rather than in the reader's own code."""
    frames = main_frames(dump, thread)
    site = None
    inside = []
    for f, line, fn in frames:
        if reader.owns(f):
            site = reader.frames([(f, line, fn)])[0]
            break
        inside.append(f)
    waiting = any(part in f for f in inside for part in _COLLECTIVE)
    return site, waiting
