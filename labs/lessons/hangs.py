"""Chapter 10 lab: when a job hangs, which rank is stuck and where, told by PyTorch's own tools.

Two experiments inside the ranks, each on its own short-timeout gloo group so the lab ends in
seconds (nothing really hangs): ``monitored_barrier`` while the last rank skips it (rank 0's
error names the missing rank), and a hang where the last rank issues one ``all_reduce`` fewer than
the others and goes on to the next collective. That hang is read three ways: every rank's Python
stack taken from outside with ``py-spy dump`` while it hangs (by a thread of the last rank), each
rank's flight-recorder entries (its last sequence number is behind), and the per-rank dump files
read by torch's own analyzer. Whether this build's flight recorder records gloo collectives at all
is measured, not assumed: if it does not, the outcome is recorded and those checks are not applicable.

The stacks show where each rank waits because gloo's collectives block the host until they finish.
Under NCCL a collective returns once it is enqueued on a CUDA stream, so the waiting ranks may already
stand at a later line (chapter 10.10); this lab measures gloo only.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

import torch
import torch.distributed as dist

from ..context import RankContext
from ..params import Float, Int
from ..registry import Lab
from ..result import Summary, check_at_least, check_equal, check_true, not_applicable
from ..tools import flight_recorder, pyspy
from ..tools.hangs import HANG_MARK, default_store, fall_behind, is_skipper, one_all_reduce_fewer, skip_barrier

# gloo's own words (torch 2.13): rank 0 names the ranks that never arrived; the others only wait for rank 0.
NAMED_RANKS = re.compile(r"Ranks? ([\d, ]+?) (?:failed to pass|timed out in) monitoredBarrier")
# torch's flight-recorder analyzer (torch.distributed.flight_recorder, 2.13): the first collective some ranks missed.
FR_MISSING = re.compile(r"Not all ranks joining collective, sequence number: (\d+).*?missing ranks: \{([\d, ]*)\}", re.S)
HANG_FILE = "labs/tools/hangs.py"  # where the ranks wait: the hangs themselves (labs.tools.hangs)
_SETTLE = 0.2  # seconds between the last rank seeing that the others wait and reading the stacks


class StackReader(threading.Thread):
    """A thread whose ``result`` is filled by its target."""

    result: list[dict[str, Any]] = []


def read_stacks_later(ctx: RankContext, pids: list[int], timeout_s: float) -> StackReader:
    """On the skipping rank: a thread that, once every other rank waits, reads every rank's stack with py-spy.
    Its ``result`` is ``[{"pid", "frames", "error"}]`` per rank (``frames``: main thread, innermost first)."""
    def read():
        keys, deadline = [f"hangs/waiting/{r}" for r in range(ctx.world_size - 1)], time.monotonic() + timeout_s
        while not default_store().check(keys):  # 주 스레드도 같은 store를 쓰므로 오래 붙잡는 wait 대신 짧게 묻는다
            if time.monotonic() > deadline:
                thread.result = [{"pid": pid, "frames": [], "error": "기다리는 랭크의 신호가 timeout 안에 오지 않음"}
                                 for pid in pids]
                return
            time.sleep(0.02)
        time.sleep(_SETTLE)
        thread.result = [{"pid": d["pid"], "frames": pyspy.main_thread(d["text"]),
                          "error": d["error"] or ("" if pyspy.main_thread(d["text"]) else
                                                  f"py-spy의 출력에서 주 스레드를 찾지 못함: {d['text'][:400]!r}")}
                         for d in pyspy.dump(pids)]

    thread = StackReader(target=read, name="labs-hangs-pyspy", daemon=True)
    thread.result = []
    thread.start()
    return thread


def collect_flight_records(ctx: RankContext, groups: list) -> dict:
    """Every rank's dump goes to rank 0, which writes one file per rank and runs torch's analyzer on the
    folder: as gloo wrote them, and with each group's ranks written in (rank 0's record; others ``{}``)."""
    dumps: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object(flight_recorder.dump(), dumps, dst=0)
    if dumps is None:
        return {}
    folder = Path(tempfile.mkdtemp(prefix="labs-fr-"))
    try:
        files = flight_recorder.write(folder, dumps)
        raw_report = flight_recorder.analyze(folder)
        flight_recorder.add_membership(folder, {g.group_name: dist.get_process_group_ranks(g) for g in groups})
        report = flight_recorder.analyze(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"files": files, "sizes": [len(d) for d in dumps], "raw_pg_config": flight_recorder.pg_config(dumps[0]),
            "raw_report": raw_report, "report": report}


def flight_record(group) -> tuple[str, list, int]:
    """This rank's flight recorder entries for ``group`` as ``[name, sequence id, state]`` (error text if none)."""
    try:
        dump = json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False))  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - 이 빌드가 무엇을 했는지 그대로 기록한다
        return f"{type(exc).__name__}: {exc}", [], 0
    entries = dump.get("entries", [])
    name = group.group_name
    mine = [[e.get("profiling_name"), e.get("collective_seq_id"), e.get("state")]
            for e in entries if (e.get("process_group") or [None])[0] == name]
    outcome = "" if mine else f"덤프에 이 그룹의 항목 없음 (전체 항목 {len(entries)}개, 키 {sorted(dump)})"
    return outcome, mine, len(entries)


