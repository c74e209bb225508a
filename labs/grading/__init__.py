"""The grader of chapters 9 and 13, around the ``grade`` lab (:mod:`labs.lessons.grade`); nothing here imports a
lesson or the CLI. The parent side (:mod:`~labs.grading.source`, the judges, :mod:`~labs.grading.summary`,
:mod:`~labs.grading.report`, :mod:`~labs.grading.runner`) imports no module of the rank side (:mod:`~labs.grading.rank`,
the probes, :mod:`~labs.grading.reach`), which runs next to the reader's code; :mod:`~labs.grading.config` holds what
both share. CONTRIBUTING.md (채점기(9장) 고치기) gives each module's one job.
"""

from .report import diagnosis, explain_error, failed_checks, report
from .runner import grade
from .source import GradeInputError

__all__ = ["GradeInputError", "diagnosis", "explain_error", "failed_checks", "grade", "report"]
