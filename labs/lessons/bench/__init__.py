"""Chapter 8 lab ``bench``: the same communication measurements on a laptop (gloo, CPU) and a GPU node (NCCL).

One run is one process group (``labs.run("bench", nproc=N)``, or one rank of torchrun); every
rank measures, in that group,

1. the physical ceiling of this machine: a large ``copy_`` (memory bandwidth), by rank 0 alone
   and by all ranks at once;
2. ``dist.all_reduce`` over message sizes, reported like NVIDIA's nccl-tests: time (median of
   repeats after warm-up, each repeat the slowest rank's), ``algbw = S/t`` and
   ``busbw = algbw · 2(N-1)/N``; interleaved with it, chapter 4's ring and the pipelined ring of
   :mod:`labs.ddp.ring` on the same sizes, as paired busbw ratios; and one pipelined All-Reduce with
   every segment's wait and add timed (with one segment per chunk, and with many);
3. one training step of a fixed model (3 MiB of float32 parameters): no communication, a
   manual ``all_reduce`` of every gradient after backward (one call per parameter), and DDP
   with several ``bucket_cap_mb`` values.

``python -m labs bench`` runs it for several N and prints the tables (or ``--json``).

The package is split by job: :mod:`.measure` (the rank side), :mod:`.summary` (rows, fits, checks)
and :mod:`.report` (the text tables and JSON of ``python -m labs bench``); the cost model and the
training step the chapter shows are in :mod:`labs.ddp.cost_model` and :mod:`labs.ddp.step`.
"""

from __future__ import annotations

from ...ddp.ring import SEGMENT_BYTES
from ...errors import LabConfigError
from ...params import Float, Int, ListOf, seed
from ...registry import Lab
from . import report
from .measure import CAPS, QUICK, SIZES, BenchRecord, rank_fn
from .summary import BenchData, summarize


def validate(params: dict, world_size: int) -> None:
    odd = [size for size in params["sizes"] if size % 4]
    if odd:
        raise LabConfigError(f"인자 sizes: 각 크기는 4바이트(float32)의 배수여야 합니다. 받은 값: {odd}. 예: sizes='4K 1M 64M'")


LAB = Lab(
    name="bench",
    description="메시지 크기별 All-Reduce의 시간·algbw·busbw(nccl-tests 방식), 직접 만든 링과 라이브러리 비교, "
                "메모리 복사 상한, DDP 버킷 크기별 스텝 시간 측정",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    validate=validate,
    chapter=8,
    report=report,
    record=BenchRecord,
    data=BenchData,
    params={"sizes": SIZES,
            "repeats": Int(QUICK["repeats"], min=1, max=1000, help="크기마다 재는 반복 수"),
            "warmup": Int(QUICK["warmup"], min=0, max=100, help="재기 전에 버리는 반복 수"),
            "memcpy_mb": Int(QUICK["memcpy_mb"], min=1, max=4096, help="메모리 복사 상한을 잴 크기(MiB)"),
            "ddp_steps": Int(QUICK["ddp_steps"], min=1, max=1000, help="DDP 스텝 시간을 재는 스텝 수"),
            "caps_mb": ListOf(Float(25.0, min=0.0, max=4096.0, min_open=True), CAPS,
                              help="비교할 bucket_cap_mb 값들(MiB)"),
            "width": Int(256, min=1, max=4096, help="DDP 모델 층의 너비"),
            "depth": Int(12, min=1, max=64, help="DDP 모델 층 수"),
            "batch": Int(64, min=1, max=4096, help="랭크당 배치"),
            "accum_steps": Int(4, min=1, max=64, help="no_sync 누적 마이크로 스텝 수"),
            # 16 KiB 이상: gloo는 메시지마다 헤더 144바이트를 더 쓴다(1 KiB 세그먼트로 8 MiB를 보낼 때 커널이 센
            # 바이트에서 잰 값). 세그먼트가 14 KiB보다 작으면 그 헤더가 트래픽의 1 %를 넘어 "세그먼트로 잘라도 트래픽은
            # 늘지 않는다"가 틀린다
            "segment_kb": Int(SEGMENT_BYTES >> 10, min=16, max=1 << 20, help="파이프라인 링의 세그먼트 크기(KiB, 16 이상)"),
            "seed": seed()},
)
