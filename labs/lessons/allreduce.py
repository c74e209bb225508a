"""Chapter 4 lab: three All-Reduce implementations that must agree, and why DDP averages.

Every rank fills a tensor deterministically from its rank and averages it over all ranks in
three ways: the library's ``dist.all_reduce``; a naive gather-to-rank-0-then-send-back; and a
ring All-Reduce written here from point-to-point ``isend``/``recv`` (reduce-scatter, then
all-gather, 2(N-1) steps). Our own sends go through :class:`P2P`, which counts the payload
bytes, so the ring's 2(N-1)/N·S per rank and the naive root's (N-1)·S can be compared with
theory. The library's sends happen in C++, out of Python's sight; on Linux the kernel still
counts the bytes a process writes to its sockets (``/proc/self/io``), which is how its traffic
is measured here. A small demo tensor records the ring's state after every step for the
chapter's animation, and a last part shows on a real model why the gradients are averaged.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, TypedDict, cast

import torch
import torch.distributed as dist

from ..context import Described, RankContext
from ..ddp.allreduce import library_all_reduce_, naive_all_reduce_
from ..ddp.gradients import gradient_mean_vs_global
from ..ddp.ring import P2P, ring_all_reduce_
from ..params import Int, seed
from ..registry import Lab
from ..result import RankRecords, Summary, check_close, check_equal, largest
from ..tools.comms import written_bytes
from ..tools.models import fingerprint_tensors
from ..tools.primitives import max_abs_diff, sync

IMPLEMENTATIONS = ("library", "naive", "ring")
RELATIVE_TOLERANCE = 1e-5  # float32 sums of N values in a different order agree to ~N·2⁻²⁴ relative
DEMO_DIGIT_RANKS = 9  # up to 9 ranks the demo values put each rank in its own decimal digit


def make_input(rank: int, numel: int, seed: int) -> torch.Tensor:
    """Rank ``rank``'s tensor: deterministic, so ``summarize`` can recompute the exact mean."""
    gen = torch.Generator().manual_seed(seed * 100_003 + rank)
    return torch.rand(numel, generator=gen) * 2 - 1


def demo_input(rank: int, world_size: int, per_chunk: int) -> torch.Tensor:
    """Readable demo values: element e of rank r is (e mod 9 + 1)·10^r, so every decimal digit of
    a partial sum says whether that rank is in it (1011 = ranks 0, 1, 3). Beyond 9 ranks: ones."""
    e = torch.arange(world_size * per_chunk, dtype=torch.float64)
    if world_size > DEMO_DIGIT_RANKS:
        return torch.ones_like(e)
    return (e % 9 + 1) * 10.0 ** rank


