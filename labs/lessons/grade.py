"""Chapter 9 lab: grade a from-scratch DDP class on real ranks (``python -m labs grade PATH``).

The class is imported inside every rank from the reader's file and put through small probes,
each testing one property against something independent of the reader's code:

- ``broadcast``: ranks start from *different* weights; after construction all must hold rank 0's.
- ``train``: ranks start from the same weights; K steps of SGD and of AdamW are compared with
  ``torch.nn.parallel.DistributedDataParallel`` (a copy of the same model) and with one process
  training on the whole global batch. The profiler counts the All-Reduce calls and elements;
  :class:`~labs.miniddp_trace.AllReduceTrace` sees whether async handles were waited on, how many
  gradients were ready when the first All-Reduce started, and whether ranks agree on every call.
- ``frozen``: the first layer has ``requires_grad=False``; it must not be communicated or changed.
- ``tied``: one weight is used by two layers; it must be reduced once.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import inspect
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from ..comms import CollectiveCounter
from ..context import RankContext
from ..miniddp import MIB, group_by_size
from ..miniddp_trace import AllReduceTrace, CollectiveMismatch
from ..models import mse_backward, rank_batch, wrap_ddp
from ..params import Float, InputFile, Int, Text, seed
from ..primitives import max_abs_diff
from ..registry import Lab
from ..result import Summary, check_at_most, check_close, check_equal, check_true, not_applicable
from .buckets import layer_stack

LR = 0.05
# AdamW는 0에 가까운 그래디언트 성분을 eps 정도까지 키운다: 기본 eps=1e-8이면 합하는 순서에 따른 반올림 차이
# (1e-10 수준)가 torch DDP와 단일 프로세스 사이에서도 1e-4까지 커진다. eps를 키워 비교를 잘 조건화한다.
OPTIMIZERS = {"sgd": lambda params: torch.optim.SGD(params, lr=LR, momentum=0.9),
              "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.01, eps=1e-5)}
TOLERANCE = 1e-5  # torch.testing의 float32 기본 atol
PROBES = ("broadcast", "train", "frozen", "tied")


def load_class(path: str, name: str) -> type:
    """Import the file at ``path`` (by path, not by module name) and return its class ``name``."""
    spec = importlib.util.spec_from_file_location(f"reader_ddp_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


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


def _flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


def _data(width: int, rows: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen)
    return x.to(device), torch.tanh(x @ torch.randn(width, width, generator=gen)).to(device)


def probe_broadcast(ctx: RankContext, cls: type, cfg: dict) -> dict:
    torch.manual_seed(cfg["seed"] + 1 + ctx.rank)  # 랭크마다 다른 초기값
    model = layer_stack(cfg["width"], cfg["depth"]).to(ctx.device)
    rank0 = _flat(model.parameters()).clone()
    dist.broadcast(rank0, src=0)  # 채점기가 랭크 0의 초기값을 미리 받아 둔다
    wrapped = construct(cls, model, cfg["bucket_cap_mb"])
    return {"max_diff": max_abs_diff(_flat(getattr(wrapped, "module", model).parameters()), rank0)}


def _expected_calls(cls: type, trainable: list[nn.Parameter], cap: float) -> int:
    if takes_cap(cls):
        return len(group_by_size(list(reversed(trainable)), int(cap * MIB)))
    return len(trainable)


def _hook_kinds(params: list[nn.Parameter]) -> dict:
    """Hooks on the parameters: tensor hooks run *before* accumulation, post-accumulate ones after."""
    return {"before_accumulation": sum(len(p._backward_hooks or {}) for p in params),
            # 채점기가 건 훅 하나를 뺀다
            "without_post_hook": sum(len(p._post_accumulate_grad_hooks or {}) < 2 for p in params)}


def _train(ctx: RankContext, cls: type, cfg: dict, optimizer: str, measure: dict | None) -> dict:
    n, per_rank = ctx.world_size, cfg["per_rank_batch"]
    torch.manual_seed(cfg["seed"])
    init = layer_stack(cfg["width"], cfg["depth"])
    x, y = _data(cfg["width"], cfg["steps"] * n * per_rank, cfg["seed"], ctx.device)
    model = copy.deepcopy(init).to(ctx.device)
    ready = [0]
    for p in model.parameters():  # 채점기의 훅이 먼저 걸려 먼저 불린다: 준비된 그래디언트 수를 센다
        p.register_post_accumulate_grad_hook(lambda _: ready.__setitem__(0, ready[0] + 1))
    ddp = wrap_ddp(copy.deepcopy(init), ctx.device)
    single = copy.deepcopy(init).to(ctx.device)
    with AllReduceTrace(ctx.device, checked=True, ready=lambda: ready[0]) as trace:
        wrapped = construct(cls, model, cfg["bucket_cap_mb"])
        trainable = [p for p in model.parameters() if p.requires_grad]
        if measure is not None:
            measure.update(_hook_kinds(trainable), n_trainable=len(trainable),
                           expected_calls=_expected_calls(cls, trainable, cfg["bucket_cap_mb"]),
                           calls=[], unwaited=[], async_calls=[], first_launch_ready=[])
        optimizers = [OPTIMIZERS[optimizer](m.parameters()) for m in (model, ddp, single)]
        for step in range(cfg["steps"]):
            for opt in optimizers:
                opt.zero_grad()
            ready[0] = 0
            trace.reset()
            with CollectiveCounter() as counter:
                mse_backward(wrapped, *rank_batch(x, y, ctx.rank, n, per_rank, step))
                wrapped.finish_gradient_synchronization()
                trace.end_iteration()
            if measure is not None:
                measure["calls"].append(counter.counts.get("all_reduce", 0))
                measure["unwaited"].append(trace.unwaited())
                measure["async_calls"].append(sum(c["async"] for c in trace.calls))
                measure["first_launch_ready"].append(trace.calls[0]["ready"] if trace.calls else None)
            trace.wait_leftovers()
            mse_backward(ddp, *rank_batch(x, y, ctx.rank, n, per_rank, step))
            mse_backward(single, *rank_batch(x, y, 0, 1, n * per_rank, step))  # 전역 배치 전체
            for opt in optimizers:
                opt.step()
    mine = list(model.parameters())
    return {"ddp": max_abs_diff(mine, list(ddp.module.parameters())),
            "single": max_abs_diff(mine, list(single.parameters()))}


def probe_train(ctx: RankContext, cls: type, cfg: dict) -> dict:
    measure: dict = {}
    diffs = {name: _train(ctx, cls, cfg, name, measure if name == "sgd" else None) for name in OPTIMIZERS}
    return {**measure, "diffs": diffs}


def _elements_per_iteration(ctx: RankContext, cls: type, cfg: dict, model: nn.Module, optimizer) -> list[int]:
    """All-reduced elements in each of two iterations (profiler count) for ``model`` wrapped in ``cls``."""
    x, y = _data(cfg["width"], ctx.world_size * cfg["per_rank_batch"], cfg["seed"], ctx.device)
    elements = []
    with AllReduceTrace(ctx.device, checked=True) as trace:
        wrapped = construct(cls, model, cfg["bucket_cap_mb"])
        opt = optimizer(model.parameters())
        for _ in range(2):
            opt.zero_grad()
            with CollectiveCounter() as counter:
                mse_backward(wrapped, *rank_batch(x, y, ctx.rank, ctx.world_size, cfg["per_rank_batch"]))
                wrapped.finish_gradient_synchronization()
                trace.end_iteration()
            trace.wait_leftovers()
            opt.step()
            elements.append(sum(i["numel"] for i in counter.items if i["op"] == "all_reduce"))
    return elements


def probe_frozen(ctx: RankContext, cls: type, cfg: dict) -> dict:
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
            "frozen_change": max_abs_diff(_flat(frozen), before)}


def probe_tied(ctx: RankContext, cls: type, cfg: dict) -> dict:
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


def describe_error(error: BaseException, path: str) -> str:
    """``file:line: code — Type: message`` at the deepest frame of the reader's file (else the last frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == Path(path).resolve()] or frames[-1:]
    where = f"{Path(mine[-1].filename).name}:{mine[-1].lineno}: {mine[-1].line} — " if mine else ""
    return f"{where}{type(error).__name__}: {error}"


