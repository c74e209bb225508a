"""The doctor's report: the findings, the script's own failure, the summary and what was mapped, as Korean
text (:meth:`DoctorReport.report`) or one JSON object (:meth:`DoctorReport.to_json`), with the exit code
``labs run`` uses (:mod:`labs.errors`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..errors import EXIT_CHECK_FAILED, EXIT_LAB_ERROR, EXIT_OK
from .findings import Failure, Finding, Summary, where

_TAIL = 40  # lines of each rank's output kept in the JSON


@dataclass
class RankOutput:
    rank: int
    returncode: int | None
    stopped: str
    stdout: str
    stderr: str


@dataclass
class DoctorReport:
    script: str
    args: list[str]
    nproc: int
    findings: list[Finding]
    failure: Failure | None
    summary: Summary
    mappings: list[dict[str, object]]
    wall_seconds: float
    outputs: list[RankOutput] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 no finding, 1 findings, 3 the script failed in a way no finding explains."""
        if self.failure is not None and not self.failure["explained_by"]:
            return EXIT_LAB_ERROR
        return EXIT_CHECK_FAILED if self.findings else EXIT_OK

    @property
    def kinds(self) -> list[str]:
        return [f["kind"] for f in self.findings]

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["exit_code"] = self.exit_code
        data["outputs"] = [{**o, "stdout": _tail(o["stdout"]), "stderr": _tail(o["stderr"])} for o in data["outputs"]]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=1)

    def report(self) -> str:
        lines = [self._headline(), ""]
        for i, f in enumerate(self.findings, 1):
            lines += _finding(i, f)
        if self.failure is not None:
            lines += _failure(self.failure)
        lines += self._summary()
        if self.mappings:
            lines += ["", "GPU 스크립트를 CPU에서 돌리려고 바꾼 것(파일은 그대로):"]
            lines += [f"  - {where(m['site'])}  {m['what']}: {m['before']} → {m['after']}" for m in self.mappings]  # type: ignore[arg-type]
        return "\n".join(lines).rstrip() + "\n"

    def _headline(self) -> str:
        ran = f"{self.script}{' ' + ' '.join(self.args) if self.args else ''}"
        head = f"labs doctor: {ran}을(를) 랭크 {self.nproc}개(CPU, gloo)에서 torchrun처럼 실행했습니다"
        if self.exit_code == EXIT_OK:
            return f"{head}: 발견한 문제 없음."
        if self.exit_code == EXIT_LAB_ERROR:
            return f"{head}: 스크립트가 실패했습니다" + (f", 발견 {len(self.findings)}개." if self.findings else ".")
        return f"{head}: 발견 {len(self.findings)}개."

    def _summary(self) -> list[str]:
        s = self.summary
        n, b, k, big = s["world_size"], s["batch_per_rank"], s["accumulation"], s["global_batch"]
        batch = (f"랭크당 배치 b={b}, 누적 K={k}, 전역 배치 B = b·N·K = {b}·{n}·{k} = {big}" if big
                 else "배치 크기는 재지 못함(DataLoader도 DDP 순전파도 없음)")
        if s["collectives_per_step"] is not None:
            counts = ", ".join(f"{op} {c}번" for op, c in sorted(s["collectives_per_step"].items())) or "0번"
            comms = f"스텝 {s['profiled_step']}에 프로세스 그룹이 한 집합 통신: {counts}"
        else:
            comms = "스텝당 집합 통신은 재지 못함(스텝이 둘 미만)"
        time = (f"스텝당 {s['seconds_per_step'] * 1000:.1f} ms(랭크 0, CPU, doctor의 기록 시간 제외)"
                if s["seconds_per_step"] is not None else "스텝 시간은 재지 못함")
        backend = s["backend"] or "없음"
        return ["", f"요약: 월드 크기 N={n}, 백엔드 {backend}, 최적화 스텝 {s['steps']}번, {batch}.",
                f"      {comms}; {time}. 전체 {self.wall_seconds:.1f}초."]


def _finding(i: int, f: Finding) -> list[str]:
    site = f["site"]
    lines = [f"[{i}] {f['title']}  ({f['kind']})"]
    if site is not None:
        lines.append(f"    위치: {where(site)}  {site['code']}")
    for line in f["lines"]:
        at = line["site"]
        lines.append(f"      랭크 {line['rank']}: {line['what']} — {where(at)}" + (f"  {at['code']}" if at else ""))
    lines += [f"    측정: {f['measured']}", f"    고칠 것: {f['fix']}", ""]
    return lines


def _failure(f: Failure) -> list[str]:
    rank = f"랭크 {f['rank']}" if f["rank"] is not None else "랭크들"
    if f["kind"] == "cuda":
        head = (f"[스크립트 실패] {rank}: {where(f['site'])}의 CUDA 기능은 GPU 없이 대신할 수 없습니다({f['type']}: "
                f"{f['message'].splitlines()[0][:160]}). 그 줄을 `if torch.cuda.is_available():`로 감싸거나 `device` 변수를 "
                "쓰게 바꾸세요(doctor가 CPU로 바꿔 주는 것은 labs/doctor/rank/devices.py의 목록).")
    elif f["kind"] == "crash":
        head = f"[스크립트 실패] {rank}: 결과 없이 끝났습니다: {f['message']}."
    elif f["kind"] == "timeout" and f["explained_by"]:
        head = f"[스크립트 실패] {f['message']}."
    elif f["kind"] == "timeout":
        head = (f"[스크립트 실패] {f['message']}. `--steps K`(최적화 스텝 K번 뒤 멈춤)나 `--batches K`(에폭마다 배치 K개)로 "
                "짧게 하거나 `--timeout`을 늘리세요.")
    else:
        message = f["message"].strip().splitlines()[0][:300] if f["message"].strip() else ""
        head = f"[스크립트 실패] {rank}, {where(f['site'])}: {f['type']}: {message}".rstrip(": ")
    if f["explained_by"]:  # the finding says what to change: one line is enough
        return [f"{head} (원인: 위의 {f['explained_by']})", ""]
    body = [f"    {line}" for line in f["text"].rstrip().splitlines()[-12:]] if f["text"].strip() else []
    return [head, *body, ""]


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-_TAIL:])
