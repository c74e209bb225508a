"""The ranks' side of the grader: the reader's file is imported and run only here, inside each rank.

Nothing here judges. Each probe records raw measurements for :mod:`labs.grading.judge`, which runs in
the parent where the reader's code cannot reach its thresholds:

- ``broadcast``: a model with BatchNorm whose parameters *and* running statistics differ per rank;
  after construction, each parameter's and each buffer's distance from rank 0's values.
- ``train``: K steps of SGD (measured) and of AdamW, next to torch DDP and one process on the global
  batch. In every SGD iteration, on every rank: each ``p.grad`` right after
  ``finish_gradient_synchronization()`` returns, fitted against the oracle (the global-batch mean
  gradient at the same weights), this rank's own gradient, the ranks' own gradients combined by
  another reduce op (MAX, MIN, PRODUCT) and the previous iteration's oracle; how
  much ``p.grad`` still changed after that return (every rank but 0 starts late, so a reduction
  nobody waited on cannot have finished); and what the process group did (the profiler's work items,
  whatever call path issued them) and the moments the reader's code called each All-Reduce, next to
  the moments each gradient became ready and backward returned.
- ``frozen`` / ``tied``: elements reduced per iteration for a model with a frozen first layer and
  for two layers sharing one weight.

A ZeRO-1 optimizer (``ShardedOptimizer`` or any ``torch.optim.Optimizer``) runs the probes of
:mod:`labs.grading.zero_probes` instead, a small FSDP (``FullyShardedDP``) those of
:mod:`labs.grading.fsdp_probes`.

Every class runs on a fresh process group wrapped in torch's collective checker (the wrapper that
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` installs): ranks that issue different collectives get a named
error at that call instead of a hang, or gloo aborting the process.
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
import time
import traceback
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import distributed_c10d

from ..comms import CollectiveCounter, carried_bytes, mark
from ..context import RankContext
from ..models import layer_stack, mse_backward, rank_batch, wrap_ddp
from ..primitives import max_abs_diff
from .source import class_error, kind_of

LR = 0.05
# AdamW는 0에 가까운 그래디언트 성분을 eps 정도까지 키운다: 기본 eps=1e-8이면 합하는 순서에 따른 반올림 차이
# (1e-10 수준)가 torch DDP와 단일 프로세스 사이에서도 1e-4까지 커진다. eps를 키워 비교를 잘 조건화한다.
OPTIMIZER_ARGS = {"sgd": (torch.optim.SGD, {"lr": LR, "momentum": 0.9}),
                  "adamw": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-5})}
OPTIMIZERS = {name: lambda params, cls=cls, kwargs=kwargs: cls(params, **kwargs)
              for name, (cls, kwargs) in OPTIMIZER_ARGS.items()}
PROBES = ("broadcast", "train", "frozen", "tied")
STAGGER_S = 0.1   # 랭크 0을 뺀 랭크가 반복마다 늦게 출발: 기다리지 않은 All-Reduce는 finish가 돌아올 때 끝났을 수 없다
WATCH_S = 0.2     # 멈춘 곳을 적는 간격
MISMATCH = "Detected mismatch between collectives"
READY, BACKWARD_END = "labs:grad_ready", "labs:backward_end"
END_MARK = 7      # 반복 끝 표시로 All-Reduce하는 int64 원소 수


def takes_cap(cls: type) -> bool:
    """Whether the class is built as ``cls(module, bucket_cap_mb)`` (step 4) or ``cls(module)`` (step 3)."""
    return "bucket_cap_mb" in inspect.signature(cls).parameters


def construct(cls: type, module: nn.Module, cap: float) -> nn.Module:
    return cls(module, bucket_cap_mb=cap) if takes_cap(cls) else cls(module)


class TiedPair(nn.Module):
    """Two layers sharing one weight: ``b(relu(a(x)))`` with ``b.weight is a.weight``."""

    def __init__(self, width: int):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def buffered_model(width: int) -> nn.Sequential:
    """A model with buffers (BatchNorm's running statistics) next to its parameters."""
    return nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width))


# --- 멈춘 곳과 불러오기 단계: 부모가 제한 시간 뒤에 읽는다 ----------------------------------------------