def grade_class(ctx: RankContext, path: str, name: str, cfg: dict) -> dict:
    """Every probe for one class; an exception is recorded with the reader's line, a mismatch stops the rest."""
    cls = load_class(path, name)
    out: dict = {"name": name, "bucketed": takes_cap(cls), "errors": {}, "mismatch": None}
    probes = {"broadcast": probe_broadcast, "train": probe_train, "frozen": probe_frozen, "tied": probe_tied}
    for key, probe in probes.items():
        try:
            out[key] = probe(ctx, cls, cfg)
        except CollectiveMismatch as error:  # 모든 랭크가 같은 All-Gather에서 함께 알아챈다
            out["mismatch"] = str(error)
            break
        except Exception as error:
            out["errors"][key] = describe_error(error, path)
    return out


REFERENCE = Path(__file__).resolve().parents[1] / "miniddp.py"


def validate(params: dict, world_size: int) -> None:
    """The file and classes, checked once before spawning (Korean errors)."""
    from ..grader import validate as validate_file  # labs.grader가 이 모듈을 불러오므로 여기서 늦게 불러온다

    validate_file(params["path"] or REFERENCE, params["classes"].split())


def rank_fn(ctx: RankContext, path: str, classes: str, bucket_cap_mb: float, steps: int, per_rank_batch: int,
            width: int, depth: int, seed: int) -> dict:
    cfg = {"bucket_cap_mb": bucket_cap_mb, "steps": steps, "per_rank_batch": per_rank_batch, "width": width,
           "depth": depth, "seed": seed}
    path = path or str(REFERENCE)
    return {**ctx.describe(), "classes": [grade_class(ctx, path, name, cfg) for name in classes.split()]}


