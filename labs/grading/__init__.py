"""The grader of chapters 9 and 13, around the ``grade`` lab (:mod:`labs.lessons.grade`); it imports no lesson
nor the CLI. The parent side (source, the judges, summary, report, runner) imports no module of the rank side (rank,
the probes, reach), which runs next to the reader's code; config holds what both share. CONTRIBUTING.md
(채점기(9장) 고치기) gives each module's one job.
"""

from .report import diagnosis, explain_error, failed_checks, report
from .runner import grade
from .source import GradeInputError

__all__ = ["GradeInputError", "diagnosis", "explain_error", "failed_checks", "grade", "report"]
