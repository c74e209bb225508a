"""Chapter 7 lab: ``torch.compile`` of a DDP model and the graphs DDPOptimizer cuts at bucket boundaries.

A compiled graph's backward runs as one autograd node, so every gradient would become ready at the
end and DDP's bucket All-Reduces could not overlap the backward. Dynamo's DDPOptimizer (torch 2.13,
``torch._dynamo.config.optimize_ddp = True``, the default) therefore splits the forward graph, walking
it from the output back, at DDP's bucket size: each piece is compiled on its own, and its backward
finishes (and fires the hooks of its parameters) before the next piece's backward starts.

Each rank compiles a stack of Linear(256, 256) layers wrapped in DDP with ``bucket_cap_mb`` 1 and 2,
through ``aot_autograd`` with a forward compiler that only counts the graphs it receives (no
inductor, no C++ compiler), and once with ``optimize_ddp = False``. It compares the count with the
rule read from the source (first piece 1 MiB, then the cap, by whole layers), the All-Reduces of the
compiled backward with eager DDP's at the same cap, and the trained parameters with eager DDP's.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

import torch
import torch.distributed as dist
from torch import nn

from ..context import Described, RankContext
from ..ddp.buckets import MIB, ddp_bucket_caps, group_by_size
from ..params import Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal, largest
from ..tools.comms import CollectiveCounter
from ..tools.models import flat_parameters, rank_batch, synthetic_regression, wrap_ddp
from ..tools.primitives import max_abs_diff

WIDTH, BATCH, STEPS, LR = 256, 8, 3, 0.05  # 스텝 1에서 DDP가 버킷을 다시 짜므로 마지막 스텝의 역전파를 센다
CAPS_MB = (1.0, 2.0)
MODES = ("eager", "compiled")
COMPILED_TOL = 1e-5  # 컴파일한 모델과 eager DDP의 파라미터 차이: aot_autograd가 연산을 나눠도 반올림 수준


class Stack(nn.Module):
    """``depth`` Linear(WIDTH, WIDTH) layers with ReLU between them. Its own class in this file, not
    ``nn.Sequential``: Dynamo does not start tracing at a frame inside ``torch.nn`` (DDP's forward breaks the
    graph before it calls the module), so the module's forward must live in user code."""

    def __init__(self, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = torch.relu(x) if i < len(self.layers) - 1 else x
        return x


def counting_backend(graphs: list[int]):
    """An ``aot_autograd`` backend whose forward compiler records each graph's parameter count and runs it as is."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd  # noqa: PLC2701  (torch.compile's documented backend helper)

    def backward_compiler(gm: torch.fx.GraphModule, example_inputs):
        return make_boxed_func(gm.forward)

    def forward_compiler(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(sum(1 for node in gm.graph.nodes if node.op == "placeholder"))
        return make_boxed_func(gm.forward)

    return aot_autograd(fw_compiler=forward_compiler, bw_compiler=backward_compiler)


def train(ctx: RankContext, depth: int, cap_mb: float, compiled: bool, optimize_ddp: bool, seed: int) -> dict:
    """STEPS SGD steps, eager or compiled; the compiled graphs and the last backward's All-Reduce sizes."""
    x, y = synthetic_regression(STEPS * ctx.world_size * BATCH, WIDTH, WIDTH, seed=seed)
    torch.manual_seed(seed)
    model = Stack(depth)
    n_params = len(list(model.parameters()))
    ddp = wrap_ddp(model, ctx.device, bucket_cap_mb=cap_mb)
    graphs: list[int] = []  # 컴파일한 순전파 그래프마다 입력(파라미터·활성값) 수
    arrival: list[int] = []  # 첫 역전파에서 그래디언트가 준비된 순서: DDP가 이 순서로 버킷을 다시 짠다
    for index, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda _, i=index: arrival.append(i) if len(arrival) < n_params else None)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(optimize_ddp=optimize_ddp):
        run = torch.compile(ddp, backend=counting_backend(graphs)) if compiled else ddp
        optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
        for step in range(STEPS):
            xb, yb = (t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, BATCH, step))
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(run(xb), yb)
            with CollectiveCounter() as counter:
                loss.backward()
            optimizer.step()
    return {"graphs": graphs, "arrival": arrival, "allreduce": [item["numel"] for item in counter.items if item["op"] == "all_reduce"],
            "params": flat_parameters(model).tolist()}


