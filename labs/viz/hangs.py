"""Chapter 10.9: the hang read with the tools, as the text a reader would see in a terminal, trimmed."""

from __future__ import annotations

from pathlib import Path

_LAB_FILE = "hangs.py"  # the lab (labs/lessons/hangs.py) and the hangs it makes (labs/tools/hangs.py)
_ANALYZER_LINES = ("Not all ranks joining collective", "collective:", "missing ranks:", "expected ranks:")


def trimmed(frames: list) -> tuple[list, int]:
    """The innermost frames down to the last one of the lab's file in the first run of them; how many were cut."""
    names = [Path(file).name for _, file, _ in frames]
    if _LAB_FILE not in names:
        return frames, 0
    end = names.index(_LAB_FILE)
    while end + 1 < len(names) and names[end + 1] == _LAB_FILE:
        end += 1
    return frames[:end + 1], len(frames) - end - 1


def site(hang_site: list | None) -> str:
    """``["all_reduce", "distributed_c10d.py", ["one_all_reduce_fewer", 72]]`` in words."""
    if not hang_site or not hang_site[2]:
        return "스택을 읽지 못함"
    function, line = hang_site[2]
    return f"{_LAB_FILE} {line}행 {function}()의 {hang_site[0]}"


def stack_dump(result) -> str:
    """Each rank's main thread as ``py-spy dump --pid`` printed it, down to the lab's own frames."""
    blocks = []
    for rank, stack in enumerate(result.data["stacks"]):
        head = f"# 랭크 {rank}: py-spy dump --pid {stack['pid']} (주 스레드, 가장 안쪽 호출이 맨 위)"
        if stack["error"]:
            blocks.append(f"{head}\n    py-spy 오류: {stack['error']}")
            continue
        frames, cut = trimmed(stack["frames"])
        lines = [f"    {fn} ({file}:{line})" for fn, file, line in frames]
        if cut:
            lines.append(f"    … 그 아래 {cut}개(이 코스의 런처와 multiprocessing) 생략")
        blocks.append("\n".join([head, *lines]))
    return "\n\n".join(blocks)


def analyzer_lines(report: str) -> list[str]:
    """The analyzer's lines that name the collective and the missing ranks."""
    return [line for line in report.splitlines() if line.startswith(_ANALYZER_LINES)]


def flight_record_files(result) -> str:
    """The per-rank dump files rank 0 collected and what torch's analyzer said about them."""
    files = result.data["fr_files"]
    listing = ", ".join(f"{name} ({size:,}바이트)" for name, size in zip(files["files"], files["sizes"]))
    return "\n".join([f"# 랭크마다 하나씩 쓴 덤프 파일: {listing}",
                      "# gloo가 쓴 그대로 분석기에 넘기면:",
                      files["raw_report"].splitlines()[-1] if files["raw_report"] else "(출력 없음)",
                      "# 그룹마다 구성원(ranks)을 채워 넘기면 (python -m torch.distributed.flight_recorder.fr_trace):",
                      *analyzer_lines(files["report"])])
