"""A small FSDP in one class: every rank stores only its shard of each layer's weight.

Which weights are sharded is one rule, :func:`sharded_modules`: by default every module whose own
``weight`` parameter has two or more dimensions (``nn.Linear``, ``nn.Embedding``, a convolution, or the
reader's own linear class alike), or the classes or the predicate passed as ``shard``; when no module
qualifies the constructor refuses in Korean rather than keep the whole model on every rank.

Each such weight is flattened, padded to a multiple of N and cut into N equal shards; each rank keeps
only its own shard, as the ``nn.Parameter`` registered under the weight's name (what
``model.parameters()`` and the optimizer see). Around each such layer:

* before its forward (forward pre-hook) the shards are all-gathered into the whole weight;
* after its forward the gathered weight's storage is freed (autograd keeps the tensor, not the bytes);
* before its backward (a hook on the layer's output gradient) the weight is all-gathered again into
  the same storage;
* its weight gradient is reduce-scattered (summed, then divided by N) into the shard's ``.grad``, and
  the gathered weight is freed again.

Other parameters (biases, norms) stay whole on every rank; :meth:`FullyShardedDP.finish_gradient_synchronization`
all-reduces and averages their gradients. With ``compute_dtype`` (``torch.bfloat16``) the shards stay
float32 (the master weights), the gathers and the gradient reduce-scatters run in ``compute_dtype``, the
forward runs under ``torch.autocast`` and every stored ``.grad`` is float32. Call the wrapper, not
``.module``: the autocast region is the wrapper's ``forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

ShardRule = Callable[[nn.Module], bool] | tuple[type[nn.Module], ...]


def own_weight(module: nn.Module) -> nn.Parameter | None:
    """The module's own ``weight`` parameter (not one of its children's), or None."""
    return dict(module.named_parameters(recurse=False)).get("weight")


def sharded_modules(module: nn.Module, shard: ShardRule | None = None) -> list[tuple[str, nn.Module]]:
    """The (name, module) pairs inside ``module`` whose weight FullyShardedDP shards.

    ``shard`` None: every module whose own ``weight`` has two or more dimensions (a matrix or more:
    nn.Linear, nn.Embedding, nn.Conv2d, a reader's own linear layer; not a norm's 1-D weight). A tuple of
    classes: the modules of those classes. A function ``module -> bool``: the modules it accepts.
    """
    picked = []
    for prefix, m in module.named_modules():
        if shard is None:
            weight = own_weight(m)
            chosen = weight is not None and weight.dim() >= 2  # 행렬 이상: 층의 클래스는 보지 않는다
        elif isinstance(shard, tuple):
            chosen = isinstance(m, shard)
        else:
            chosen = shard(m)
        if chosen:
            picked.append((prefix, m))
    return picked


@dataclass
class ShardedWeight:
    """One layer's weight: its full shape, its shard on this rank, and the buffer it is gathered into."""

    name: str  # 원래 모듈 안의 이름("0.weight")
    shape: torch.Size
    numel: int
    shard: nn.Parameter  # 이 랭크가 저장하는 조각(옵티마이저가 보는 파라미터)
    gathered: torch.Tensor  # 모은 가중치(패딩 포함)를 담는 버퍼; 쓰지 않을 때 저장 공간은 0바이트


