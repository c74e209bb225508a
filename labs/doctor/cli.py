"""``python -m labs doctor``: its subcommand (added to the engine's parser by :func:`add_parser`) and its run.

``python -m labs doctor [OPTIONS] SCRIPT [OPTIONS] [-- ARGS…]``: the doctor's options may stand before or after
the script; everything after ``--`` is the script's own command line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import DEFAULT_TIMEOUT, examine
from .inputs import DoctorInputError


def _add_options(parser: argparse.ArgumentParser, defaults: bool = True) -> None:
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--nproc", type=int, default=default(2), help="랭크 수 N (기본 2)")
    parser.add_argument("--timeout", type=float, default=default(DEFAULT_TIMEOUT),
                        help=f"제한 시간(초, 기본 {DEFAULT_TIMEOUT:g}): 멈춘 랭크는 이 시간 뒤 줄 번호와 함께 보고")
    parser.add_argument("--steps", type=int, default=default(None), help="최적화 스텝 K번 뒤 모든 랭크를 멈춤 (긴 학습을 빨리)")
    parser.add_argument("--batches", type=int, default=default(None),
                        help="DataLoader의 에폭(패스)마다 배치 K개까지만 (에폭은 계속)")
    parser.add_argument("--json", action="store_true", default=default(False), help="결과를 JSON 한 객체로 출력")
    parser.add_argument("--show-output", action="store_true", default=default(False),
                        help="랭크마다 스크립트의 출력(stdout, stderr)도 보인다")


class _AfterScript(argparse.ArgumentParser):
    """The doctor's options written after the script: an unknown one is a Korean input error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise DoctorInputError(f"스크립트 뒤의 옵션을 읽지 못했습니다({message}). 스크립트의 인자는 `--` 뒤에 주세요: "
                               "python -m labs doctor train.py --steps 5 -- --epochs 1")


def add_parser(sub: "argparse._SubParsersAction[Any]") -> None:
    doctor = sub.add_parser(
        "doctor", help="내 학습 스크립트를 CPU 랭크 N개에서 torchrun처럼 실행해 DDP 실수를 줄 번호와 함께 찾기",
        usage="python -m labs doctor [옵션] SCRIPT [옵션] [-- 스크립트의 인자…]",
        description="학습 스크립트를 고치지 않고 CPU 랭크 N개(gloo)에서 torchrun --standalone처럼 실행하고, 복제본, 데이터 분할, "
                    "집합 통신, 파일 쓰기, GradScaler, 그래디언트 누적, DDP 오류를 검사합니다. "
                    "종료 코드: 0 문제 없음, 1 발견, 2 잘못된 입력, 3 스크립트 실패.")
    _add_options(doctor)
    doctor.add_argument("script_and_args", nargs=argparse.REMAINDER, metavar="SCRIPT [옵션] [-- ARGS]",
                        help="학습 스크립트(예: train.py), 그 뒤 doctor의 옵션, `--` 뒤에 스크립트의 인자(예: -- --epochs 1)")


def parse(args: argparse.Namespace) -> tuple[str, list[str], argparse.Namespace]:
    """The script, its arguments and the doctor's options (those after the script win)."""
    if not args.script_and_args or args.script_and_args[0] == "--":
        raise DoctorInputError("검사할 스크립트를 주세요: python -m labs doctor train.py [-- 스크립트 인자]")
    script, rest = args.script_and_args[0], args.script_and_args[1:]
    cut = rest.index("--") if "--" in rest else len(rest)
    after = _AfterScript(prog="python -m labs doctor SCRIPT", add_help=False)
    _add_options(after, defaults=False)
    options = argparse.Namespace(**{**vars(args), **vars(after.parse_args(rest[:cut]))})
    return script, rest[cut + 1:], options


def run(args: argparse.Namespace) -> int:
    script, script_args, options = parse(args)
    report = examine(script, options.nproc, script_args, options.timeout, options.steps, options.batches)
    if options.json:
        print(report.to_json())
    else:
        print(report.report(), end="")
        if options.show_output:
            for out in report.outputs:
                for name, text in (("stdout", out.stdout), ("stderr", out.stderr)):
                    if text.strip():
                        print(f"\n--- 랭크 {out.rank}의 {name} ---\n{text.rstrip()}")
    sys.stdout.flush()
    return report.exit_code
