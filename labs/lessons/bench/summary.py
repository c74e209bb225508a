"""The ``bench`` lab's summary: nccl-tests' rows, the cost model fits, paired ratios, and the checks."""

from __future__ import annotations

import math
import statistics
from typing import Any, TypedDict

from ...ddp.buckets import MIB
from ...ddp.cost_model import bus_factor, fit_cost_model
from ...ddp.ring import SEGMENT_BYTES
from ...result import (
    Check,
    RankRecords,
    Summary,
    check_at_least,
    check_at_most,
    check_close,
    check_equal,
    check_true,
    largest,
    not_applicable,
)
from ...tools.timing import paired_ratio, slowest
from .measure import ACCUM, CHECK_NUMEL, CHECK_SEGMENT_BYTES, IMPLS, QUICK, BenchRecord, parse_caps, size_label

PIPELINE_TARGET = 0.9  # 목표(gloo, CPU, 코어마다 랭크 하나): 16 MiB 이상에서 파이프라인 링 busbw ≥ 라이브러리의 0.9배
TARGET_FROM = 16 << 20
PIPELINE_GATE = 0.3  # 빌드 확인: 부하가 큰 이 기계에서 잰 값들(README "성능")의 최솟값보다 한참 아래
GATE_FROM = 4 * SEGMENT_BYTES  # N=2에서 청크마다 세그먼트가 둘 이상이 되는 크기부터: 그보다 작으면 파이프라인이 없다
SMALL = 16 << 10  # 이보다 작거나 같은 메시지는 지연 시간 α가 지배한다 (이 기계: N·α·BW ≈ 수백 KB)
LARGE = 1 << 20  # 이보다 크거나 같은 메시지는 대역폭이 지배한다
FIT_MIN_SIZES = 4  # 두 상수를 맞추고 R²를 믿으려면 크기가 적어도 이만큼 필요하다
# 모델의 모양을 판정하려면 가장 큰 메시지의 시간이 α의 여러 배여야 한다: 이 기계에서 4 MiB는 α의 약 5배라
# log t가 펼쳐진 폭이 좁아, 작은 크기의 흔들림 하나로 R²가 0.2까지 떨어졌다 (--quick, '4K 32K 1M 4M'). 8 MiB는 약 10배
FIT_LARGE = 8 << 20
FIT_R2 = 0.5  # 부하 속 --quick 12번에서 잰 R²는 0.74–0.998: 그 아래로 한참 내려가면 모델이 측정을 설명하지 못한다
SLOW = 2.0  # 가장 빠른 반복의 2배보다 오래 걸린 반복: 무엇인가를 기다린 반복
BUSY = 0.25  # 통신 없는 스텝의 반복 중 이보다 많은 몫이 SLOW를 넘으면, 작은 시간 차이는 잴 수 없다
MIN_EXPOSED = 0.5  # 통신이 스텝에 더한 시간이 계산의 이 몫보다 작으면 누적의 이득은 잡음에 묻힌다
MIN_SAVED_CALLS = 4  # DDP가 손으로 쓴 루프보다 이만큼 덜 불러야 스텝 시간의 차이를 잴 수 있다
NOISE = 0.1  # 부하 속 22번의 실행 중 위 전제를 만족한 실행에서 잰 비율의 최댓값은 1.01: 그만큼의 흔들림은 허용한다


def slowest_median(per_rank: list[list[float]]) -> float:
    return statistics.median(slowest(per_rank))


