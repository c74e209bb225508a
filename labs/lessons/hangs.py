"""Chapter 10 lab: when a job hangs, which rank is stuck and where, told by PyTorch's own tools.

Two experiments inside the ranks, each on its own short-timeout gloo group so the lab ends in
seconds (nothing really hangs): ``monitored_barrier`` while the last rank skips it (rank 0's
error names the missing rank), and the flight recorder's dump after the last rank issues one
``all_reduce`` fewer than the others (its last sequence number is behind). Whether this build's
flight recorder records gloo collectives at all is measured, not assumed: if it does not, the
outcome is recorded and the check is reported as not applicable.
"""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ..comms import quiet_stderr
from ..context import RankContext
from ..params import Float, Int
from ..registry import Lab
from ..result import Summary, check_at_least, check_equal, check_true, not_applicable

# gloo's own words (torch 2.13): rank 0 names the ranks that never arrived; the others only wait for rank 0.
NAMED_RANKS = re.compile(r"Ranks? ([\d, ]+?) (?:failed to pass|timed out in) monitoredBarrier")


def skip_barrier(ctx: RankContext, group, timeout_s: float) -> tuple[str, float]:
    """The last rank never arrives; everyone else calls ``monitored_barrier`` (error text, seconds waited)."""
    if ctx.world_size > 1 and ctx.rank == ctx.world_size - 1:
        return "", 0.0  # 이 랭크는 barrier를 건너뛴다
    start = time.perf_counter()
    try:
        with quiet_stderr():  # gloo가 같은 오류를 로그 줄로도 쓴다: 여기서는 예외의 글만 기록한다
            dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
        error = ""
    except RuntimeError as exc:  # 랭크 0: 오지 않은 랭크의 번호, 나머지: 랭크 0을 보라는 말
        error = str(exc)
    return error, time.perf_counter() - start


def one_all_reduce_fewer(ctx: RankContext, group, collectives: int) -> str:
    """Every rank issues ``collectives`` all_reduces; all but the last issue one more (it times out)."""
    x = torch.ones(4)
    for _ in range(collectives):
        dist.all_reduce(x, group=group)
    if ctx.world_size > 1 and ctx.rank == ctx.world_size - 1:
        return ""  # 이 랭크는 마지막 all_reduce를 건너뛴다
    try:
        with quiet_stderr():
            dist.all_reduce(x, group=group)  # 상대가 오지 않으므로 그룹의 timeout에 끝난다
        return ""
    except RuntimeError as exc:
        return str(exc)


def flight_record(group) -> tuple[str, list, int]:
    """This rank's flight recorder entries for ``group`` as ``[name, sequence id, state]`` (error text if none)."""
    try:
        dump = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False))
    except Exception as exc:  # noqa: BLE001 - 이 빌드가 무엇을 했는지 그대로 기록한다
        return f"{type(exc).__name__}: {exc}", [], 0
    entries = dump.get("entries", [])
    name = group.group_name
    mine = [[e.get("profiling_name"), e.get("collective_seq_id"), e.get("state")]
            for e in entries if (e.get("process_group") or [None])[0] == name]
    outcome = "" if mine else f"덤프에 이 그룹의 항목 없음 (전체 항목 {len(entries)}개, 키 {sorted(dump)})"
    return outcome, mine, len(entries)


def rank_fn(ctx: RankContext, timeout_s: float, collectives: int) -> dict:
    timeout = timedelta(seconds=timeout_s)
    barrier_group = dist.new_group(backend="gloo", timeout=timeout)  # 실험마다 짧은 timeout의 그룹 하나
    record_group = dist.new_group(backend="gloo", timeout=timeout)
    mb_error, mb_seconds = skip_barrier(ctx, barrier_group, timeout_s)
    dist.barrier()  # 건너뛴 랭크가 먼저 다음 실험의 짧은 timeout에 걸리지 않게 기본 그룹에서 모두 만난다
    wait_error = one_all_reduce_fewer(ctx, record_group, collectives)
    fr_error, fr_entries, fr_total = flight_record(record_group)
    dist.barrier()  # 건너뛴 랭크도 여기서 모두 만나 깨끗하게 끝난다(기본 그룹은 멀쩡하다)
    return {"rank": ctx.rank, "mb_error": mb_error, "mb_seconds": mb_seconds, "wait_error": wait_error,
            "fr_error": fr_error, "fr_entries": fr_entries[-3:], "fr_total": fr_total}