class HangsRecord(TypedDict):
    """What each rank of the 'hangs' lab returns."""

    rank: int
    mb_error: str  # monitored_barrier의 오류 글 (건너뛴 랭크는 "")
    mb_seconds: float
    wait_error: str
    fr_error: str
    fr_entries: list[list]  # [이름, 순번, 상태]
    fr_total: int
    stacks: list[dict[str, Any]]  # 건너뛴 랭크가 py-spy로 읽은 랭크마다의 스택
    timeout_files: list[str]
    fr_files: dict[str, Any]


def rank_fn(ctx: RankContext, timeout_s: float, collectives: int) -> HangsRecord:
    timeout = timedelta(seconds=timeout_s)
    barrier_group = dist.new_group(backend="gloo", timeout=timeout)  # 실험마다 짧은 timeout의 그룹 하나
    record_group = dist.new_group(backend="gloo", timeout=timeout)
    mb_error, mb_seconds = skip_barrier(ctx, barrier_group, timeout_s)
    dist.barrier()  # 건너뛴 랭크가 먼저 다음 실험의 짧은 timeout에 걸리지 않게 기본 그룹에서 모두 만난다
    pyspy.allow_any_tracer()
    pids: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(pids, os.getpid())
    reader = read_stacks_later(ctx, pids, timeout_s) if is_skipper(ctx) else None
    wait_error, timeout_files = fall_behind(ctx, record_group, collectives)
    fr_error, fr_entries, fr_total = flight_record(record_group)
    fr_files = collect_flight_records(ctx, [dist.group.WORLD, barrier_group, record_group])
    if reader is not None:
        reader.join()
    dist.barrier()  # 모두 만나 깨끗하게 끝난다(기본 그룹은 멀쩡하다)
    return {"rank": ctx.rank, "mb_error": mb_error, "mb_seconds": mb_seconds, "wait_error": wait_error,
            "fr_error": fr_error, "fr_entries": fr_entries[-3:], "fr_total": fr_total,
            "stacks": reader.result if reader is not None else [], "timeout_files": timeout_files,
            "fr_files": fr_files}


def named_ranks(message: str) -> list[int]:
    """The rank numbers a ``monitored_barrier`` error names as missing (empty if it names none)."""
    found = NAMED_RANKS.search(message)
    return sorted(int(r) for r in re.findall(r"\d+", found[1])) if found else []


def source_line(fn, mark: str = HANG_MARK) -> int:
    """The line number of the one line of ``fn``'s source that carries ``mark``."""
    lines, first = inspect.getsourcelines(fn)
    [line] = [first + i for i, text in enumerate(lines) if mark in text]
    return line


def hang_site(frames: list) -> list | None:
    """Where a stack waits: the innermost frame's function and file name, and the innermost frame of
    :data:`HANG_FILE` as ``[function, line]`` (``None`` for an empty stack)."""
    here = [[fn, line] for fn, file, line in frames if Path(file).as_posix().endswith(HANG_FILE)]
    return [frames[0][0], Path(frames[0][1]).name, here[0] if here else None] if frames else None


def expected_sites(n: int) -> list[list]:
    """From the source of :data:`HANG_FILE`: the ranks that called the last all_reduce wait in it, the skipping
    rank in the barrier after it."""
    waiting = ["all_reduce", "distributed_c10d.py", ["one_all_reduce_fewer", source_line(one_all_reduce_fewer)]]
    return [waiting] * (n - 1) + [["barrier", "distributed_c10d.py", ["fall_behind", source_line(fall_behind)]]]


def fr_missing(report: str) -> list | None:
    """The analyzer's first collective that some ranks missed: ``[sequence number, missing ranks]``."""
    found = FR_MISSING.search(report)
    return [int(found[1]), sorted(int(r) for r in re.findall(r"\d+", found[2]))] if found else None


class HangsData(TypedDict):
    """The summary data of the 'hangs' lab."""

    skip_rank: int
    mb_message: str
    mb_peer_message: str
    mb_named: list[int]
    mb_seconds: float
    wait_error: str
    fr_works: bool
    fr_outcome: str
    fr_last: list[list | None]
    timeout_s: float
    stacks: list[dict[str, Any]]
    hang_sites: list[list | None]
    expected_sites: list[list]
    fr_files: dict[str, Any]
    fr_missing: list | None
    timeout_files: list[list[str]]