# --- 요약: 확인 항목 (이 순서가 진단의 우선순위다) -------------------------------------------------

CHECKS = ("broadcast_at_construction", "same_collectives_on_ranks", "hooks_after_accumulation", "handles_waited",
          "collectives_per_iteration", "launch_order", "frozen_untouched", "tied_reduced_once", "matches_oracles")
PROBE_OF = {"broadcast_at_construction": "broadcast", "frozen_untouched": "frozen", "tied_reduced_once": "tied"}


def _all(ranks: list[dict], j: int, probe: str) -> list[dict] | None:
    """One class's probe record on every rank, or None if it raised (or never ran) on any rank."""
    records = [r["classes"][j].get(probe) for r in ranks]
    return None if any(rec is None for rec in records) else records


def class_checks(ranks: list[dict], j: int, steps: int) -> list:
    mismatch = next((r["classes"][j]["mismatch"] for r in ranks if r["classes"][j]["mismatch"]), None)
    b, t, f, tied = (_all(ranks, j, p) for p in PROBES)
    checks = [check_close("broadcast_at_construction", max(r["max_diff"] for r in b) if b else None, 0.0, 0.0,
                          "랭크마다 다른 값으로 만든 모델을 감싸면 모든 랭크의 파라미터가 랭크 0의 초기값과 같아진다(최대 차이)"),
              check_true("same_collectives_on_ranks", mismatch is None, mismatch or "모든 호출 일치",
                         "모든 랭크가 같은 순서로 같은 크기의 All-Reduce를 부른다(호출마다 랭크끼리 원소 수를 맞춰 봄)")]
    if mismatch:
        reason = "랭크들의 All-Reduce가 어긋나 측정할 수 없음(먼저 same_collectives_on_ranks를 고치세요)"
        return checks + [not_applicable(name, reason) for name in CHECKS[2:]]
    m = t[0] if t else {}
    unwaited = sum(sum(r["unwaited"]) for r in t) if t else None
    async_calls = sum(sum(r["async_calls"]) for r in t) if t else 0
    diffs = [d for r in t for opt in r["diffs"].values() for d in opt.values()] if t else []
    ready = [v for r in t for v in r["first_launch_ready"]] if t else []
    checks += [
        check_true("hooks_after_accumulation", bool(t) and m["before_accumulation"] == 0 and m["without_post_hook"] == 0,
                   f"register_hook {m['before_accumulation']}개, 누적 후 훅이 없는 파라미터 {m['without_post_hook']}개"
                   if t else None,
                   "그래디언트 훅은 누적이 끝난 뒤(register_post_accumulate_grad_hook)에 걸려 있고, "
                   "누적 전에 불리는 register_hook은 없다"),
        check_equal("handles_waited", unwaited if async_calls else None, 0,
                    "비동기(async_op=True) All-Reduce의 핸들을 finish_gradient_synchronization()이 끝나기 전에 "
                    "모두 기다렸다(기다리지 않은 핸들 수, 모든 랭크·반복 합)"),
        check_equal("collectives_per_iteration", m.get("calls"), [m["expected_calls"]] * steps if t else None,
                    "반복마다의 All-Reduce 횟수가 기대값과 같다(반복별; 파라미터마다 1번, 또는 크기로 정한 버킷 수)"),
        check_at_most("launch_order", max(ready) if ready and None not in ready else None,
                      m["n_trainable"] - 1 if t else 0,
                      "첫 All-Reduce가 모든 그래디언트가 준비되기 전에 시작된다(그때까지 준비된 그래디언트 수의 최댓값): "
                      "역전파와 통신이 겹친다"),
        check_true("frozen_untouched", bool(f) and all(e == f[0]["trainable_elements"] for r in f for e in r["elements"])
                   and max(r["frozen_change"] for r in f) == 0.0,
                   f"All-Reduce 원소 {f[0]['elements']}개/반복 (학습 파라미터 {f[0]['trainable_elements']}개), "
                   f"얼린 파라미터 변화 {max(r['frozen_change'] for r in f):.3g}" if f else None,
                   "requires_grad=False인 파라미터는 통신하지 않고 바뀌지도 않는다"),
        check_equal("tied_reduced_once", tied[0]["elements"] if tied else None,
                    [tied[0]["unique_elements"]] * 2 if tied else None,
                    "두 층이 공유하는 가중치는 한 번만 All-Reduce한다(반복별 원소 수 = 서로 다른 파라미터 원소 수)"),
        check_at_most("matches_oracles", max(diffs) if diffs else None, TOLERANCE,
                      f"SGD와 AdamW로 {steps}스텝 뒤 파라미터가 torch DDP, 그리고 전역 배치로 학습한 단일 프로세스와 같다"
                      "(최대 절대 차이)"),
    ]
    return checks


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    checks, classes = [], []
    for j, first in enumerate(ranks[0]["classes"]):
        mine = class_checks(ranks, j, params["steps"])
        checks += [dataclasses.replace(c, name=f"{first['name']}.{c.name}") for c in mine]
        errors = {}
        for r in ranks:
            for probe, text in r["classes"][j]["errors"].items():
                errors.setdefault(probe, f"랭크 {r['rank']}: {text}")
        t = _all(ranks, j, "train")
        classes.append({"name": first["name"], "bucketed": first["bucketed"], "errors": errors,
                        "mismatch": next((r["classes"][j]["mismatch"] for r in ranks if r["classes"][j]["mismatch"]), None),
                        "diffs": {opt: {k: max(r["diffs"][opt][k] for r in t) for k in ("ddp", "single")}
                                  for opt in OPTIMIZERS} if t else None,
                        "tied_value_diff": max(r["value_diff"] for r in tied) if (tied := _all(ranks, j, "tied")) else None,
                        "checks": [c.name for c in mine]})
    return Summary({"classes": classes, "tolerance": TOLERANCE}, checks)


LAB = Lab(
    name="grade",
    description="직접 만든 DDP 클래스를 실제 랭크에서 torch DDP·단일 프로세스와 비교해 채점 (python -m labs grade PATH)",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=9,
    default_nproc=2,
    validate=validate,
    params={"path": InputFile("", help="채점할 파이썬 파일 (비우면 참조 구현 labs/miniddp.py)"),
            "classes": Text("BucketedDDP", allow_empty=False, help="채점할 클래스 이름(여러 개면 공백으로 구분)"),
            "bucket_cap_mb": Float(0.008, min=0.0, max=1024.0, min_open=True, help="버킷 클래스에 줄 bucket_cap_mb"),
            "steps": Int(3, min=1, max=20, help="비교할 학습 스텝 수 K"),
            "per_rank_batch": Int(4, min=1, max=256, help="랭크당 배치 B/N"),
            "width": Int(32, min=2, max=512, help="채점 모델의 층 너비"),
            "depth": Int(6, min=2, max=32, help="채점 모델의 층 수"),
            "seed": seed()},
    record_keys=frozenset({"rank", "world_size", "local_rank", "backend", "device", "pid", "host", "classes"}),
    data_keys=frozenset({"classes", "tolerance"}),
)