def allreduce_rows(ranks: RankRecords) -> list[dict]:
    """nccl-tests' columns for every size and implementation, and each ring's ratio to the library.

    ``ring_ratio`` and ``pipelined_ratio`` are busbw ratios (= library time / ring time) taken pair
    by pair: repeat i of the library and repeat i of the ring ran back to back, so they saw the same
    machine; reported as the median of the pairs with its spread (:func:`paired_ratio`).
    ``slow_share`` is the share of repeats that took more than ``SLOW`` times the best one.
    """
    n, factor = len(ranks), bus_factor(len(ranks))
    rows = []
    for i, first in enumerate(ranks[0]["allreduce"]):
        size = first["bytes"]
        row: dict = {"size": size, "count": size // 4, "type": "float"}
        seconds = {impl: slowest([r["allreduce"][i][impl] for r in ranks]) for impl in IMPLS}
        for impl, times in seconds.items():
            t = statistics.median(times)
            algbw = size / t / 1e9
            row[impl] = {"time_us": t * 1e6, "algbw": algbw, "busbw": algbw * factor, "best_us": min(times) * 1e6,
                         "slow_share": sum(x > SLOW * min(times) for x in times) / len(times),
                         "samples_us": [x * 1e6 for x in times]}
        for impl in ("ring", "pipelined"):
            row[f"{impl}_ratio"] = paired_ratio(seconds["library"], seconds[impl]) if n > 1 else None
        rows.append(row)
    return rows


def fit_rows(rows: list[dict], world_size: int, impl: str = "library") -> dict | None:
    """The cost model fitted to each size's best repeat of ``impl``: the transport's own cost (the
    median adds the time spent waiting for a CPU that other programs hold)."""
    return fit_cost_model([r["size"] for r in rows], [r[impl]["best_us"] * 1e-6 for r in rows], world_size)


def copy_bandwidth(ranks: RankRecords) -> dict:
    """GB/s of ``copy_`` (bytes copied per second): rank 0 alone (median and fastest repeat), and per
    rank with all copying."""
    mem = ranks[0]["memcpy"]
    return {"bytes": mem["bytes"], "alone_gbs": mem["bytes"] / statistics.median(mem["alone"]) / 1e9,
            "alone_best_gbs": mem["bytes"] / min(mem["alone"]) / 1e9,
            "together_gbs": mem["bytes"] / slowest_median([r["memcpy"]["together"] for r in ranks]) / 1e9}


def timeline_summary(ranks: RankRecords) -> dict:
    """Rank 0's segment timelines (µs from the start) with the time it spent waiting and adding.

    ``wait_us`` is the time spent waiting for segments to arrive, ``add_us`` the time spent adding
    them: in the one-segment ring the two follow each other; pipelined, the next segment arrives
    during the add, so the waits shrink while the adds stay.
    """
    out = {}
    for name, line in ranks[0]["timeline"].items():
        segments = [{k: v * 1e6 if k in ("wait", "arrived", "added") else v for k, v in s.items()}
                    for s in line["segments"]]
        out[name] = {"bytes": line["bytes"], "segment_bytes": min(line["segment_bytes"], line["bytes"]),
                     "total_us": line["total"] * 1e6, "segments": segments,
                     "wait_us": sum(s["arrived"] - s["wait"] for s in segments),
                     "add_us": sum(s["added"] - s["arrived"] for s in segments)}
    return out


def pipelined_vs_library(rows: list[dict], low: int = GATE_FROM) -> float | None:
    """Median over the sizes from ``low`` up of the pipelined ring's paired busbw ratio (``None``
    when there is no such size or no ratio)."""
    ratios = [r["pipelined_ratio"]["median"] for r in rows if r["size"] >= low and r["pipelined_ratio"]]
    return statistics.median(ratios) if ratios else None


def target_report(rows: list[dict]) -> dict:
    """Per size from ``TARGET_FROM`` up: the pipelined ring's paired ratio and whether it meets the target."""
    return {size_label(r["size"]): {"ratio": r["pipelined_ratio"]["median"],
                                    "met": r["pipelined_ratio"]["median"] >= PIPELINE_TARGET}
            for r in rows if r["size"] >= TARGET_FROM and r["pipelined_ratio"]}


def ddp_summary(ranks: RankRecords) -> dict:
    """Per variant: step time (ms), All-Reduce calls, ratio to the manual loop, and efficiency =
    the compute it contains (micro-steps × the no-communication step) / its step time."""
    ddp = ranks[0]["ddp"]
    step_ms = {v: slowest_median([r["ddp"]["seconds"][v] for r in ranks]) * 1e3 for v in ddp["seconds"]}
    comm_ms = step_ms.pop("comm_alone")
    compute, manual = step_ms["compute"], step_ms["manual"]
    rows = []
    for v, ms in step_ms.items():
        calls = sorted({r["ddp"]["all_reduce"][v] for r in ranks})  # 보통 모든 랭크가 같은 값 하나
        micro = ddp["micro_steps"][v]
        rows.append({"variant": v, "step_ms": ms, "micro_steps": micro, "all_reduce": max(calls),
                     "calls_by_rank": calls, "vs_manual": ms / manual if micro == 1 else None,
                     "efficiency": micro * compute / ms,
                     "exposed_ms": ms - micro * compute})  # 계산 뒤에 숨지 못하고 스텝에 더해진 통신과 부대 비용
    return {"rows": rows, "compute_ms": compute, "comm_alone_ms": comm_ms, "n_params": ddp["n_params"],
            "n_tensors": ddp["n_tensors"], "model_bytes": ddp["n_params"] * 4, "paired": _paired_steps(ranks)}


def _paired_steps(ranks: RankRecords) -> dict:
    """Step-time ratios taken repeat by repeat (the variants ran interleaved): the fastest DDP setting
    over the manual loop, and the accumulated step over K separate steps of the same DDP setting."""
    ddp = ranks[0]["ddp"]
    seconds = {v: slowest([r["ddp"]["seconds"][v] for r in ranks]) for v in ddp["seconds"]}
    caps = [v for v in seconds if v.startswith("ddp:")]  # 작은 cap부터
    best = min(caps, key=lambda v: statistics.median(seconds[v]))
    k = ddp["micro_steps"][ACCUM]
    compute = seconds["compute"]
    exposed = statistics.median(seconds[caps[-1]]) / statistics.median(compute) - 1
    return {"best_ddp": best, "busy_share": sum(t > SLOW * min(compute) for t in compute) / len(compute),
            "exposed_share": exposed, "ddp_vs_manual": paired_ratio(seconds[best], seconds["manual"]),
            "accum_vs_separate": paired_ratio(seconds[ACCUM], [k * t for t in seconds[caps[-1]]])}


class BenchData(TypedDict):
    """The summary data of the 'bench' lab."""

    rows: list[dict[str, Any]]
    fit: dict[str, float] | None
    ring_fit: dict[str, float] | None
    memcpy: dict[str, float]
    timeline: dict[str, dict[str, Any]]
    ddp: dict[str, Any]
    bus_factor: float
    pipelined_vs_library: float | None
    pipeline_target: float
    pipeline_gate: float
    target: dict[str, dict[str, Any]]  # size label -> ratio, met
    segment_bytes: int
    socket: list[dict[str, int]]
    device: str
    cpu_count: int
    oversubscribed: bool
    threads_per_rank: int


def summarize(ranks: list[BenchRecord], backend: str, params: dict[str, Any]) -> Summary[BenchData]:
    n = len(ranks)
    rows = allreduce_rows(ranks)
    fit = fit_rows(rows, n)
    memcpy = copy_bandwidth(ranks)
    ddp = ddp_summary(ranks)
    cpu = ranks[0]["cpu_count"] or 1
    oversubscribed = backend == "gloo" and n > cpu
    data: BenchData = {"rows": rows, "fit": fit, "ring_fit": fit_rows(rows, n, "ring"), "memcpy": memcpy,
            "timeline": timeline_summary(ranks), "ddp": ddp, "bus_factor": bus_factor(n),
            "pipelined_vs_library": pipelined_vs_library(rows), "pipeline_target": PIPELINE_TARGET,
            "pipeline_gate": PIPELINE_GATE, "target": target_report(rows), "segment_bytes": params["segment_kb"] << 10,
            "socket": [r["socket"] for r in ranks],
            "device": ranks[0]["device"], "cpu_count": cpu, "oversubscribed": oversubscribed,
            "threads_per_rank": ranks[0]["threads"]}
    checks = [*_ring_checks(ranks, backend), *_allreduce_checks(rows, fit, memcpy, n, oversubscribed),
              _pipeline_gate(rows, backend, n, oversubscribed, params["segment_kb"] << 10), *_ddp_checks(ddp, n, params)]
    return Summary(data, checks)


def _ring_checks(ranks: RankRecords, backend: str) -> list[Check]:
    """Both rings give the library's sum; the pipelined ring's segments add no traffic (kernel count)."""
    n = len(ranks)
    checks = [check_close("rings_match_library", largest(largest(r["ring_error"].values()) for r in ranks), 0.0,
                          1e-6 * n * n,
                          f"두 링(4장의 링, 파이프라인 링)의 합이 dist.all_reduce의 합과 같다: 원소 {CHECK_NUMEL:,}개"
                          f"(N으로도 세그먼트 {CHECK_SEGMENT_BYTES // 4}원소로도 나누어떨어지지 않는 크기)의 난수 입력, "
                          "모든 랭크에서 최대 절대 차이")]
    written = [r["socket"]["written"] for r in ranks]
    if n < 2:
        checks.append(not_applicable("pipelined_bytes_on_socket", "랭크가 하나면 아무것도 보내지 않는다"))
    elif backend != "gloo" or None in written:
        checks.append(not_applicable("pipelined_bytes_on_socket",
                                     "gloo의 TCP 소켓에 쓴 바이트를 커널(/proc/self/io)에서 읽을 수 있을 때만 잰다"))
    else:
        size = ranks[0]["socket"]["bytes"]
        theory = bus_factor(n) * size
        worst = max(abs(w - theory) for w in written)
        checks.append(check_close("pipelined_bytes_on_socket", worst, 0.0, 0.01 * theory + 16384,
                                  f"파이프라인 링이 {size_label(size)}를 All-Reduce하는 동안 각 랭크가 소켓에 쓴 바이트"
                                  "(커널이 센 /proc/self/io의 wchar)가 2(N-1)/N·S와 같다: 세그먼트로 잘라도 트래픽은 "
                                  "늘지 않는다(1%+16 KiB 헤더 이내, 이론과의 최대 차이)"))
    return checks


def _allreduce_checks(rows: list[dict], fit: dict | None, memcpy: dict, n: int,
                      oversubscribed: bool) -> list[Check]:
    """Checks on the library's curve; each is not applicable when the chosen sizes cannot test it."""
    if n < 2:
        reason = "랭크가 하나면 통신이 없다"
        return [not_applicable(name, reason) for name in ("busbw_below_memcpy", "bandwidth_grows_with_size",
                                                         "cost_model_fits")]
    factor = bus_factor(n)
    top = max(r["size"] / (r["library"]["best_us"] * 1e-6) / 1e9 * factor for r in rows)
    checks = [check_at_most("busbw_below_memcpy", top, memcpy["alone_best_gbs"],
                            "All-Reduce의 가장 높은 busbw(GB/s, 크기마다 가장 빠른 반복)가 이 기계의 메모리 복사 대역폭"
                            "(가장 빠른 반복, 기준)보다 작다: 한 바이트를 적어도 두 번 복사하는 통신은 복사보다 빠를 수 "
                            "없다. 둘 다 가장 빠른 반복을 쓰는 까닭은, 중앙값은 다른 프로그램과 메모리를 나눠 쓴 때의 값이기 "
                            "때문이다")]
    small, large = rows[0], rows[-1]
    if small["size"] > SMALL or large["size"] < LARGE:
        checks.append(not_applicable("bandwidth_grows_with_size",
                                     f"고른 크기에 {size_label(SMALL)} 이하의 작은 메시지와 {size_label(LARGE)} 이상의 큰 "
                                     "메시지가 함께 있어야 잴 수 있다"))
    else:
        checks.append(check_at_least("bandwidth_grows_with_size", large["library"]["algbw"] / small["library"]["algbw"],
                                     4.0, f"가장 큰 메시지({size_label(large['size'])})의 algbw가 가장 작은 메시지"
                                     f"({size_label(small['size'])})보다 4배 넘게 크다: 작은 메시지는 지연 시간 α가 "
                                     "지배한다(배율)"))
    if oversubscribed:
        checks.append(not_applicable("cost_model_fits", "과다 구독: 작은 메시지의 시간은 코어를 기다리는 시간이라 "
                                     "모델의 모양을 따르지 않는다"))
    elif len(rows) < FIT_MIN_SIZES or small["size"] > SMALL or large["size"] < FIT_LARGE:
        checks.append(not_applicable("cost_model_fits", f"두 상수를 맞추려면 {size_label(SMALL)} 이하부터 "
                                     f"{size_label(FIT_LARGE)} 이상까지 크기가 {FIT_MIN_SIZES}개 이상 있어야 한다"
                                     "(가장 큰 메시지의 시간이 α의 여러 배가 되어야 모델의 모양을 판정할 수 있다)"))
    else:
        ok = fit is not None and fit["alpha_s"] > 0 and 0 < fit["bandwidth"] < math.inf
        checks.append(check_at_least("cost_model_fits", fit["r2_log"] if ok and fit is not None else -math.inf, FIT_R2,
                                     "크기마다 가장 빠른 반복에 t = 2(N-1)/N·S/BW + 2(N-1)α를 최소제곱으로 맞추면 "
                                     f"α>0, BW>0이고 log t의 결정계수 R²가 {FIT_R2} 이상이다(R²)"))
    return checks


def _pipeline_gate(rows: list[dict], backend: str, n: int, oversubscribed: bool, segment_bytes: int) -> Check:
    """The pipelined ring against the library on gloo with a core per rank (a fair race), at the chosen segment size."""
    name = "pipelined_vs_library"
    ratio = pipelined_vs_library(rows)
    if n < 2:
        return not_applicable(name, "랭크가 하나면 통신이 없다")
    if segment_bytes != SEGMENT_BYTES:
        return not_applicable(name, f"경주는 이 기계에서 재어 고른 세그먼트 {size_label(SEGMENT_BYTES)}에서만 판정한다"
                              f"(이번 세그먼트 {size_label(segment_bytes)}: 비율은 표로 보인다)")
    if backend != "gloo":
        return not_applicable(name, "NCCL의 All-Reduce는 GPU 커널 하나가 하는 일이라, 파이썬에서 세그먼트마다 "
                              "isend/irecv를 부르는 링과의 경주는 보여 주기만 한다")
    if oversubscribed:
        return not_applicable(name, "과다 구독(랭크 수 > 코어 수): 링은 단계마다 코어를 기다리므로 공정한 경주가 아니다")
    if ratio is None:
        return not_applicable(name, f"고른 크기에 {size_label(GATE_FROM)} 이상이 없다")
    return check_at_least(name, ratio, PIPELINE_GATE,
                          f"{size_label(GATE_FROM)} 이상에서 파이프라인 링의 busbw가 라이브러리의 {PIPELINE_GATE}배 "
                          "이상이다(크기마다 번갈아 잰 쌍별 비율의 중앙값, 그 크기들의 중앙값)")


def fewer_calls_check(ddp_counts: list[int], n_tensors: int, caps_mb: list[float], smallest_tensor_bytes: int) -> Check:
    """DDP's All-Reduce count per step over the chosen caps (smallest first): it never grows with the cap and falls
    below one call per tensor; n/a when the caps cannot show it (one cap, or every cap at most the smallest tensor,
    so that each tensor closes a bucket of its own)."""
    name = "fewer_calls_with_bigger_buckets"
    if len(ddp_counts) < 2:
        return not_applicable(name, "caps_mb에 값이 하나뿐이라 cap끼리 비교할 수 없다(예: caps_mb='0.1 25')")
    if int(max(caps_mb) * MIB) <= smallest_tensor_bytes:
        return not_applicable(name, f"고른 cap이 모두 가장 작은 텐서({smallest_tensor_bytes}바이트) 이하라 어느 cap에서나 "
                              f"텐서마다 버킷 하나({n_tensors}번)다: caps_mb에 더 큰 값을 넣으세요(예: 25)")
    return check_true(name, ddp_counts == sorted(ddp_counts, reverse=True) and min(ddp_counts) >= 1
                      and min(ddp_counts) < n_tensors, ddp_counts,
                      "DDP는 bucket_cap_mb가 커질수록 All-Reduce를 적게(늘지 않게) 부르고, 가장 큰 cap에서는 텐서 수"
                      "보다 적게 부른다(작은 cap부터의 횟수)")


def _ddp_checks(ddp: dict, n: int, params: dict) -> list[Check]:
    by = {row["variant"]: row for row in ddp["rows"]}
    ddp_counts = [by[f"ddp:{cap:g}"]["all_reduce"] for cap in parse_caps(params["caps_mb"])]
    checks = [
        check_equal("manual_one_call_per_tensor", by["manual"]["calls_by_rank"], [ddp["n_tensors"]],
                    "손으로 쓴 루프는 모든 랭크에서 파라미터 텐서마다 All-Reduce를 한 번씩 부른다(한 스텝의 횟수)"),
        check_equal("compute_no_communication", by["compute"]["calls_by_rank"], [0],
                    "통신 없는 기준 스텝은 All-Reduce를 하지 않는다"),
        fewer_calls_check(ddp_counts, ddp["n_tensors"], parse_caps(params["caps_mb"]), 4 * params["width"]),
    ]
    largest = f"ddp:{max(parse_caps(params['caps_mb'])):g}"
    checks.append(check_equal("accumulation_same_calls_per_step", by[ACCUM]["calls_by_rank"], by[largest]["calls_by_rank"],
                              f"no_sync()로 K={params['accum_steps']}개를 누적한 옵티마이저 스텝은 누적 없는 스텝"
                              f"(bucket_cap_mb={largest[4:]})과 같은 횟수만 All-Reduce한다: 통신은 마지막 역전파에서 한 번"))
    if n < 2:
        reason = "랭크가 하나면 DDP도 손으로 쓴 루프도 통신하지 않는다"
        return checks + [not_applicable(name, reason) for name in ("ddp_faster_than_manual",
                                                                    "accumulation_raises_efficiency")]
    paired = ddp["paired"]
    saved = ddp["n_tensors"] - min(ddp_counts)
    if saved < MIN_SAVED_CALLS:
        checks.append(not_applicable(
            "ddp_faster_than_manual", f"텐서가 {ddp['n_tensors']}개뿐이라 DDP가 아끼는 All-Reduce가 {saved}번이다: 호출 "
            f"{MIN_SAVED_CALLS}번 이상을 아낄 때만 그 차이가 반복마다의 흔들림을 넘는다(depth=1에서 비율 0.58–0.98을 쟀다)"))
    elif params["ddp_steps"] < QUICK["ddp_steps"]:
        checks.append(not_applicable(
            "ddp_faster_than_manual", f"DDP 스텝을 {params['ddp_steps']}번만 쟀다: 번갈아 잰 쌍이 {QUICK['ddp_steps']}개 "
            "이상 있어야 중앙값이 반복마다의 흔들림을 넘는다"))
    else:
        checks.append(check_at_most("ddp_faster_than_manual", paired["ddp_vs_manual"]["median"], 1.0,
                                    "가장 빠른 DDP 설정의 스텝 시간이 파라미터마다 all_reduce하는 루프보다 짧다(번갈아 잰 "
                                    "반복끼리의 시간 비율, 그 중앙값)"))
    if paired["busy_share"] > BUSY:
        return checks + [not_applicable(
            "accumulation_raises_efficiency",
            f"이 실행 동안 기계가 바빴다: 통신 없는 스텝의 반복 {paired['busy_share']:.0%}가 가장 빠른 반복의 "
            f"{SLOW:g}배를 넘었다. 누적의 이득(All-Reduce K-1번)이 이 흔들림보다 작아 잴 수 없다")]
    if params["ddp_steps"] < QUICK["ddp_steps"]:
        return checks + [not_applicable(
            "accumulation_raises_efficiency",
            f"DDP 스텝을 {params['ddp_steps']}번만 쟀다: 누적의 이득을 가리려면 번갈아 잰 쌍이 {QUICK['ddp_steps']}개 이상 "
            "있어야 중앙값이 반복마다의 흔들림을 넘는다(ddp_steps=2, 부하 속에서 비율 1.1 초과를 쟀다)")]
    if paired["exposed_share"] < MIN_EXPOSED:
        return checks + [not_applicable(
            "accumulation_raises_efficiency",
            f"통신이 스텝에 더한 시간이 계산의 {paired['exposed_share']:.0%}로 {MIN_EXPOSED:.0%}보다 작다: 누적으로 "
            "아낄 시간이 반복마다의 흔들림보다 작아 잴 수 없다")]
    checks.append(check_at_most("accumulation_raises_efficiency", paired["accum_vs_separate"]["median"], 1.0 + NOISE,
                                f"no_sync()로 K={params['accum_steps']}개를 누적한 스텝이 같은 설정(bucket_cap_mb="
                                f"{largest[4:]})의 누적 없는 스텝 K번보다 짧다: 통신을 K 마이크로 스텝에 한 번만 하므로 효율"
                                f"(계산 ÷ 스텝 시간)이 높다(번갈아 잰 반복끼리의 시간 비율의 중앙값, 흔들림 {NOISE:.0%} 허용)"))
    return checks