def named_ranks(message: str) -> list[int]:
    """The rank numbers a ``monitored_barrier`` error names as missing (empty if it names none)."""
    found = NAMED_RANKS.search(message)
    return sorted(int(r) for r in re.findall(r"\d+", found[1])) if found else []


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    n, timeout_s = len(ranks), params["timeout_s"]
    skipper = n - 1
    message = ranks[0]["mb_error"]
    peers = [r["mb_error"] for r in ranks[1:skipper]]
    last = [r["fr_entries"][-1] if r["fr_entries"] else None for r in ranks]
    works = all(r["fr_entries"] for r in ranks)
    outcome = next((r["fr_error"] for r in ranks if r["fr_error"]), "")
    data = {"skip_rank": skipper, "mb_message": message, "mb_peer_message": peers[0] if peers else "",
            "mb_named": named_ranks(message), "mb_seconds": ranks[0]["mb_seconds"],
            "wait_error": ranks[0]["wait_error"], "fr_works": works, "fr_outcome": outcome, "fr_last": last,
            "timeout_s": timeout_s}
    if n == 1:
        reason = "랭크가 하나면 건너뛸 다른 랭크가 없다"
        return Summary(data, [not_applicable(name, reason) for name in
                              ("barrier_names_missing_rank", "only_rank0_names_it", "barrier_waited_timeout",
                               "fr_shows_rank_behind", "fr_state_does_not_tell")])
    checks = [
        check_equal("barrier_names_missing_rank", named_ranks(message), [skipper],
                    f"monitored_barrier에서 랭크 0의 오류가 건너뛴 랭크 {skipper}만 이름으로 댄다"),
        check_equal("only_rank0_names_it", [r["rank"] for r in ranks if named_ranks(r["mb_error"])], [0],
                    "오지 않은 랭크를 이름으로 대는 것은 랭크 0의 오류뿐이다(다른 랭크는 랭크 0을 보라고만 한다)"),
        check_at_least("barrier_waited_timeout", ranks[0]["mb_seconds"], 0.9 * timeout_s,
                       f"랭크 0은 timeout({timeout_s:g}초)까지 기다린 뒤 오류를 낸다(기다린 초)"),
    ]
    if works:
        seqs = [e[1] for e in last]
        behind = [r for r, s in enumerate(seqs) if s < max(seqs)]
        checks.append(check_equal("fr_shows_rank_behind", behind, [skipper],
                                  f"플라이트 레코더의 마지막 순번이 뒤처진 랭크는 all_reduce를 하나 덜 부른 랭크 {skipper}뿐이다"))
        states = sorted({e[2] for e in last})
        checks.append(check_true("fr_state_does_not_tell", len(states) == 1, states,
                                 "gloo에서 마지막 항목의 상태는 끝난 all_reduce(뒤처진 랭크)와 timeout까지 기다린 all_reduce가 "
                                 "같다: 범인은 순번으로 찾는다(상태 종류)"))
    else:
        reason = f"이 빌드의 gloo에서는 플라이트 레코더가 집합 통신을 기록하지 않았다: {outcome}"
        checks += [not_applicable("fr_shows_rank_behind", reason), not_applicable("fr_state_does_not_tell", reason)]
    return Summary(data, checks)


LAB = Lab(
    name="hangs",
    description="멈춘 잡에서 범인 찾기: monitored_barrier가 오지 않은 랭크를 이름으로 대고, 플라이트 레코더가 뒤처진 랭크를 보이는지",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=10,
    default_nproc=3,
    params={"timeout_s": Float(2.0, min=0.5, max=5.0, help="실험 그룹의 timeout(초): 이만큼 기다린 뒤 오류로 끝난다"),
            "collectives": Int(3, min=1, max=50, help="모든 랭크가 함께 부르는 all_reduce 수(마지막 랭크는 하나 덜)")},
    record_keys=frozenset({"rank", "mb_error", "mb_seconds", "wait_error", "fr_error", "fr_entries", "fr_total"}),
    data_keys=frozenset({"skip_rank", "mb_message", "mb_peer_message", "mb_named", "mb_seconds", "wait_error",
                         "fr_works", "fr_outcome", "fr_last", "timeout_s"}),
)