class StackWatch:
    """Keeps ``rank{r}.json`` in ``folder`` up to date: the phase (``import`` or ``run``) and the main
    thread's current stack, so that after a deadline or a dead rank the parent can name the reader's line."""

    def __init__(self, folder: str, rank: int):
        self.path = Path(folder) / f"rank{rank}.json" if folder else None
        self.phase = "start"
        self._main = threading.get_ident()
        self._stop = threading.Event()
        self._last = None
        self._lock = threading.Lock()

    def __enter__(self) -> "StackWatch":
        if self.path is not None:
            threading.Thread(target=self._loop, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
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
    """``file:line: code — Type: message`` at the deepest frame of the reader's file (else the last frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == Path(path).resolve()] or frames[-1:]
    where = f"{Path(mine[-1].filename).name}:{mine[-1].lineno}: {(mine[-1].line or '').strip()} — " if mine else ""
    text = str(error).strip().splitlines()
    return f"{where}{type(error).__name__}: {text[0] if text else ''}"


def import_file(path: str, watch: StackWatch):
    """The reader's module, or ``(None, error)``: any BaseException at import (SystemExit too) is recorded."""
    watch.set_phase("import")
    try:
        spec = importlib.util.spec_from_file_location(f"reader_ddp_{Path(path).stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # @dataclass 등 클래스의 모듈을 sys.modules에서 찾는 코드를 위해
        spec.loader.exec_module(module)
    except BaseException as error:  # SystemExit, KeyboardInterrupt도: 채점기를 끝내게 두지 않는다
        return None, {"kind": type(error).__name__, "text": describe_error(error, path)}
    finally:
        watch.set_phase("run")
    return module, None


def grader_state() -> dict[str, int]:
    """What every loaded ``labs`` module binds (name -> object id): a reader's assignment changes it."""
    return {f"{name}.{key}": id(value) for name, module in list(sys.modules.items())
            if name == "labs" or name.startswith("labs.") for key, value in list(vars(module).items())
            if not key.startswith("__")}


def changed(before: dict[str, int]) -> list[str]:
    after = grader_state()
    return sorted(key for key, ident in before.items() if after.get(key) != ident)


@contextmanager
def checked_group(backend: str):
    """A fresh process group behind torch's collective checker, the default for the block; yields the
    original default group (for the oracles, whose collectives are not the reader's)."""
    level = dist.get_debug_level()
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    try:
        group = dist.new_group(backend=backend)
    finally:
        dist.set_debug_level(level)
    original = distributed_c10d._world.default_pg
    distributed_c10d._update_default_pg(group)
    try:
        yield original
    finally:
        distributed_c10d._update_default_pg(original)


# --- 측정 ----------------------------------------------------------------------------------------------

def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def _data(width: int, rows: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen)
    return x.to(device), torch.tanh(x @ torch.randn(width, width, generator=gen)).to(device)


def _grads(model: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _oracle_grads(oracle: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    oracle.zero_grad(set_to_none=True)
    mse_backward(oracle, x, y)
    return [p.grad.detach().clone() for p in oracle.parameters()]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _fit(g: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """The scale ``r`` with ``g ≈ r·b`` (least squares) and the relative residual of that fit."""
    r = float((g * b).sum() / (b * b).sum().clamp_min(1e-30))
    return r, _rel(g, r * b)


# 합(SUM) 대신 다른 op로 All-Reduce했을 때 나오는 값: 랭크들의 그래디언트를 원소마다 이 op로 모은 것
OTHER_OPS = {"MAX": lambda t: t.amax(0), "MIN": lambda t: t.amin(0), "PRODUCT": lambda t: t.prod(0)}


def compare_grad(g, oracle, ranks_own: list, rank: int, previous) -> dict:
    """One ``p.grad`` against the global-batch mean, each rank's own gradient (``ranks_own``, this rank's
    at ``rank``) combined by another reduce op, and the last iteration's mean."""
    if g is None:
        return {"none": True}
    if g.numel() != oracle.numel():
        return {"none": False, "shape": list(g.shape)}
    g, oracle = g.reshape(-1).double(), oracle.reshape(-1).double()
    own = torch.stack([t.reshape(-1).double() for t in ranks_own])
    ratio, res = _fit(g, oracle)
    local_ratio, local_res = _fit(g, own[rank])
    n = len(ranks_own)
    return {"none": False, "err": _rel(g, oracle), "ratio": ratio, "res": res, "local_ratio": local_ratio,
            "local_res": local_res,
            "op_err": {op: min(_rel(g, combine(own)), _rel(g, combine(own) / n)) for op, combine in OTHER_OPS.items()},
            "prev_err": None if previous is None else _rel(g, previous.reshape(-1).double())}


def float_calls(counter: CollectiveCounter) -> dict:
    """The block's work items that carried floating-point values (the collective checker's own calls carry
    integers: its fingerprints): how many of each op, the elements and the bytes."""
    items = [item for item in counter.items if item["dtype"].startswith(("float", "bfloat"))]
    return {"ops": dict(Counter(item["op"] for item in items)), "elements": sum(item["numel"] for item in items),
            "bytes": carried_bytes(items)}


def settle(ctx: RankContext) -> None:
    """The end of an iteration on every rank: a call no reader makes (so a rank with one more or one
    fewer call of its own meets a named mismatch, not a peer's call of the same kind), then a barrier,
    which waits for every earlier work item of the group (the reductions nobody waited on)."""
    dist.all_reduce(torch.zeros(END_MARK, dtype=torch.int64, device=ctx.device))
    dist.barrier()


def reductions(counter: CollectiveCounter) -> list[dict]:
    """The process group's All-Reduce work items (the end-of-iteration marker left out): elements, bytes."""
    out = []
    for item in counter.work:
        if item["op"] != "all_reduce" or (item["dtype"] == "int64" and item["numels"] == [END_MARK]):
            continue
        numel = sum(item["numels"])
        dtype = getattr(torch, item["dtype"], None)
        size = dtype.itemsize if isinstance(dtype, torch.dtype) else 4
        out.append({"numel": numel, "bytes": numel * size})
    return out


def reduction_launches(counter: CollectiveCounter, origin_ns: int) -> list[float]:
    """When each All-Reduce was called (s from ``origin_ns``), in the caller's thread: the moment the
    reader's code asked for it, not when gloo's worker thread got to it. The last call of the block is
    :func:`settle`'s marker."""
    return [(ns - origin_ns) * 1e-9 for op, ns in counter.launches if op.startswith("allreduce")][:-1]


def _iteration_calls(counter: CollectiveCounter) -> dict:
    """The calls' sizes; launches and gradient-ready moments in seconds from the moment backward returned."""
    end = next(ns for name, ns in counter.marks if name == BACKWARD_END)
    return {"calls": reductions(counter), "launches": reduction_launches(counter, end),
            "ready": [(ns - end) * 1e-9 for name, ns in counter.marks if name == READY]}


def probe_broadcast(ctx: RankContext, cls: type, cfg: dict, original) -> dict:
    torch.manual_seed(cfg["seed"] + 1 + ctx.rank)  # 랭크마다 다른 초기값
    model = buffered_model(cfg["width"]).to(ctx.device)
    with torch.no_grad():  # 랭크마다 다른 데이터로 한 번: BatchNorm의 running 통계가 랭크마다 다르다
        model(torch.randn(8, cfg["width"], device=ctx.device) + ctx.rank)
    for name, buf in model.named_buffers():
        if not buf.is_floating_point():
            buf += ctx.rank
    params0 = [p.detach().clone() for p in model.parameters()]
    buffers0 = {name: b.detach().clone() for name, b in model.named_buffers()}
    for t in [*params0, *buffers0.values()]:  # 채점기가 랭크 0의 값을 미리 받아 둔다
        dist.broadcast(t, src=0, group=original)
    wrapped = construct(cls, model, cfg["bucket_cap_mb"])
    inner = getattr(wrapped, "module", model)
    return {"max_diff": float((_flat(inner.parameters()) - _flat(params0)).abs().max()),
            "buffers": {name: float((_flat([b]) - _flat([buffers0[name]])).abs().max())
                        for name, b in inner.named_buffers() if name in buffers0}}


def probe_train(ctx: RankContext, cls: type, cfg: dict, original) -> dict:
    n, per_rank = ctx.world_size, cfg["per_rank_batch"]
    torch.manual_seed(cfg["seed"])
    init = layer_stack(cfg["width"], cfg["depth"])
    x, y = _data(cfg["width"], cfg["steps"] * n * per_rank, cfg["seed"], ctx.device)
    out = {"names": [name for name, _ in init.named_parameters()],
           "sizes": [p.numel() * p.element_size() for p in init.parameters()],
           "numels": [p.numel() for p in init.parameters()], "iterations": [], "diffs": {}}
    for opt_name in OPTIMIZERS:
        measured = opt_name == "sgd"
        model = copy.deepcopy(init).to(ctx.device)
        if measured:  # 감싸기 전에 건 훅이라 읽는 사람의 훅보다 먼저 불린다: 그래디언트가 준비된 순간
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(lambda _: mark(READY))
        ddp = wrap_ddp(copy.deepcopy(init), ctx.device, process_group=original)
        single = copy.deepcopy(init).to(ctx.device)
        oracle = copy.deepcopy(init).to(ctx.device)
        wrapped = construct(cls, model, cfg["bucket_cap_mb"])
        optimizers = [OPTIMIZERS[opt_name](m.parameters()) for m in (model, ddp, single)]
        previous = None
        for step in range(cfg["steps"]):
            for opt in optimizers:
                opt.zero_grad()
            mine = rank_batch(x, y, ctx.rank, n, per_rank, step)
            everyone = rank_batch(x, y, 0, 1, n * per_rank, step)  # 전역 배치 전체
            if measured:
                oracle.load_state_dict(model.state_dict())  # 지금의 가중치에서 잰 기준 그래디언트
                target = _oracle_grads(oracle, *everyone)
                own = [_oracle_grads(oracle, *rank_batch(x, y, r, n, per_rank, step)) for r in range(n)]  # 랭크마다 자기 것
                if ctx.rank > 0:
                    time.sleep(STAGGER_S)
            with CollectiveCounter() as counter:
                mse_backward(wrapped, *mine)
                mark(BACKWARD_END)
                wrapped.finish_gradient_synchronization()
                at_return = _grads(model)
                settle(ctx)
            if measured:
                settled = _grads(model)
                after = [float((a - s).abs().max()) for a, s in zip(at_return, settled) if a is not None and s is not None]
                out["iterations"].append({
                    **_iteration_calls(counter), "changed_after": max(after, default=0.0),
                    "grads": [compare_grad(g, o, [r[i] for r in own], ctx.rank, None if previous is None else previous[i])
                              for i, (g, o) in enumerate(zip(at_return, target))]})
                previous = target
            mse_backward(ddp, *mine)
            mse_backward(single, *everyone)
            for opt in optimizers:
                opt.step()
        ours = list(model.parameters())
        out["diffs"][opt_name] = {"ddp": max_abs_diff(ours, list(ddp.module.parameters())),
                                  "single": max_abs_diff(ours, list(single.parameters()))}
    return out


def _elements_per_iteration(ctx: RankContext, cls: type, cfg: dict, model: nn.Module, optimizer) -> list[int]:
    """All-reduced elements in each of two iterations (the process group's work items)."""
    x, y = _data(cfg["width"], ctx.world_size * cfg["per_rank_batch"], cfg["seed"], ctx.device)
    elements = []
    wrapped = construct(cls, model, cfg["bucket_cap_mb"])
    opt = optimizer(model.parameters())
    for _ in range(2):
        opt.zero_grad()
        with CollectiveCounter() as counter:
            mse_backward(wrapped, *rank_batch(x, y, ctx.rank, ctx.world_size, cfg["per_rank_batch"]))
            wrapped.finish_gradient_synchronization()
            settle(ctx)
        opt.step()
        elements.append(sum(call["numel"] for call in reductions(counter)))
    return elements


def probe_frozen(ctx: RankContext, cls: type, cfg: dict, original) -> dict:
    torch.manual_seed(cfg["seed"])
    model = layer_stack(cfg["width"], cfg["depth"]).to(ctx.device)
    frozen = list(model[0].parameters())
    for p in frozen:
        p.requires_grad_(False)
    before = _flat(frozen).clone()
    # 모든 파라미터를 옵티마이저에 넘기는 흔한 학습 루프: .grad가 None인 파라미터는 건너뛰어야 한다
    elements = _elements_per_iteration(ctx, cls, cfg, model,
                                       lambda params: torch.optim.AdamW(params, lr=LR, weight_decay=0.1))
    return {"elements": elements, "trainable_elements": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "frozen_change": float((_flat(frozen) - before).abs().max())}


def probe_tied(ctx: RankContext, cls: type, cfg: dict, original) -> dict:
    torch.manual_seed(cfg["seed"])
    model = TiedPair(cfg["width"]).to(ctx.device)
    single = copy.deepcopy(model)  # 전역 배치로 같은 두 스텝을 밟는 단일 프로세스 (값은 보고만 한다)
    elements = _elements_per_iteration(ctx, cls, cfg, model, lambda params: torch.optim.SGD(params, lr=LR))
    x, y = _data(cfg["width"], ctx.world_size * cfg["per_rank_batch"], cfg["seed"], ctx.device)
    opt = torch.optim.SGD(single.parameters(), lr=LR)
    for _ in range(2):
        opt.zero_grad()
        mse_backward(single, x, y)
        opt.step()
    return {"elements": elements, "unique_elements": sum(p.numel() for p in model.parameters()),
            "value_diff": max_abs_diff(list(model.parameters()), list(single.parameters()))}


PROBE_FNS = {"broadcast": probe_broadcast, "train": probe_train, "frozen": probe_frozen, "tied": probe_tied}


def probe_table(kind: str) -> tuple[tuple[str, ...], dict]:
    """The probes of an interface (:func:`labs.grading.source.kind_of`), in the order they run."""
    if kind == "ddp":
        return PROBES, PROBE_FNS
    # 그 모듈들이 이 모듈의 도구를 쓴다: 여기서 불러야 순환하지 않는다
    from . import fsdp_probes, zero_probes

    chosen = zero_probes if kind == "zero" else fsdp_probes
    return chosen.PROBES, chosen.PROBE_FNS


def grade_class(ctx: RankContext, module, path: str, name: str, cfg: dict) -> dict:
    """Every probe for one class; an exception is recorded with the reader's line, a mismatch stops the rest."""
    cls = getattr(module, name, None)
    try:
        problem = class_error(name, cls)
    except (TypeError, ValueError) as error:  # 시그니처를 읽을 수 없는 호출 가능 객체
        problem = f"{name}의 생성자 모양을 읽을 수 없습니다: {error}"
    kind = kind_of(name, cls)
    out: dict = {"name": name, "kind": kind, "bucketed": problem is None and kind == "ddp" and takes_cap(cls),
                 "input_error": problem, "errors": {}, "phases": {}, "mismatch": None}
    if problem is not None:
        return out
    names, fns = probe_table(kind)
    with checked_group(ctx.backend) as original:
        for key in names:
            try:
                out[key] = fns[key](ctx, cls, cfg, original)
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
    ranks = ", ".join(f"랭크 {rank}: {op}" + (f" 원소 [{shape}]" if shape else "")
                      for rank, _, op, shape in sorted(set(calls)))
    return f"{int(calls[0][1]) + 1}번째 집합 통신에서 랭크들이 서로 다른 호출을 했습니다 ({ranks})"


def _agree(ctx: RankContext, ok: bool) -> bool:
    """Whether every rank is ``ok`` (so that no rank goes on grading alone and waits for the others)."""
    flag = torch.tensor([1 if ok else 0], device=ctx.device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def run(ctx: RankContext, path: str, classes: list[str], trace_dir: str, cfg: dict) -> dict:
    """The rank's record: the import's outcome, any change to the grader's modules, each class's probes."""
    record = {"import_error": None, "tampered": [], "classes": []}
    with StackWatch(trace_dir, ctx.rank) as watch:
        before = grader_state()
        module, record["import_error"] = import_file(path, watch)
        record["tampered"] = changed(before)
        if not _agree(ctx, module is not None and not record["tampered"]):
            return record
        for name in classes:
            record["classes"].append(grade_class(ctx, module, path, name, cfg))
            record["tampered"] = changed(before)
            if not _agree(ctx, not record["tampered"]):
                break
    return record
