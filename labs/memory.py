"""Chapter 13's memory calculator: the bytes one GPU holds to train a model, from measured bytes per parameter.

The only arithmetic of the calculator lives here; the page's script (``memory_calc.js``) repeats it on
the numbers :func:`calculator_config` hands it, and a test runs both on a grid of inputs.

Per GPU, with Ψ parameters, N GPUs and p, g, b, k the bytes per parameter of the parameters, gradients,
DDP's flat buckets and optimizer state (the ZeRO paper's accounting, Rajbhandari et al. 2020, plus DDP's
buckets; k includes the fp32 master weights in mixed precision):

* DDP: p·Ψ + g·Ψ + b·Ψ + k·Ψ (every GPU holds everything; N does not appear)
* ZeRO-1 (under DDP, as chapter 13 builds it): p·Ψ + g·Ψ + b·Ψ + k·Ψ/N
* ZeRO-2: p·Ψ + (g + k)·Ψ/N, ZeRO-3 / FSDP: (p + g + k)·Ψ/N (the gradients are reduce-scattered into
  shards: no full-size flat copy; their temporary buffers are not counted)

b is DDP's default: with ``gradient_as_bucket_view=False`` the reducer keeps its buckets beside ``p.grad``,
a second copy of every gradient (chapter 7.9); ``bucket_view=True`` (``gradient_as_bucket_view=True``)
makes ``p.grad`` a view into the buckets, and b drops out (the ZeRO paper's numbers).

p, g, b and k are not typed here: :func:`measured_bytes` reads them from the ``zero`` lab (float32) and the
``mixed`` lab (bf16 mixed precision with fp32 master weights), both counted from tensor storages on real
ranks. Activations are an estimate, not a measurement: a transformer layer keeps about 16·b·s·h values
for backward (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
their 34·s·b·h bytes in 16-bit less the two dropout masks, with the attention scores not stored, as
FlashAttention does), in the compute dtype (the parameters' element size), times L layers. Logits,
temporary buffers and the allocator's slack are not counted.
"""

from __future__ import annotations

KINDS = ("params", "grads", "buckets", "state", "activations")
# 전략마다 (이름, N으로 나누는 종류, DDP의 버킷이 있는가). 나머지 종류는 GPU마다 통째로
STRATEGIES = {"ddp": ("DDP", (), True), "zero1": ("ZeRO-1", ("state",), True),
              "zero2": ("ZeRO-2", ("grads", "state"), False), "zero3": ("ZeRO-3 / FSDP", ("params", "grads", "state"), False)}
PRECISIONS = {"fp32": "fp32", "bf16_mixed": "bf16 혼합 (fp32 마스터 가중치)"}
OPTIMIZERS = {"sgd": "SGD (모멘텀)", "adamw": "AdamW"}
ACTIVATION_VALUES = 16  # 층 하나가 토큰 하나·은닉 차원 하나마다 역전파용으로 두는 값의 수 (추정)
GPU_GB = (24, 80, 141)  # 견주어 볼 GPU 메모리 (GB = 10⁹바이트)
GB = 1e9
# (이름, Ψ, 은닉 크기 h, 층 수 L): 그 크기의 널리 알려진 모델의 모양 (GPT-3 논문의 표, Llama 2)
PRESETS = (("125M", 125e6, 768, 12), ("350M", 350e6, 1024, 24), ("1.3B", 1.3e9, 2048, 24),
           ("7B", 7e9, 4096, 32), ("13B", 13e9, 5120, 40), ("70B", 70e9, 8192, 80))


def measured_bytes(zero, mixed) -> dict[str, dict[str, dict[str, float]]]:
    """Bytes per parameter by precision, optimizer and kind, from a ``zero`` and a ``mixed`` lab run."""
    return {"fp32": zero.data["bytes_per_param"], "bf16_mixed": mixed.data["bytes_per_param"]}


def per_gpu(per_param: dict[str, float], n_params: float, n_gpus: int, strategy: str, batch: int, seq: int,
            hidden: int, layers: int, bucket_view: bool = False) -> dict[str, float]:
    """Bytes one GPU holds, by kind (:data:`KINDS`), for one precision and optimizer's ``per_param`` bytes
    (``bucket_view``: DDP with ``gradient_as_bucket_view=True``, no bucket copy)."""
    _, sharded, with_buckets = STRATEGIES[strategy]
    held = {k: per_param[k] * n_params / (n_gpus if k in sharded else 1) for k in ("params", "grads", "state")}
    held["buckets"] = per_param["buckets"] * n_params if with_buckets and not bucket_view else 0.0
    held["activations"] = ACTIVATION_VALUES * batch * seq * hidden * layers * per_param["params"]
    return held


def fits(held: dict[str, float], gpu_gb: float) -> bool:
    return sum(held.values()) <= gpu_gb * GB


def calculator_config(measured: dict) -> dict:
    """Everything the page's script needs, as JSON-able data: the measured bytes and the rules above."""
    return {"bytes": measured, "strategies": {k: {"label": label, "sharded": list(sharded), "buckets": buckets}
                                              for k, (label, sharded, buckets) in STRATEGIES.items()},
            "precisions": PRECISIONS, "optimizers": OPTIMIZERS, "activation_values": ACTIVATION_VALUES,
            "gpus": list(GPU_GB), "gb": GB,
            "presets": [{"name": name, "params": p, "hidden": h, "layers": layers} for name, p, h, layers in PRESETS]}
