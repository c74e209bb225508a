"""Real multi-process labs for the DDP course: ``labs.run("replicas", nproc=4)``.

Each lab is a small function run on every rank of a real ``torch.distributed`` process
group; the launcher (:mod:`labs.launch`) is separate from the lessons.
"""

import signal
import sys

from .errors import end_on_ctrl_c_while_loading

if sys.argv[:1] == ["-m"]:  # `python -m labs`: a Ctrl-C before the CLI's handler (torch loads first) ends quietly too
    signal.signal(signal.SIGINT, end_on_ctrl_c_while_loading)

from .errors import LabCheckFailed, LabConfigError, LabError, LabTimeoutError, RankCrashedError, RankFailedError
from .grading import grade
from .launch import run
from .prediction import remember_glue_in_kernel
from .registry import all_labs, get_lab
from .result import Check, LabResult

remember_glue_in_kernel()  # 라이브 Jupyter의 예측 상자가 어느 셀이 glue한 값이든 보여 주도록

__all__ = [
    "Check", "LabCheckFailed", "LabConfigError", "LabError", "LabResult", "LabTimeoutError",
    "RankCrashedError", "RankFailedError", "all_labs", "get_lab", "grade", "run",
]