class CompileDDPRecord(Described):
    """What each rank of the 'compile_ddp' lab returns."""

    runs: dict[str, dict[str, dict[str, list]]]  # cap -> eager/compiled -> train()의 결과
    no_split: list[int]


def rank_fn(ctx: RankContext, depth: int, seed: int) -> CompileDDPRecord:
    # Dynamo가 DDP의 순전파에서 그래프를 끊을 때(record_function 등) 남기는 경고는 페이지에 보일 까닭이 없다
    torch._logging.set_logs(dynamo=logging.ERROR)
    runs = {}
    for cap in CAPS_MB:
        runs[f"{cap:g}"] = {"eager": train(ctx, depth, cap, compiled=False, optimize_ddp=True, seed=seed),
                            "compiled": train(ctx, depth, cap, compiled=True, optimize_ddp=True, seed=seed)}
    no_split = train(ctx, depth, CAPS_MB[0], compiled=True, optimize_ddp=False, seed=seed)
    return {**ctx.describe(), "runs": runs, "no_split": no_split["graphs"]}


def predicted_pieces(depth: int, cap_mb: float) -> list[list[int]]:
    """DDPOptimizer's rule (torch 2.13): whole layers from the output back, the first piece closes at
    ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (Dynamo passes only ``bucket_bytes_cap``), the others at the cap.
    Each piece as the sorted indices of its parameters (weight 2i, bias 2i+1 of layer i)."""
    layer_bytes = (WIDTH * WIDTH + WIDTH) * 4
    pieces = group_by_size(list(range(depth)), int(cap_mb * MIB), dist._DEFAULT_FIRST_BUCKET_BYTES,
                           nbytes=lambda layer: layer_bytes)  # 출력 쪽부터 센 층 번호 k
    return [sorted(2 * (depth - 1 - k) + j for k in piece for j in (0, 1)) for piece in pieces]


def ddp_bucket_count(arrival: list[int], param_bytes: list[int], cap_mb: float) -> int:
    """How many buckets DDP's rule makes of the parameters in the order their gradients arrived."""
    first, cap = ddp_bucket_caps(cap_mb)
    return len(group_by_size([param_bytes[i] for i in arrival], cap, first, nbytes=int))


def arrival_by_piece(arrival: list[int], pieces: list[list[int]]) -> list[list[int]]:
    """The measured arrival order cut into runs as long as the pieces, each run sorted."""
    runs, start = [], 0
    for piece in pieces:
        runs.append(sorted(arrival[start:start + len(piece)]))
        start += len(piece)
    return runs


class CompileDDPData(TypedDict):
    """The summary data of the 'compile_ddp' lab."""

    caps: list[str]
    pieces: list[int]
    predicted: list[int]
    ddp_buckets: dict[str, list[int]]
    no_split: int
    max_diff: float


