"""The probes of a DDP class, run inside each rank by :mod:`labs.grading.rank`, and the measuring tools the
chapter 13 probes (:mod:`~labs.grading.zero_probes`, :mod:`~labs.grading.fsdp_probes`) share. Nothing here
judges: each probe records raw measurements for :mod:`labs.grading.judge`, in the parent, out of the reader's reach.

- ``broadcast``: a BatchNorm model whose parameters *and* running statistics differ per rank; after
  construction, each one's distance from rank 0's values, and how many parameters carry each kind of hook.
- ``train``: K steps of SGD (measured) and AdamW, next to torch DDP and one process on the global batch. In
  every SGD iteration, on every rank: each ``p.grad`` at the return of ``finish_gradient_synchronization()``
  fitted against the oracle (the global-batch mean at the same weights), this rank's own gradient, the
  ranks' gradients combined by another reduce op and the previous oracle; how much ``p.grad`` changed after
  that return (every rank but 0 starts late, so a reduction nobody waited on cannot have finished); the
  async work left unwaited (:func:`unwaited_work`); the process group's work items, and when the reader called
  each All-Reduce next to when each gradient became ready and backward returned.
- ``frozen`` / ``tied``: elements reduced per iteration with a frozen first layer and with a shared weight.
"""

from __future__ import annotations

import copy
import inspect
import re
import sysconfig
import time
import traceback
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, cast

import torch
import torch.distributed as dist
from torch import nn

from ..context import RankContext
from ..tools.comms import CollectiveCounter, carried_bytes, mark
from ..tools.models import bn_mlp, layer_stack, mse_backward, rank_batch, wrap_ddp
from ..tools.primitives import max_abs_diff
from .config import LR, OPTIMIZER_ARGS, ProbeConfig

Record = dict[str, Any]  # 한 검사가 랭크에서 남기는 기록: 숫자·문자열·목록·사전뿐 (부모가 JSON으로 받는다)
ProbeFn = Callable[[RankContext, type, ProbeConfig, dist.ProcessGroup], Record]

STAGGER_S = 0.1   # 랭크 0을 뺀 랭크가 반복마다 늦게 출발: 기다리지 않은 All-Reduce는 finish가 돌아올 때 끝났을 수 없다
READY, BACKWARD_END = "labs:grad_ready", "labs:backward_end"
END_MARK = 7      # 반복 끝 표시로 All-Reduce하는 int64 원소 수
# 읽는 사람의 줄을 찾을 때 건너뛰는 곳: 표준 라이브러리, torch, 채점기
LIBRARIES = tuple(str(Path(d).resolve()) for d in (sysconfig.get_paths()["stdlib"], Path(torch.__file__).parent, Path(__file__).parent))
# 합(SUM) 대신 다른 op로 All-Reduce했을 때 나오는 값: 랭크들의 그래디언트를 원소마다 이 op로 모은 것
OTHER_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "MAX": lambda t: t.amax(0), "MIN": lambda t: t.amin(0), "PRODUCT": lambda t: t.prod(0)}
# 읽는 사람이 받는 비동기 작업(Work)을 내주는 메서드와, 그 작업을 기다리거나 퓨처로 넘기는 메서드
ISSUE, SETTLE = ("allreduce", "allreduce_coalesced"), ("wait", "get_future")


class Graded(Protocol):
    """What the probes call on the reader's object beyond what every ``nn.Module`` has."""

    def finish_gradient_synchronization(self) -> None: ...
    def gather_full_params(self) -> dict[str, torch.Tensor]: ...


def finish(wrapped: nn.Module) -> None:
    """The reader's ``finish_gradient_synchronization()``."""
    cast(Graded, wrapped).finish_gradient_synchronization()


def takes_cap(cls: type) -> bool:
    """Whether the class is built as ``cls(module, bucket_cap_mb)`` (step 4) or ``cls(module)`` (step 3)."""
    return "bucket_cap_mb" in inspect.signature(cls).parameters


def construct(cls: type, module: nn.Module, cap: float) -> nn.Module:
    return cls(module, bucket_cap_mb=cap) if takes_cap(cls) else cls(module)


def start(ctx: RankContext, cfg: ProbeConfig, batches: int = 1, seed: int = 0) -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    """What every probe starts from: the model (the same on every rank) and ``batches`` global batches of inputs and
    targets of a fixed nonlinear map."""
    torch.manual_seed(cfg.seed)
    model = layer_stack(cfg.width, cfg.depth).to(ctx.device)
    gen = torch.Generator().manual_seed(cfg.seed + seed)
    x = torch.randn(batches * ctx.world_size * cfg.per_rank_batch, cfg.width, generator=gen)
    return model, x.to(ctx.device), torch.tanh(x @ torch.randn(cfg.width, cfg.width, generator=gen)).to(ctx.device)


