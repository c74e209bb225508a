"""What each rank runs to grade the reader's file (the only place it runs): import it under guard, then each class
through the probes of its interface on a fresh process group behind torch's collective checker (what
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` installs: ranks issuing different collectives get a named error, not a hang). The
rank's phase and stack are kept in a file for the parent to name the reader's line after a deadline or a dead rank;
warnings are recorded, never printed (the report shows those of the reader's own calls).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO, TypedDict

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from ..context import RankContext
from . import fsdp_probes, probes, zero_probes
from .config import ProbeConfig
from .probes import ProbeFn, Record, takes_cap
from .source import class_error, kind_of

WATCH_S = 0.2     # 멈춘 곳을 적는 간격
MISMATCH = "Detected mismatch between collectives"
# 인터페이스마다 검사들, 도는 순서로
INTERFACES: dict[str, dict[str, ProbeFn]] = {"ddp": probes.PROBE_FNS, "zero": zero_probes.PROBE_FNS, "fsdp": fsdp_probes.PROBE_FNS}
MAX_WARNINGS = 10  # 기록하는 경고의 수 (서로 다른 것만)
MAX_MESSAGE = 300  # 예외 메시지를 보고서에 옮기는 최대 글자 수


class StackWatch:
    """Keeps ``rank{r}.json`` in ``folder`` up to date: the phase (``import`` or ``run``) and the main
    thread's current stack, so that after a deadline or a dead rank the parent can name the reader's line."""

    def __init__(self, folder: str, rank: int):
        self.path = Path(folder) / f"rank{rank}.json" if folder else None
        self.phase = "start"
        self._main, self._stop, self._lock = threading.get_ident(), threading.Event(), threading.Lock()
        self._last: dict[str, Any] | None = None

    def __enter__(self) -> StackWatch:
        if self.path is not None:
            threading.Thread(target=self._loop, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.write()

    def _loop(self) -> None:
        while not self._stop.wait(WATCH_S):
            self.write()

    def write(self) -> None:
        if self.path is None:
            return
        frame = sys._current_frames().get(self._main)
        frames = [[f.filename, f.lineno, f.name, f.line or ""] for f in traceback.extract_stack(frame)] if frame else []
        state = {"phase": self.phase, "frames": frames}
        with self._lock:
            if state == self._last:
                return
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state), encoding="utf-8")
            os.replace(tmp, self.path)
            self._last = state


def describe_error(error: BaseException, path: str) -> str:
    """``file:line: code — Type: message`` at the deepest frame of the reader's file (else the last frame);
    the message on one line (torch's span several: "Expected … of type torch.Tensor / but got NoneType")."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == Path(path).resolve()] or frames[-1:]
    where = f"{Path(mine[-1].filename).name}:{mine[-1].lineno}: {(mine[-1].line or '').strip()} — " if mine else ""
    return f"{where}{type(error).__name__}: {' '.join(str(error).split())[:MAX_MESSAGE]}"


def import_file(path: str, watch: StackWatch) -> tuple[ModuleType | None, dict[str, str] | None]:
    """The reader's module, or ``(None, error)``: any BaseException at import (SystemExit too) is recorded."""
    watch.set_phase("import")
    try:
        spec = importlib.util.spec_from_file_location(f"reader_ddp_{Path(path).stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path}을(를) 파이썬 모듈로 불러올 수 없습니다")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # @dataclass 등 클래스의 모듈을 sys.modules에서 찾는 코드를 위해
        spec.loader.exec_module(module)
    except BaseException as error:  # SystemExit, KeyboardInterrupt도: 채점기를 끝내게 두지 않는다
        return None, {"kind": type(error).__name__, "text": describe_error(error, path)}
    finally:
        watch.set_phase("run")
    return module, None


@contextmanager
def reader_warnings(path: str) -> Iterator[dict[tuple[str, str, int], Record]]:
    """No warning raised inside the block is printed; those raised while the reader's file is on the stack (torch's
    FutureWarning for a deprecated call, say) are kept once each with the reader's line, in the dict the block fills."""
    mine = Path(path).resolve()
    kept: dict[tuple[str, str, int], Record] = {}

    def keep(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        frames = [f for f in traceback.extract_stack() if Path(f.filename).resolve() == mine]
        if frames and len(kept) < MAX_WARNINGS:
            at = frames[-1].lineno or 0
            kept.setdefault((category.__name__, str(message), at), {"category": category.__name__, "message": str(message),
                                                                    "where": [mine.name, at, (frames[-1].line or "").strip()]})

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = keep
        yield kept


@contextmanager
def checked_group(backend: str) -> Iterator[dist.ProcessGroup]:
    """A fresh process group behind torch's collective checker, the default for the block; yields the
    original default group (for the oracles, whose collectives are not the reader's)."""
    level = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        group = dist.new_group(backend=backend)
    finally:
        dist.set_debug_level(level)
    original = distributed_c10d._get_default_group()
    distributed_c10d._update_default_pg(group)
    try:
        yield original
    finally:
        distributed_c10d._update_default_pg(original)


def grade_class(ctx: RankContext, module: ModuleType, path: str, name: str, cfg: ProbeConfig) -> Record:
    """Every probe for one class; an exception is recorded with the reader's line, a mismatch stops the rest."""
    cls = getattr(module, name, None)
    try:
        problem = class_error(name, cls)
    except (TypeError, ValueError) as error:  # 시그니처를 읽을 수 없는 호출 가능 객체
        problem = f"{name}의 생성자 모양을 읽을 수 없습니다: {error}"
    kind = kind_of(name, cls)
    out: Record = {"name": name, "kind": kind, "input_error": problem, "errors": {}, "phases": {}, "mismatch": None,
                   "bucketed": isinstance(cls, type) and problem is None and kind == "ddp" and takes_cap(cls)}
    if problem is not None or not isinstance(cls, type):
        return out
    with checked_group(ctx.backend) as original:
        for key, probe in INTERFACES[kind].items():
            try:
                out[key] = probe(ctx, cls, cfg, original)
            except BaseException as error:  # 읽는 사람의 코드가 낸 것은 무엇이든 기록한다 (SystemExit도)
                if MISMATCH in str(error):  # 모든 랭크가 같은 호출에서 함께 알아챈다
                    out["mismatch"] = _short_mismatch(str(error))
                    break
                out["errors"][key] = describe_error(error, path)
                out["phases"][key] = getattr(error, "labs_phase", None)  # 13장의 FSDP 검사가 붙이는 단계
    return out


def _short_mismatch(text: str) -> str:
    """torch's mismatch message in the reader's words: which call each rank made."""
    calls = re.findall(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+),?\s*"
                       r"OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?", text)
    if not calls:
        return text.split(".Collectives differ")[0][:400]
    ranks = ", ".join(f"랭크 {rank}: {op}" + (f" 원소 [{shape}]" if shape else "") for rank, _, op, shape in sorted(set(calls)))
    return f"{int(calls[0][1]) + 1}번째 집합 통신에서 랭크들이 서로 다른 호출을 했습니다 ({ranks})"


class RankRecord(TypedDict):
    """What one rank found: the import's outcome, each class's probes, the warnings the reader's calls raised."""

    import_error: dict[str, str] | None  # kind, text
    classes: list[Record]
    warnings: list[Record]  # category, message, where: [파일, 줄, 코드]


def run(ctx: RankContext, path: str, classes: list[str], trace_dir: str, cfg: ProbeConfig) -> RankRecord:
    """The rank's record (:class:`RankRecord`)."""
    with StackWatch(trace_dir, ctx.rank) as watch, reader_warnings(path) as found:
        module, error = import_file(path, watch)
        imported = torch.tensor([int(module is not None)], device=ctx.device)
        dist.all_reduce(imported, op=dist.ReduceOp.MIN)  # 모든 랭크가 불러왔을 때만: 한 랭크만 채점하며 남을 기다리지 않게
        graded = [grade_class(ctx, module, path, name, cfg) for name in classes] if imported.item() and module is not None else []
    return {"import_error": error, "classes": graded, "warnings": list(found.values())}
