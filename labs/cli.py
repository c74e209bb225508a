"""``python -m labs``: list labs, run one, benchmark or grade on N ranks (spawned here, or in place under
torchrun); the exit codes are the table in :mod:`labs.errors`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from . import launch
from .context import BACKENDS
from .doctor import cli as doctor_cli
from .errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_LAB_ERROR,
    EXIT_OK,
    EXIT_SIGNAL,
    LabConfigError,
    LabError,
    LaunchInterrupted,
    say,
)
from .grading import explain_error, report
from .grading.runner import DEFAULT_TIMEOUT as GRADE_TIMEOUT
from .grading.runner import checked, lab_params, traced
from .grading.source import REFERENCE
from .params import describe
from .registry import all_labs, get_lab
from .result import LabResult


class _KoreanParser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"오류: 명령줄 인자가 잘못되었습니다 ({message}). 도움말: python -m labs --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _KoreanParser(prog="python -m labs", description="DDP 코스의 실습을 실제 프로세스 그룹에서 실행합니다.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_KoreanParser)
    listing = sub.add_parser("list", help="실습 목록과 한 줄 설명")
    listing.add_argument("--params", action="store_true", help="실습마다 인자, 기본값, 허용 범위도 보인다")
    run = sub.add_parser("run", help="실습 하나를 N개 랭크로 실행 (torchrun 아래에서는 그 랭크로 실행)")
    run.add_argument("lab", help="실습 이름 (python -m labs list)")
    run.add_argument("--nproc", type=int, default=None, help="랭크 수 N (기본: 실습마다 다름; torchrun 아래에서는 무시)")
    run.add_argument("--backend", default="auto", choices=BACKENDS, help="auto(기본), gloo, nccl")
    run.add_argument("--timeout", type=float, default=launch.DEFAULT_TIMEOUT, help="제한 시간(초)")
    run.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="실습 인자 (여러 번 가능)")
    run.add_argument("--json", action="store_true", help="결과를 JSON 한 객체로 출력")
    bench = sub.add_parser("bench", help="통신 벤치마크: All-Reduce 대역폭(nccl-tests 방식), 링 vs 라이브러리, "
                                         "메모리 복사 상한, DDP 버킷별 스텝 시간")
    bench.add_argument("--nproc", type=int, action="append", default=None, metavar="N",
                       help="랭크 수 (여러 번 줄 수 있음; 기본: 2, 4와 GPU·코어가 허락하는 만큼; torchrun 아래에서는 무시)")
    bench.add_argument("--quick", action="store_true", help="작은 크기 몇 개와 적은 반복으로 몇 초 안에 끝낸다")
    bench.add_argument("--backend", default="auto", choices=BACKENDS, help="auto(기본), gloo, nccl")
    bench.add_argument("--timeout", type=float, default=600.0, help="N 하나당 제한 시간(초)")
    bench.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="벤치마크 인자 (여러 번 가능), 예: sizes='4K 1M 64M', repeats=10, caps_mb='0.1 25'")
    bench.add_argument("--json", action="store_true", help="모든 결과를 JSON 한 객체로 출력")
    grade = sub.add_parser("grade", help="직접 만든 DDP 클래스(9장)를 실제 랭크에서 채점 (torch DDP·단일 프로세스와 비교)")
    grade.add_argument("path", nargs="?", default=None,
                       help="채점할 파이썬 파일 (예: my_ddp.py; 비우면 참조 구현 labs/ddp/miniddp.py)")
    grade.add_argument("--class", dest="classes", action="append", default=[], metavar="NAME",
                       help="채점할 클래스 (여러 번 가능; 기본: 파일에 있는 PerParameterDDP, BucketedDDP; "
                            "13장의 ShardedOptimizer, FullyShardedDP는 그 인터페이스로 채점)")
    grade.add_argument("--nproc", type=int, default=2, help="랭크 수 N (기본 2; torchrun 아래에서는 무시)")
    grade.add_argument("--backend", default="auto", choices=BACKENDS, help="auto(기본), gloo, nccl")
    grade.add_argument("--timeout", type=float, default=GRADE_TIMEOUT, help="제한 시간(초): 교착은 이 시간 뒤 위치와 함께 보고")
    grade.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="채점 인자 (예: bucket_cap_mb=0.01, steps=5; python -m labs list --params)")
    doctor_cli.add_parser(sub)
    return parser


def _run_or_join(lab: str, args, nproc: int | None, **params) -> LabResult | None:
    """Spawn ``nproc`` ranks of ``lab``, or join in place as this torchrun rank (``nproc`` ignored); the
    result, or None on a torchrun rank other than 0 (rank 0 reports for everyone)."""
    if launch.in_torchrun():
        return launch.run_in_place(lab, args.backend, args.timeout, **params)
    return launch.run(lab, nproc, args.backend, args.timeout, **params)


def _reported(results: list[LabResult | None], text: Callable[[list[LabResult]], str]) -> int:
    """Print ``text(results)`` and return the exit code; a torchrun rank other than 0 prints nothing
    (rank 0 reports for everyone)."""
    done = [r for r in results if r is not None]
    if len(done) < len(results):
        return EXIT_OK
    print(text(done))
    return EXIT_OK if all(r.ok for r in done) else EXIT_CHECK_FAILED


def run_lab(args) -> int:
    """``python -m labs run LAB``: one result, as a text report or one JSON object."""
    result = _run_or_join(args.lab, args, args.nproc, **get_lab(args.lab).parse_params(args.param))
    return _reported([result], lambda rs: rs[0].to_json() if args.json else rs[0].report())


def run_bench(args) -> int:
    """``python -m labs bench``: one process group per N, tables (or one JSON object) at the end."""
    bench = get_lab("bench").report  # 표와 JSON: 실습이 Lab에 실어 둔 모듈(엔진은 실습을 import하지 않는다)
    assert bench is not None, "the bench lab carries its report module"
    params = {**(bench.FULL if not args.quick else {}), **get_lab("bench").parse_params(args.param)}
    if launch.in_torchrun():
        sizes = [None]  # the torchrun job's world size
    else:
        sizes = args.nproc or bench.default_world_sizes()
        for n in sizes:  # every N's input is checked before the first one runs
            launch.check_nproc(n)
            get_lab("bench").resolve_params(params, n)
    results = [_run_or_join("bench", args, n, **params) for n in sizes]
    return _reported(results, lambda rs: bench.to_json(rs) if args.json else "\n\n".join(map(bench.report, rs)))


def run_grade(args) -> int:
    """``python -m labs grade [PATH] [--class NAME]``: the Korean report of :mod:`labs.grading` (without a
    path: the reference ``labs/ddp/miniddp.py``)."""
    path = args.path or str(REFERENCE)
    params = get_lab("grade").parse_params(args.param)
    with traced(path, spawned=not launch.in_torchrun()) as trace_dir:
        result = checked(_run_or_join("grade", args, args.nproc, **lab_params(path, args.classes, trace_dir),
                                      **params))
    return _reported([result], lambda rs: report(rs[0]))


COMMANDS = {"run": run_lab, "bench": run_bench, "grade": run_grade, "doctor": doctor_cli.run}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "list":
        for lab in all_labs().values():
            where = f"{lab.chapter}장" if lab.chapter < 99 else "부록"
            print(f"{lab.name:<12} {where:>4} · 기본 N={lab.default_nproc}  {lab.description}")
            if args.params:
                print("".join(f"    --param {line}\n" for line in describe(lab.params)), end="")
                for name, case in lab.cases.items():  # 경우마다 그 경우만 읽는 인자
                    print(f"    {lab.case_key}={name}일 때:")
                    print("".join(f"      --param {line}\n" for line in describe(case.params)), end="")
        return EXIT_OK
    try:
        return COMMANDS[args.command](args)
    except LabConfigError as err:
        print(f"오류: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except LabError as err:  # grade explains a deadlock or a dead rank in the reader's words
        print(explain_error(err, args.timeout) if args.command == "grade" else f"실습 실행 실패: {err}",
              file=sys.stderr)
        return EXIT_LAB_ERROR
    except LaunchInterrupted as err:  # SIGTERM, SIGHUP: the ranks are already stopped
        say(f"중단: {err}")
        return EXIT_SIGNAL + err.signum
