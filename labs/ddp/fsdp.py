"""A small FSDP in one class: every rank stores only its shard of each layer's weight.

The weight of each ``nn.Linear``/``nn.Embedding`` is flattened, padded to a multiple of N and cut
into N equal shards; each rank keeps only its own shard, as the ``nn.Parameter`` registered under the
weight's name (what ``model.parameters()`` and the optimizer see). Around each such layer:

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

import torch
import torch.distributed as dist
from torch import nn

SHARDED_LAYERS = (nn.Linear, nn.Embedding)  # 가중치를 샤드로 나누는 층


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
    """``module`` with the weight of every Linear/Embedding sharded over the ranks of ``process_group``."""

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None,
                 process_group: dist.ProcessGroup | None = None):
        super().__init__()
        self.module = module
        self.compute_dtype = compute_dtype
        self.process_group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        for p in module.parameters():  # DDP처럼 시작점을 맞춘다: 모든 랭크가 랭크 0의 값에서 출발
            dist.broadcast(p.detach(), group_src=0, group=process_group)
        self.weights: dict[nn.Module, ShardedWeight] = {}
        for prefix, layer in module.named_modules():
            if isinstance(layer, SHARDED_LAYERS):
                self.weights[layer] = self.shard(layer, f"{prefix}.weight" if prefix else "weight")
                layer.register_forward_pre_hook(self.before_forward)
                layer.register_forward_hook(self.after_forward)
        shards = {id(w.shard) for w in self.weights.values()}
        self.replicated = [p for p in module.parameters() if id(p) not in shards]  # 통째로 두는 파라미터

    def shard(self, layer: nn.Module, name: str) -> ShardedWeight:
        """Flatten and pad ``layer.weight``, keep this rank's equal piece, register it in the weight's place."""
        weight = layer.weight.detach()
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
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter whole, by its name in the original module (the shards all-gathered in their own dtype)."""
        full = {name: p.detach().clone() for name, p in self.module.named_parameters()}
        for weight in self.weights.values():
            pieces = torch.empty(weight.gathered.numel(), dtype=weight.shard.dtype, device=weight.shard.device)
            dist.all_gather_single(pieces, weight.shard.detach(), group=self.process_group)
            full[weight.name] = pieces[:weight.numel].view(weight.shape).clone()
        return full
