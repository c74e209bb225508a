"""Chapter 10: the two hangs the ``hangs`` lab reads, each on a short-timeout gloo group so that nothing really hangs.

The last rank skips a ``monitored_barrier`` (:func:`skip_barrier`), or issues one ``all_reduce`` fewer than the
others and goes on to the default group's barrier (:func:`fall_behind`). The lines where the ranks then wait
carry :data:`HANG_MARK`: the stack dumps must show those lines.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from ..context import RankContext
from .comms import quiet_stderr

HANG_MARK = "# 멈춘 자리"  # the lines where the ranks wait in the hang (the stack dumps must show these lines)


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


def is_skipper(ctx: RankContext) -> bool:
    return ctx.world_size > 1 and ctx.rank == ctx.world_size - 1


def one_all_reduce_fewer(ctx: RankContext, group, collectives: int) -> str:
    """Every rank issues ``collectives`` all_reduces; all but the last issue one more (it times out)."""
    x = torch.ones(4)
    for _ in range(collectives):
        dist.all_reduce(x, group=group)
    if is_skipper(ctx):
        return ""  # 이 랭크는 마지막 all_reduce를 건너뛴다
    default_store().set(f"hangs/waiting/{ctx.rank}", "1")  # 스택을 읽는 쪽에 "이제 기다린다"고 알린다
    try:
        with quiet_stderr():
            dist.all_reduce(x, group=group)  # 멈춘 자리: 상대가 오지 않으므로 그룹의 timeout에 끝난다
        return ""
    except RuntimeError as exc:
        return str(exc)


def default_store():
    """The process group's key-value store (the launcher's TCPStore): ranks leave small notes there."""
    return dist.distributed_c10d._get_default_store()


def gloo_timeout_files():
    """Point the flight recorder's dump-file prefix (``TORCH_FR_DUMP_TEMP_FILE``) at an empty temporary
    folder; the returned function lists what landed there, the second one puts everything back."""
    folder = tempfile.mkdtemp(prefix="labs-fr-timeout-")
    saved = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = os.path.join(folder, "rank_")

    def restore():
        if saved is None:
            os.environ.pop("TORCH_FR_DUMP_TEMP_FILE", None)
        else:
            os.environ["TORCH_FR_DUMP_TEMP_FILE"] = saved
        shutil.rmtree(folder, ignore_errors=True)

    return (lambda: sorted(os.listdir(folder))), restore


def fall_behind(ctx: RankContext, group, collectives: int) -> tuple[str, list[str]]:
    """:func:`one_all_reduce_fewer`, then the default group's barrier: the error the waiting ranks got, and the
    files the timeout left in the flight recorder's dump folder (:func:`gloo_timeout_files`)."""
    landed, restore = gloo_timeout_files()
    try:
        wait_error = one_all_reduce_fewer(ctx, group, collectives)
        dist.barrier()  # 멈춘 자리: 건너뛴 랭크는 다음 집합 통신으로 가서 나머지 랭크의 timeout까지 기다린다
        timeout_files = landed()
    finally:
        restore()
    return wait_error, timeout_files