def contributors(value: float, element: int, world_size: int) -> list[int]:
    """Which ranks' demo values a (partial) sum contains (decoded from its decimal digits)."""
    if world_size > DEMO_DIGIT_RANKS:
        return list(range(round(value)))  # only the count is known
    digits = round(value / (element % 9 + 1))
    return [r for r in range(world_size) if digits // 10 ** r % 10]


# 세 가지 All-Reduce: 모두 합을 구한다(평균은 호출한 쪽에서 N으로 나눈다)
ALL_REDUCE = {"library": lambda buf, p2p: library_all_reduce_(buf), "naive": naive_all_reduce_, "ring": ring_all_reduce_}


# --- 측정 ----------------------------------------------------------------------------------


def _measure(name: str, x: torch.Tensor, repeats: int, device: torch.device) -> dict:
    """Run one implementation ``repeats`` times on a fresh copy of ``x``; bytes and median time."""
    n = dist.get_world_size()
    seconds, p2p = [], P2P()
    for _ in range(repeats):
        buf = x.clone()
        dist.barrier()
        p2p, before = P2P(), written_bytes()
        start = time.perf_counter()
        ALL_REDUCE[name](buf, p2p)
        sync(device)
        seconds.append(time.perf_counter() - start)
        after = written_bytes()
    mean = buf.div_(n)  # 합을 N으로 나누면 평균
    return {
        "mean": mean,
        "seconds": statistics.median(seconds),
        "sent": p2p.sent,
        "received": p2p.received,
        "os_written": None if before is None or after is None else after - before,
    }


def _ring_demo(world_size: int, per_chunk: int, device: torch.device) -> dict:
    """Run the ring on small readable integers and record every chunk after every step."""
    buf = demo_input(dist.get_rank(), world_size, per_chunk).to(device)
    states = [{"phase": "start", "step": -1, "sent": None, "received": None, "values": buf.tolist()}]

    def record(phase: str, step: int, sent: int, received: int) -> None:
        states.append({"phase": phase, "step": step, "sent": sent, "received": received, "values": buf.tolist()})

    ring_all_reduce_(buf, P2P(), on_step=record)
    return {"demo_states": states}


class AllreduceRecord(Described):
    """What each rank of the 'allreduce' lab returns."""

    numel: int
    bytes_per_element: int
    sample_index: list[int]
    library: dict[str, Any]
    naive: dict[str, Any]
    ring: dict[str, Any]
    demo_states: list[dict[str, Any]]
    grad_local_vs_global: float
    grad_mean_vs_global: float
    grad_sum_norm_ratio: float
    grad_global_max: float


def rank_fn(ctx: RankContext, numel: int, repeats: int, seed: int, demo_per_chunk: int,
            per_rank_batch: int) -> AllreduceRecord:
    x = make_input(ctx.rank, numel, seed).to(ctx.device)
    runs = {name: _measure(name, x, repeats, ctx.device) for name in IMPLEMENTATIONS}
    library = runs["library"]["mean"]
    sample_at = torch.linspace(0, numel - 1, steps=min(numel, 257)).round().long().unique()
    record: dict[str, Any] = {**ctx.describe(), "numel": numel, "bytes_per_element": x.element_size(),
              "sample_index": sample_at.tolist()}
    for name, run in runs.items():
        mean = run.pop("mean")
        record[name] = {
            **run,
            "max_diff_vs_library": max_abs_diff(mean, library),
            "checksum": float(mean.double().sum()),
            "sample": mean[sample_at.to(mean.device)].tolist(),
            "digest": fingerprint_tensors([mean]),
        }
    record.update(_ring_demo(ctx.world_size, demo_per_chunk, ctx.device))
    record.update(gradient_mean_vs_global(ctx, per_rank_batch, seed))
    return cast(AllreduceRecord, record)


# --- 이론값과 요약 ------------------------------------------------------------------------------

def chunk_sizes(numel: int, world_size: int) -> list[int]:
    """Element counts of ``tensor_split(numel, world_size)``: the first ``numel % N`` are one larger."""
    return [len(c) for c in torch.arange(numel).tensor_split(world_size)]


def ring_bytes_sent(rank: int, numel: int, world_size: int, bytes_per_element: int) -> int:
    """Exact bytes rank ``rank`` sends in the ring: every chunk but one, in each of the two phases."""
    sizes = chunk_sizes(numel, world_size)
    rs = [(rank - s) % world_size for s in range(world_size - 1)]
    ag = [(rank + 1 - s) % world_size for s in range(world_size - 1)]
    return sum(sizes[i] for i in rs + ag) * bytes_per_element


def ring_theory_bytes(numel: int, world_size: int, bytes_per_element: int) -> float:
    """2(N-1)/N · S, the textbook bytes per rank (S = the whole tensor in bytes)."""
    return 2 * (world_size - 1) / world_size * numel * bytes_per_element


def expected_mean(world_size: int, numel: int, seed: int) -> torch.Tensor:
    """The exact mean (float64) of every rank's known input."""
    total = torch.zeros(numel, dtype=torch.float64)
    for r in range(world_size):  # 0 + x_0 + x_1 + …: the order Python's sum() adds in
        total += make_input(r, numel, seed).double()
    return total / world_size


class AllreduceData(TypedDict):
    """The summary data of the 'allreduce' lab."""

    per_rank_batch: int
    size_bytes: int
    chunk_sizes: list[int]
    ring_theory_bytes: float
    ring_exact_bytes: list[int]
    max_error: dict[str, float]
    seconds: dict[str, float]
    demo: dict[str, Any]


def summarize(ranks: list[AllreduceRecord], backend: str, params: dict[str, Any]) -> Summary[AllreduceData]:
    n, numel = len(ranks), params["numel"]
    esize = ranks[0]["bytes_per_element"]
    expected = expected_mean(n, numel, params["seed"])
    max_error = {name: _max_error(ranks, name, expected) for name in IMPLEMENTATIONS}
    ring_theory = ring_theory_bytes(numel, n, esize)
    demo = _demo_summary(ranks, params["demo_per_chunk"])
    checks = [*_result_checks(ranks, max_error, RELATIVE_TOLERANCE * float(expected.abs().max())),
              *_byte_checks(ranks, numel, esize), *demo["checks"], *_gradient_checks(ranks)]
    if backend == "gloo" and all(r[name]["os_written"] is not None for r in ranks for name in IMPLEMENTATIONS):
        checks += _os_counter_checks(ranks, ring_theory)
    data: AllreduceData = {
        "per_rank_batch": params["per_rank_batch"],
        "size_bytes": numel * esize,
        "chunk_sizes": chunk_sizes(numel, n),
        "ring_theory_bytes": ring_theory,
        "ring_exact_bytes": [ring_bytes_sent(r["rank"], numel, n, esize) for r in ranks],
        "max_error": max_error,
        "seconds": {name: largest(r[name]["seconds"] for r in ranks) for name in IMPLEMENTATIONS},
        "demo": demo["data"],
    }
    return Summary(data, checks)


def _max_error(ranks: RankRecords, name: str, expected: torch.Tensor) -> float:
    """Largest error of implementation ``name`` against the exact mean: sampled elements and the sum."""
    idx = torch.tensor(ranks[0]["sample_index"])
    worst = 0.0
    for r in ranks:
        sample = torch.tensor(r[name]["sample"], dtype=torch.float64)
        worst = max(worst, float((sample - expected[idx]).abs().max()),
                    abs(r[name]["checksum"] - float(expected.sum())) / expected.numel())
    return worst


def _result_checks(ranks: RankRecords, max_error: dict, tol: float) -> list:
    disagreement = largest(r[name]["max_diff_vs_library"] for r in ranks for name in ("naive", "ring"))
    distinct = sum(len({r[name]["digest"] for r in ranks}) for name in IMPLEMENTATIONS)
    return [
        check_close("implementations_agree", disagreement, 0.0, tol,
                    f"세 구현(library·naive·ring)의 평균이 모든 원소에서 상대 {RELATIVE_TOLERANCE:g} 안에서 같다"
                    "(최대 절대 차이)"),
        check_close("mean_of_known_inputs", max(max_error.values()), 0.0, tol,
                    "결과가 각 랭크의 알려진 입력으로 계산한 정확한 평균(float64)과 같다(표본 원소·합계의 최대 오차)"),
        check_equal("identical_on_all_ranks", distinct, len(IMPLEMENTATIONS),
                    "구현마다 모든 랭크의 결과가 바이트 단위까지 같다(구현별 서로 다른 결과 수의 합)"),
    ]


def _byte_checks(ranks: RankRecords, numel: int, esize: int) -> list:
    n, size = len(ranks), numel * esize
    ring_sent = [r["ring"]["sent"] for r in ranks]
    theory = ring_theory_bytes(numel, n, esize)
    root = ranks[0]["naive"]
    others = sorted({(r["naive"]["sent"], r["naive"]["received"]) for r in ranks[1:]})
    return [
        check_equal("ring_bytes_exact", ring_sent, [ring_bytes_sent(r["rank"], numel, n, esize) for r in ranks],
                    "링: 각 랭크가 보낸 바이트 = 두 단계에서 각각 청크 하나를 뺀 나머지 청크들의 크기 합"),
        check_close("ring_bytes_vs_theory", max(abs(s - theory) for s in ring_sent), 0.0, 2 * esize,
                    f"링: 랭크당 보낸 바이트가 2(N-1)/N·S = {theory:,.0f}와 청크 반올림(원소 2개) 이내로 같다"),
        check_equal("naive_root_bytes", [root["sent"], root["received"]], [(n - 1) * size] * 2,
                    "단순 방식: 랭크 0이 (N-1)·S 바이트를 받고 (N-1)·S 바이트를 보낸다"),
        check_equal("naive_other_bytes", others, [(size, size)] if n > 1 else [],
                    "단순 방식: 나머지 랭크는 S 바이트를 보내고 S 바이트를 받는다"),
    ]


def _gradient_checks(ranks: RankRecords) -> list:
    return [
        check_close("mean_equals_global_gradient", largest(r["grad_mean_vs_global"] for r in ranks), 0.0, 1e-6,
                    "N개 그래디언트의 평균 (1/N)Σg_i가 전역 배치 B개 전체의 평균 손실의 그래디언트와 같다(최대 절대 차이)"),
    ]


def _os_counter_checks(ranks: RankRecords, ring_theory: float) -> list:
    """gloo sends through TCP sockets, so the kernel's count of written bytes sees its traffic."""
    def slack(nbytes: float) -> float:  # 메시지 헤더 몫: 1% + 16 KiB
        return 0.01 * nbytes + 16384

    ours = largest(abs(r[name]["os_written"] - r[name]["sent"]) - slack(r[name]["sent"])
                   for r in ranks for name in ("naive", "ring"))
    library = largest(abs(r["library"]["os_written"] - ring_theory) for r in ranks)
    return [
        check_close("os_counter_sees_p2p", max(ours, 0.0), 0.0, 0.0,
                    "우리 send의 바이트를 운영체제(/proc/self/io의 wchar)도 똑같이 센다(1%+16 KiB 헤더를 넘는 차이)"),
        check_close("library_bytes_match_ring", library, 0.0, slack(ring_theory),
                    "gloo의 all_reduce가 소켓에 쓴 바이트가 랭크마다 2(N-1)/N·S와 같다(1%+16 KiB 헤더 이내)"),
    ]


def _demo_summary(ranks: RankRecords, per_chunk: int) -> dict:
    """Checks on the recorded ring steps: contributions grow by one per reduce-scatter step."""
    n = len(ranks)
    expected = [sum(values) for values in zip(*(demo_input(r, n, per_chunk).tolist() for r in range(n)))]
    final_bad = sum(1 for r in ranks for a, b in zip(r["demo_states"][-1]["values"], expected) if a != b)
    wrong_growth = 0
    for r in ranks:
        for state in r["demo_states"][1:n]:  # reduce-scatter 단계들
            got = state["values"]
            for e in range(state["received"] * per_chunk, (state["received"] + 1) * per_chunk):
                wrong_growth += len(contributors(got[e], e, n)) != state["step"] + 2
    owner_chunks = sorted((r["demo_states"][n - 1]["received"] if n > 1 else 0) for r in ranks)
    checks = [
        check_equal("demo_ring_result", final_bad, 0,
                    "작은 예제에서 링이 끝나면 모든 랭크의 모든 원소가 정확한 합이다(틀린 원소 수)"),
        check_equal("reduce_scatter_growth", wrong_growth, 0,
                    "Reduce-Scatter의 s번째 단계에서 받은 청크에는 정확히 s+2개 랭크의 값이 들어 있다(어긋난 원소 수)"),
        check_equal("reduce_scatter_owners", owner_chunks, list(range(n)),
                    "Reduce-Scatter가 끝나면 각 청크의 완성된 합을 정확히 한 랭크씩 나누어 갖는다"),
    ]
    return {"checks": checks, "data": {"expected": expected, "per_chunk": per_chunk}}


LAB = Lab(
    name="allreduce",
    description=("라이브러리 all_reduce, 랭크 0으로 모으는 단순 방식, 직접 만든 링 All-Reduce가 같은 평균을 내는지와 "
                 "랭크당 보낸 바이트·시간 비교"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=4,
    params={"numel": Int(1_000_003, min=1, max=1 << 28, help="All-Reduce할 원소 수"),
            "repeats": Int(3, min=1, max=100, help="시간을 재는 반복 수"),
            "seed": seed(),
            "demo_per_chunk": Int(1, min=1, max=64, help="링 그림에 쓸 청크당 원소 수"),
            "per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N")},
    record=AllreduceRecord,
    data=AllreduceData,
)