def summarize(ranks: list[HangsRecord], backend: str, params: dict[str, Any]) -> Summary[HangsData]:
    n, timeout_s, collectives = len(ranks), params["timeout_s"], params["collectives"]
    skipper = n - 1
    message = ranks[0]["mb_error"]
    peers = [r["mb_error"] for r in ranks[1:skipper]]
    last: list[Any] = [r["fr_entries"][-1] if r["fr_entries"] else None for r in ranks]
    works = all(r["fr_entries"] for r in ranks)
    outcome = next((r["fr_error"] for r in ranks if r["fr_error"]), "")
    stacks = ranks[skipper]["stacks"]
    files = ranks[0]["fr_files"]
    data: HangsData = {"skip_rank": skipper, "mb_message": message, "mb_peer_message": peers[0] if peers else "",
            "mb_named": named_ranks(message), "mb_seconds": ranks[0]["mb_seconds"],
            "wait_error": ranks[0]["wait_error"], "fr_works": works, "fr_outcome": outcome, "fr_last": last,
            "timeout_s": timeout_s, "stacks": stacks, "hang_sites": [hang_site(s["frames"]) for s in stacks],
            "expected_sites": expected_sites(n), "fr_files": files, "fr_missing": fr_missing(files["report"]),
            "timeout_files": [r["timeout_files"] for r in ranks]}
    config = files["raw_pg_config"]
    checks = [check_true("fr_dump_lacks_membership", all(g["ranks"] == "[]" for g in config.values()), json.dumps(config),
                         "gloo의 덤프 파일에는 어느 그룹의 구성원(pg_config의 ranks)도 적혀 있지 않다: torch의 분석기가 "
                         "그대로는 읽지 못한다(랭크 0 파일의 pg_config)")]
    if n == 1:
        reason = "랭크가 하나면 건너뛸 다른 랭크가 없다"
        return Summary(data, checks + [not_applicable(name, reason) for name in
                                       ("barrier_names_missing_rank", "only_rank0_names_it", "barrier_waited_timeout",
                                        "stacks_waiting_in_all_reduce", "stack_skipper_elsewhere",
                                        "fr_shows_rank_behind", "fr_state_does_not_tell", "fr_files_name_missing_rank",
                                        "gloo_no_dump_on_timeout")])
    sites, expected = data["hang_sites"], data["expected_sites"]
    errors = "; ".join(f"랭크 {r}: {s['error']}" for r, s in enumerate(stacks) if s["error"])
    checks += [
        check_equal("barrier_names_missing_rank", named_ranks(message), [skipper],
                    f"monitored_barrier에서 랭크 0의 오류가 건너뛴 랭크 {skipper}만 이름으로 댄다"),
        check_equal("only_rank0_names_it", [r["rank"] for r in ranks if named_ranks(r["mb_error"])], [0],
                    "오지 않은 랭크를 이름으로 대는 것은 랭크 0의 오류뿐이다(다른 랭크는 랭크 0을 보라고만 한다)"),
        check_at_least("barrier_waited_timeout", ranks[0]["mb_seconds"], 0.9 * timeout_s,
                       f"랭크 0은 timeout({timeout_s:g}초)까지 기다린 뒤 오류를 낸다(기다린 초)"),
        check_equal("stacks_waiting_in_all_reduce", sites[:skipper] if len(sites) == n else errors or None,
                    expected[:skipper],
                    "py-spy로 밖에서 읽은 스택: 마지막 all_reduce를 부른 랭크는 모두 그 줄의 all_reduce 안에서 기다린다"
                    "(가장 안쪽 함수, 파일, 이 실습 파일의 함수와 줄)"),
        check_equal("stack_skipper_elsewhere", sites[skipper] if len(sites) == n else errors or None, expected[skipper],
                    f"py-spy로 읽은 랭크 {skipper}의 스택: all_reduce를 건너뛰고 그 다음 줄의 barrier에서 기다린다"),
        check_equal("fr_files_name_missing_rank", data["fr_missing"], [collectives + 1, [skipper]],
                    f"랭크마다 쓴 덤프 파일을 torch의 분석기(fr_trace)에 넘기면, 순번 {collectives + 1}의 all_reduce에 "
                    f"오지 않은 랭크로 {skipper}만 댄다(순번, 빠진 랭크)"),
        check_equal("gloo_no_dump_on_timeout", data["timeout_files"], [[]] * n,
                    "TORCH_FR_DUMP_TEMP_FILE을 정해 두어도 gloo는 timeout에 덤프 파일을 쓰지 않는다"
                    "(랭크마다 그 폴더에 생긴 파일)"),
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
    description=("멈춘 잡에서 범인 찾기: monitored_barrier, py-spy로 읽은 랭크마다의 스택, 플라이트 레코더와 그 덤프 파일이 "
                 "멈춘 랭크와 자리를 보이는지 (gloo)"),
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=10,
    default_nproc=3,
    params={"timeout_s": Float(2.0, min=1.0, max=5.0, help="실험 그룹의 timeout(초): 이만큼 기다린 뒤 오류로 끝난다"),
            "collectives": Int(3, min=1, max=50, help="모든 랭크가 함께 부르는 all_reduce 수(마지막 랭크는 하나 덜)")},
    record=HangsRecord,
    data=HangsData,
)
