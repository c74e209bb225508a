"""What each finding of `labs doctor` costs: every script of its gallery (tests/doctor_scripts) rehearsed on N
CPU ranks, one line each: the script, what the doctor found (kind and line), the exit code and the seconds the
rehearsal took (ranks started, ran, were stopped). Run from the repository root:

    .venv/bin/python scripts/doctor_costs.py [N]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from labs.doctor import examine

GALLERY = Path(__file__).resolve().parents[1] / "tests" / "doctor_scripts"


def main() -> None:
    nproc = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    print(f"N={nproc}, {os.cpu_count()} CPU, 부하 평균 {os.getloadavg()[0]:.1f} (시작)")
    for script in sorted(GALLERY.glob("*.py")):
        with tempfile.TemporaryDirectory() as folder:
            started = time.monotonic()
            report = examine(script, nproc=nproc, timeout=45, cwd=folder)
            total = time.monotonic() - started
        found = ", ".join(f"{f['kind']}:{f['site']['line'] if f['site'] else '-'}" for f in report.findings) or "-"
        if report.failure and not report.failure["explained_by"]:
            found += f" (실패 {report.failure['kind']})"
        print(f"{script.name:32} 종료 {report.exit_code}  랭크 {report.wall_seconds:5.1f}초  전체 {total:5.1f}초  {found}",
              flush=True)
    print(f"부하 평균 {os.getloadavg()[0]:.1f} (끝)")


if __name__ == "__main__":
    main()