def summarize(ranks: list[CompileDDPRecord], backend: str, params: dict[str, Any]) -> Summary[CompileDDPData]:
    depth = params["depth"]
    caps = [f"{cap:g}" for cap in CAPS_MB]
    pieces = [sorted({len(r["runs"][c]["compiled"]["graphs"]) for r in ranks}) for c in caps]
    rule = {c: predicted_pieces(depth, cap) for c, cap in zip(caps, CAPS_MB)}
    # 조각마다: 준비된 순서를 조각 크기대로 자른 구간이 그 조각의 파라미터와 같은가, 그렇게 맞은 조각 수(랭크마다)
    together = [sorted({sum(run == piece for run, piece in zip(arrival_by_piece(r["runs"][c]["compiled"]["arrival"],
                                                                                rule[c]), rule[c])) for r in ranks})
                for c in caps]
    n_elements = depth * (WIDTH * WIDTH + WIDTH)
    param_bytes = [WIDTH * WIDTH * 4, WIDTH * 4] * depth  # weight, bias 순서(model.parameters())
    measured = {f"{c} {m}": sorted({len(r["runs"][c][m]["allreduce"]) for r in ranks}) for c in caps for m in MODES}
    predicted = {f"{c} {m}": sorted({ddp_bucket_count(r["runs"][c][m]["arrival"], param_bytes, float(c)) for r in ranks})
                 for c in caps for m in MODES}
    diff = largest(max_abs_diff(r["runs"][c]["compiled"]["params"], r["runs"][c]["eager"]["params"]) for r in ranks
                   for c in caps)
    checks = [
        check_equal("pieces_follow_rule", pieces, [[len(rule[c])] for c in caps],
                    f"bucket_cap_mb {' · '.join(caps)}에서 DDPOptimizer가 컴파일한 조각 수가 소스의 규칙(출력 쪽부터 층 단위, "
                    "첫 조각 1 MiB, 나머지 cap)과 같다"),
        check_equal("pieces_finish_in_order", together, [[len(rule[c])] for c in caps],
                    "컴파일한 역전파는 조각 단위로, 출력 쪽 조각부터 끝난다: 첫 역전파에서 그래디언트가 준비된 순서를 조각 "
                    "크기대로 자르면 구간마다 그 조각의 파라미터와 같다(cap마다, 그렇게 맞은 조각 수)"),
        check_equal("no_split_without_optimizer", sorted({len(r["no_split"]) for r in ranks}), [1],
                    "optimize_ddp=False면 그래프가 하나다(컴파일한 순전파 그래프 수)"),
        check_equal("buckets_follow_arrival", measured, predicted,
                    "DDP의 All-Reduce 수(마지막 역전파)가 첫 역전파에서 그래디언트가 준비된 순서로 다시 짠 버킷 수와 같다"
                    "(eager·컴파일, cap마다): 컴파일해도 버킷은 리듀서가 정한다"),
        check_equal("every_gradient_reduced_once", sorted({sum(r["runs"][c][m]["allreduce"]) for r in ranks
                                                           for c in caps for m in MODES}), [n_elements],
                    "컴파일해도 모든 그래디언트 원소가 한 번씩 All-Reduce 된다(역전파 한 번에 All-Reduce 한 원소 수)"),
        check_close("compiled_matches_eager", diff, 0.0, COMPILED_TOL,
                    f"{STEPS}스텝 뒤 파라미터가 eager DDP와 같다(최대 절대 차이)"),
    ]
    r0 = ranks[0]["runs"]
    data: CompileDDPData = {"caps": caps,
            "pieces": [len(r0[c]["compiled"]["graphs"]) for c in caps],
            "predicted": [len(rule[c]) for c in caps],
            "ddp_buckets": {m: [len(r0[c][m]["allreduce"]) for c in caps] for m in MODES},
            "no_split": len(ranks[0]["no_split"]),
            "max_diff": diff}
    return Summary(data, checks)


LAB = Lab(
    name="compile_ddp",
    description="torch.compile로 감싼 DDP 모델에서 DDPOptimizer가 버킷 경계에서 그래프를 몇 조각으로 나누는지 세고, "
                "DDP의 버킷 수·eager 결과와 비교",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=7,
    params={"depth": Int(16, min=4, max=24, help="Linear(256, 256) 층 수 (층 하나 약 257 KiB)"),
            "seed": seed()},
    record=CompileDDPRecord,
    data=CompileDDPData,
)