class GatherWeight(torch.autograd.Function):
    """Forward: the shards → the whole weight (All-Gather). Backward: its gradient → the shard's (Reduce-Scatter)."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, fsdp: "FullyShardedDP", weight: ShardedWeight) -> torch.Tensor:
        ctx.fsdp, ctx.weight = fsdp, weight
        fsdp.gather(weight)
        return weight.gathered[:weight.numel].view(weight.shape)  # 패딩을 잘라 원래 모양으로

    @staticmethod
    def backward(ctx, grad_full: torch.Tensor):
        grad_shard = ctx.fsdp.reduce_scatter(ctx.weight, grad_full)
        ctx.fsdp.free(ctx.weight)  # 이 층의 역전파가 끝났다: 모은 가중치를 다시 버린다
        return grad_shard, None, None


class FullyShardedDP(nn.Module):
    """``module`` with the weights :func:`sharded_modules` picks sharded over the ranks of ``process_group``."""

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None,
                 process_group: dist.ProcessGroup | None = None, shard: ShardRule | None = None):
        super().__init__()
        self.module = module
        self.compute_dtype = compute_dtype
        self.process_group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        for p in module.parameters():  # DDP처럼 시작점을 맞춘다: 모든 랭크가 랭크 0의 값에서 출발
            dist.broadcast(p.detach(), group_src=0, group=process_group)
        layers = sharded_modules(module, shard)
        if not layers:
            raise ValueError("FullyShardedDP: 나눌 가중치가 없어 모든 랭크가 모델 전체를 가지게 됩니다. 기본 규칙은 자기 weight "
                             "파라미터가 2차원 이상인 모듈(nn.Linear, nn.Embedding, 직접 만든 선형 층)입니다. 나눌 층을 "
                             "shard=(층 클래스, ...)나 shard=함수(module) -> bool로 알려 주세요.")
        missing = [prefix or type(layer).__name__ for prefix, layer in layers if own_weight(layer) is None]
        if missing:
            raise ValueError(f"FullyShardedDP: shard가 고른 모듈 {', '.join(missing)}에 자기 weight 파라미터가 없습니다. "
                             "weight 파라미터를 가진 모듈만 고르세요.")
        self.weights: dict[nn.Module, ShardedWeight] = {}
        for prefix, layer in layers:
            self.weights[layer] = self.shard(layer, f"{prefix}.weight" if prefix else "weight")
            layer.register_forward_pre_hook(self.before_forward)
            layer.register_forward_hook(self.after_forward)
        shards = {id(w.shard) for w in self.weights.values()}
        self.replicated = [p for p in module.parameters() if id(p) not in shards]  # 통째로 두는 파라미터

    def shard(self, layer: nn.Module, name: str) -> ShardedWeight:
        """Flatten and pad ``layer.weight``, keep this rank's equal piece, register it in the weight's place."""
        own = own_weight(layer)
        assert own is not None  # 생성자가 이미 확인했다
        weight = own.detach()
        size = -(-weight.numel() // self.world_size)  # 올림 나눗셈: 모든 랭크의 샤드 크기가 같다
        flat = torch.zeros(size * self.world_size, dtype=weight.dtype, device=weight.device)
        flat[:weight.numel()] = weight.reshape(-1)  # 끝의 패딩은 0
        shard = nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())  # float32 마스터 샤드
        gathered = torch.empty(size * self.world_size, dtype=self.compute_dtype or weight.dtype, device=weight.device)
        gathered.untyped_storage().resize_(0)  # 아직 모으지 않았다: 0바이트
        layer._parameters["weight"] = shard  # 이름은 그대로("0.weight"), 값은 내 샤드뿐: 전체 가중치는 여기서 사라진다
        return ShardedWeight(name, weight.shape, weight.numel(), shard, gathered)

    # --- 모으기와 버리기 -----------------------------------------------------------------------------

    def gather(self, weight: ShardedWeight) -> None:
        """All-Gather every rank's shard (in the compute dtype) into ``weight.gathered``, allocating its storage."""
        buffer = weight.gathered
        buffer.untyped_storage().resize_(buffer.numel() * buffer.element_size())  # 메모리를 다시 잡는다
        # buffer.data: 같은 저장 공간에 쓰되 autograd의 버전 번호는 올리지 않는다(역전파가 저장한 텐서가 같은 공간을 본다)
        dist.all_gather_single(buffer.data, weight.shard.detach().to(buffer.dtype), group=self.process_group)

    def free(self, weight: ShardedWeight) -> None:
        """Give the gathered weight's bytes back; autograd's reference keeps the tensor, not the memory."""
        weight.gathered.untyped_storage().resize_(0)

    def reduce_scatter(self, weight: ShardedWeight, grad_full: torch.Tensor) -> torch.Tensor:
        """The whole-weight gradient of every rank → the average of this rank's piece, in the shard's dtype."""
        flat = torch.zeros(weight.gathered.numel(), dtype=grad_full.dtype, device=grad_full.device)
        flat[:weight.numel] = grad_full.reshape(-1)  # 패딩 자리의 그래디언트는 0
        piece = torch.empty_like(weight.shard, dtype=grad_full.dtype)
        dist.reduce_scatter_single(piece, flat, group=self.process_group)  # 합: gloo에는 평균(AVG)이 없다
        return piece.to(weight.shard.dtype).div_(self.world_size)  # float32로 바꾸고 N으로 나눠 평균

    # --- 층마다 거는 훅 --------------------------------------------------------------------------------

    def before_forward(self, layer: nn.Module, inputs) -> None:
        weight = self.weights[layer]
        layer._parameters["weight"] = GatherWeight.apply(weight.shard, self, weight)  # 순전파 동안만 전체 가중치

    def after_forward(self, layer: nn.Module, inputs, output: torch.Tensor) -> None:
        weight = self.weights[layer]
        layer._parameters["weight"] = weight.shard  # 다시 샤드만
        self.free(weight)  # 역전파가 쓸 텐서는 autograd가 쥐고 있지만, 그 바이트는 지금 돌려준다
        if output.requires_grad:  # 출력의 그래디언트가 계산되는 순간 = 이 층의 역전파가 시작되기 직전
            output.register_hook(lambda grad: self.before_backward(weight))

    def before_backward(self, weight: ShardedWeight) -> None:
        self.gather(weight)  # 이 층의 역전파가 가중치를 읽기 직전에 다시 모은다

    # --- 학습 루프가 부르는 것 -----------------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self.compute_dtype is None:
            return self.module(*args, **kwargs)
        device_type = next(self.module.parameters()).device.type
        with torch.autocast(device_type, dtype=self.compute_dtype):  # 모은 가중치는 이미 낮은 정밀도
            return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        """Average the replicated parameters' gradients (the shards' were reduce-scattered during backward)."""
        for p in self.replicated:
            if p.grad is not None:
                dist.all_reduce(p.grad, group=self.process_group)
                p.grad.div_(self.world_size)

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """Clip the whole gradient to ``max_norm``, as one process would; return its total norm (every rank the same).

        Each rank holds only its shards' gradients, so ``torch.nn.utils.clip_grad_norm_`` would see a local
        norm. Here the shards' squared sums are added over the ranks (one All-Reduce; padding adds 0) and the
        replicated parameters, whose gradients every rank holds whole, are counted once.
        """
        squares = torch.zeros((), device=next(self.parameters()).device)
        for weight in self.weights.values():
            if weight.shard.grad is not None:
                squares += weight.shard.grad.float().pow(2).sum()
        dist.all_reduce(squares, group=self.process_group)  # 샤드의 제곱합을 랭크끼리 더한다
        for p in self.replicated:
            if p.grad is not None:
                squares += p.grad.float().pow(2).sum()  # 통째로 둔 파라미터는 모든 랭크가 같은 값: 한 번만 더한다
        norm = squares.sqrt()
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)  # torch.nn.utils.clip_grad_norm_과 같은 식
        for p in self.parameters():
            if p.grad is not None:
                p.grad.mul_(scale)
        return norm

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter whole, by its name in the original module (the shards all-gathered in their own dtype)."""
        full = {name: p.detach().clone() for name, p in self.module.named_parameters()}
        for weight in self.weights.values():
            pieces = torch.empty(weight.gathered.numel(), dtype=weight.shard.dtype, device=weight.shard.device)
            dist.all_gather_single(pieces, weight.shard.detach(), group=self.process_group)
            full[weight.name] = pieces[:weight.numel].view(weight.shape).clone()
        return full
