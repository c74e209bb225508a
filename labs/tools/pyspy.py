"""Read another process's Python stack from outside with py-spy (``py-spy dump --pid``).

py-spy attaches with ptrace, so nothing has to be prepared inside the stuck process. Where the
kernel only lets a process be traced by its ancestors (Yama ``ptrace_scope=1``, the Ubuntu default)
a process can name any tracer with ``prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)``: the ranks of the
``hangs`` lab do that so that one rank can read its siblings.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)
_THREAD = re.compile(r'^Thread (\d+) \((\w+)\)(?:: "(.*)")?$')  # the name only where py-spy can read it
_FRAME = re.compile(r"^\s+(.+?) \((.+?)(?::(\d+))?\)$")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # py-spy colours its output where the environment forces colour (a Jupyter kernel)


def executable() -> str | None:
    """The py-spy next to this Python (the course's virtual environment), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def allow_any_tracer() -> None:
    """Let a sibling process read this one with ptrace (no effect where Yama is absent)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0)


def dump(pids: list[int], timeout: float = 20.0) -> list[dict]:
    """``py-spy dump --pid`` for each pid, all at once: ``{"pid", "text", "error"}`` per pid."""
    exe = executable()
    if exe is None:
        missing = "py-spy가 설치되어 있지 않습니다: pip install -r requirements.txt로 설치하세요"
        return [{"pid": pid, "text": "", "error": missing} for pid in pids]
    procs = [subprocess.Popen([exe, "dump", "--pid", str(pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for pid in pids]
    out = []
    for pid, proc in zip(pids, procs):
        try:
            text, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            text, err = proc.communicate()
            err = f"py-spy가 {timeout:g}초 안에 끝나지 않음. {err}"
        out.append({"pid": pid, "text": _COLOUR.sub("", text), "error": "" if proc.returncode == 0 else _COLOUR.sub("", err).strip()})
    return out


def main_thread(text: str) -> list[list]:
    """The frames of the dump's main thread (its thread id is the process id), innermost first:
    ``[function, file, line]`` (line ``None`` where py-spy could not tell)."""
    header = re.search(r"^Process (\d+):", text, re.M)
    frames, inside = [], False
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread:
            inside = header is not None and thread[1] == header[1]
            continue
        frame = _FRAME.match(line)
        if inside and frame:
            frames.append([frame[1], frame[2], int(frame[3]) if frame[3] else None])
    return frames