def grads_of(model: nn.Module) -> list[torch.Tensor | None]:
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def oracle_grads(oracle: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The gradients of one process's backward on ``(x, y)`` (its mean loss), at ``oracle``'s weights."""
    oracle.zero_grad(set_to_none=True)
    mse_backward(oracle, x, y)
    return [p.grad.detach().clone() for p in oracle.parameters() if p.grad is not None]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def _fit(g: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """The scale ``r`` with ``g ≈ r·b`` (least squares) and the relative residual of that fit."""
    r = float((g * b).sum() / (b * b).sum().clamp_min(1e-30))
    return r, _rel(g, r * b)


def compare_grad(g: torch.Tensor | None, oracle: torch.Tensor, ranks_own: list[torch.Tensor], rank: int,
                 previous: torch.Tensor | None) -> Record:
    """One ``p.grad`` against the global-batch mean, each rank's own gradient (``ranks_own``, this rank's
    at ``rank``) combined by another reduce op, and the last iteration's mean."""
    if g is None:
        return {"none": True}
    if g.numel() != oracle.numel():
        return {"none": False, "shape": list(g.shape)}
    g, oracle = g.reshape(-1).double(), oracle.reshape(-1).double()
    own = torch.stack([t.reshape(-1).double() for t in ranks_own])
    (ratio, res), (local_ratio, local_res) = _fit(g, oracle), _fit(g, own[rank])
    return {"none": False, "err": _rel(g, oracle), "ratio": ratio, "res": res, "local_ratio": local_ratio, "local_res": local_res,
            "op_err": {op: min(_rel(g, combine(own)), _rel(g, combine(own) / len(own))) for op, combine in OTHER_OPS.items()},
            "prev_err": None if previous is None else _rel(g, previous.reshape(-1).double())}


def float_calls(counter: CollectiveCounter) -> Record:
    """The block's work items that carried floating-point values (the collective checker's own calls carry
    integers: its fingerprints): how many of each op, the elements and the bytes."""
    items = [item for item in counter.items if item["dtype"].startswith(("float", "bfloat"))]
    return {"ops": dict(Counter(item["op"] for item in items)), "elements": sum(item["numel"] for item in items),
            "bytes": carried_bytes(items)}


@contextmanager
def unwaited_work() -> Iterator[Record]:
    """The async work objects the process group hands out inside the block (``dist.all_reduce(…, async_op=True)``,
    ``group.allreduce(…)``, the coalesced form) neither waited on nor handed to a future (``get_future()``, judged by the
    change after finish): ``dropped``, the reader's line that let go of each (``[file name, line, code]`` of the
    innermost frame outside the libraries and the grader, its trailing comment left out); ``held``, those kept at the end."""
    found: Record = {"dropped": [], "held": 0}
    pending: dict[int, weakref.finalize] = {}

    def let_go(key: int) -> None:
        if pending.pop(key, None) is not None:
            frames = [f for f in traceback.extract_stack() if not str(Path(f.filename).resolve()).startswith(LIBRARIES)]
            found["dropped"].append([Path(frames[-1].filename).name, frames[-1].lineno or 0,
                                     re.sub(r"\s{2,}#.*$", "", frames[-1].line or "").strip()] if frames else None)

    def wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def call(obj: object, *args: Any, **kwargs: Any) -> Any:
            if name in SETTLE and (final := pending.pop(id(obj), None)) is not None:
                final.detach()
            out = original(obj, *args, **kwargs)
            if name in ISSUE and out is not None:
                pending[id(out)] = weakref.finalize(out, let_go, id(out))
            return out
        return call

    saved = [(cls, name, cls.__dict__[name]) for cls, names in ((dist.ProcessGroup, ISSUE), (dist.Work, SETTLE)) for name in names]
    for cls, name, original in saved:
        setattr(cls, name, wrap(name, original))
    try:
        yield found
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)
        found["held"] = len(pending)
        for final in pending.values():
            final.detach()


def settle(ctx: RankContext) -> None:
    """The end of an iteration on every rank: a call no reader makes (a rank with a call more or fewer meets a
    named mismatch, not a peer's call of the same kind), then a barrier: it waits for every earlier work item."""
    dist.all_reduce(torch.zeros(END_MARK, dtype=torch.int64, device=ctx.device))
    dist.barrier()


