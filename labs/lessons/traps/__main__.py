"""``python -m labs.lessons.traps``: every trap's bug and fix, as chapter 10 runs them (``labs/gpu_check.sh``)."""

from __future__ import annotations

import argparse
import sys

from . import check_all

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m labs.lessons.traps",
                                     description="10장의 함정 9가지를 bug/fix로 모두 실행하고 확인한다")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    failed = 0
    for label, result in check_all(args.nproc):
        print(f"== {label} ({result.backend}, N={result.world_size}): {'통과' if result.ok else '실패'}")
        if not result.ok:
            failed += 1
            print(result.report())
    sys.exit(1 if failed else 0)