def reductions(counter: CollectiveCounter) -> list[Record]:
    """The process group's All-Reduce work items (the end-of-iteration marker left out): elements, bytes."""
    items = [(sum(i["numels"]), getattr(torch, i["dtype"], None)) for i in counter.work
             if i["op"] == "all_reduce" and not (i["dtype"] == "int64" and i["numels"] == [END_MARK])]
    return [{"numel": n, "bytes": n * (d.itemsize if isinstance(d, torch.dtype) else 4)} for n, d in items]


def probe_broadcast(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    torch.manual_seed(cfg.seed + 1 + ctx.rank)  # 랭크마다 다른 초기값
    model = bn_mlp(cfg.width, cfg.width, cfg.width).to(ctx.device)  # 버퍼(BatchNorm의 running 통계)가 있는 모델
    with torch.no_grad():  # 랭크마다 다른 데이터로 한 번: BatchNorm의 running 통계가 랭크마다 다르다
        model(torch.randn(8, cfg.width, device=ctx.device) + ctx.rank)
    for name, buf in model.named_buffers():
        if not buf.is_floating_point():
            buf += ctx.rank
    params0 = [p.detach().clone() for p in model.parameters()]
    buffers0 = {name: b.detach().clone() for name, b in model.named_buffers()}
    for t in [*params0, *buffers0.values()]:  # 채점기가 랭크 0의 값을 미리 받아 둔다
        dist.broadcast(t, src=0, group=original)
    wrapped = construct(cls, model, cfg.bucket_cap_mb)
    inner = getattr(wrapped, "module", model)
    return {"max_diff": max_abs_diff(list(inner.parameters()), params0),
            "buffers": {name: max_abs_diff(b, buffers0[name]) for name, b in inner.named_buffers() if name in buffers0},
            # 파라미터에 건 훅의 종류: 텐서 훅(register_hook)은 p.grad에 쌓기 전에, 다른 하나는 쌓은 뒤에 불린다
            "hooks": {"tensor": sum(bool(p._backward_hooks) for p in model.parameters()),
                      "post_accumulate": sum(bool(p._post_accumulate_grad_hooks) for p in model.parameters())}}


def _measured_step(ctx: RankContext, wrapped: nn.Module, model: nn.Module, oracle: nn.Module,
                   data: tuple[torch.Tensor, torch.Tensor], step: int, per_rank: int,
                   previous: list[torch.Tensor] | None) -> tuple[Record, list[torch.Tensor]]:
    """One measured iteration of the reader's class: its record, and the oracle's gradients (the next ``previous``)."""
    n = ctx.world_size
    oracle.load_state_dict(model.state_dict())  # 지금의 가중치에서 잰 기준 그래디언트
    target = oracle_grads(oracle, *rank_batch(*data, 0, 1, n * per_rank, step))  # 전역 배치 전체
    own = [oracle_grads(oracle, *rank_batch(*data, r, n, per_rank, step)) for r in range(n)]  # 랭크마다 자기 것
    if ctx.rank > 0:
        time.sleep(STAGGER_S)
    with CollectiveCounter() as counter:
        with unwaited_work() as unwaited:
            mse_backward(wrapped, *rank_batch(*data, ctx.rank, n, per_rank, step))
            mark(BACKWARD_END)
            finish(wrapped)
        at_return = grads_of(model)
        settle(ctx)
    after = [float((a - s).abs().max()) for a, s in zip(at_return, grads_of(model)) if a is not None and s is not None]
    # 호출의 크기; 역전파가 돌아온 순간부터 잰 초: 읽는 사람이 All-Reduce를 부른 순간(마지막은 settle의 표시)과 그래디언트가 준비된 순간
    end = next(ns for name, ns in counter.marks if name == BACKWARD_END)
    return {"calls": reductions(counter), "changed_after": max(after, default=0.0),
            "launches": [(ns - end) * 1e-9 for op, ns in counter.launches if op.startswith("allreduce")][:-1],
            "ready": [(ns - end) * 1e-9 for name, ns in counter.marks if name == READY],
            "unwaited": unwaited,
            "grads": [compare_grad(g, o, [r[i] for r in own], ctx.rank, None if previous is None else previous[i])
                      for i, (g, o) in enumerate(zip(at_return, target))]}, target


def probe_train(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    n, per_rank = ctx.world_size, cfg.per_rank_batch
    init, x, y = start(ctx, cfg, cfg.steps)
    out: Record = {"names": [name for name, _ in init.named_parameters()],
                   "sizes": [p.numel() * p.element_size() for p in init.parameters()],
                   "numels": [p.numel() for p in init.parameters()], "iterations": [], "diffs": {}}
    for opt_name, (opt_cls, kwargs) in OPTIMIZER_ARGS.items():
        measured = opt_name == "sgd"
        model = copy.deepcopy(init)
        if measured:  # 감싸기 전에 건 훅이라 읽는 사람의 훅보다 먼저 불린다: 그래디언트가 준비된 순간
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(lambda _: mark(READY))
        ddp = wrap_ddp(copy.deepcopy(init), ctx.device, process_group=original)
        single, oracle = copy.deepcopy(init), copy.deepcopy(init)
        wrapped = construct(cls, model, cfg.bucket_cap_mb)
        optimizers = [opt_cls(m.parameters(), **kwargs) for m in (model, ddp, single)]
        previous = None
        for step in range(cfg.steps):
            for opt in optimizers:
                opt.zero_grad()
            mine = rank_batch(x, y, ctx.rank, n, per_rank, step)
            if measured:
                record, previous = _measured_step(ctx, wrapped, model, oracle, (x, y), step, per_rank, previous)
                out["iterations"].append(record)
            else:
                mse_backward(wrapped, *mine)
                finish(wrapped)
                settle(ctx)
            mse_backward(ddp, *mine)
            mse_backward(single, *rank_batch(x, y, 0, 1, n * per_rank, step))
            for opt in optimizers:
                opt.step()
        out["diffs"][opt_name] = {k: max_abs_diff(list(model.parameters()), list(m.parameters()))
                                  for k, m in (("ddp", ddp), ("single", single))}
    return out


def _elements_per_iteration(ctx: RankContext, cls: type, cfg: ProbeConfig, model: nn.Module, data: tuple[torch.Tensor, torch.Tensor],
                            make_optimizer: Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]) -> list[int]:
    """All-reduced elements in each of two iterations on ``data`` (the process group's work items)."""
    elements = []
    wrapped = construct(cls, model, cfg.bucket_cap_mb)
    opt = make_optimizer(model.parameters())
    for _ in range(2):
        opt.zero_grad()
        with CollectiveCounter() as counter:
            mse_backward(wrapped, *rank_batch(*data, ctx.rank, ctx.world_size, cfg.per_rank_batch))
            finish(wrapped)
            settle(ctx)
        opt.step()
        elements.append(sum(call["numel"] for call in reductions(counter)))
    return elements


def probe_frozen(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    model, x, y = start(ctx, cfg)
    frozen = list(model[0].requires_grad_(False).parameters())  # 첫 층을 얼린다
    before = [p.detach().clone() for p in frozen]
    # 모든 파라미터를 옵티마이저에 넘기는 흔한 학습 루프: .grad가 None인 파라미터는 건너뛰어야 한다
    elements = _elements_per_iteration(ctx, cls, cfg, model, (x, y), lambda params: torch.optim.AdamW(params, lr=LR, weight_decay=0.1))
    return {"elements": elements, "trainable_elements": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "frozen_change": max_abs_diff(frozen, before)}


def probe_tied(ctx: RankContext, cls: type, cfg: ProbeConfig, original: dist.ProcessGroup) -> Record:
    _, x, y = start(ctx, cfg)
    torch.manual_seed(cfg.seed)  # 두 층이 가중치 하나를 나눠 쓴다: relu(x @ W.T + a) @ W.T + b
    model = nn.Sequential(nn.Linear(cfg.width, cfg.width), nn.ReLU(), nn.Linear(cfg.width, cfg.width)).to(ctx.device)
    model[2].weight = model[0].weight
    single = copy.deepcopy(model)  # 전역 배치로 같은 두 스텝을 밟는 단일 프로세스 (값은 보고만 한다)
    elements = _elements_per_iteration(ctx, cls, cfg, model, (x, y), lambda params: torch.optim.SGD(params, lr=LR))
    opt = torch.optim.SGD(single.parameters(), lr=LR)
    for _ in range(2):
        opt.zero_grad()
        mse_backward(single, x, y)
        opt.step()
    return {"elements": elements, "unique_elements": sum(p.numel() for p in model.parameters()),
            "value_diff": max_abs_diff(list(model.parameters()), list(single.parameters()))}


PROBE_FNS: dict[str, ProbeFn] = {"broadcast": probe_broadcast, "train": probe_train, "frozen": probe_frozen, "tied": probe_tied}
