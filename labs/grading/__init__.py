"""The grader of chapters 9 and 13, around the ``grade`` lab (:mod:`labs.lessons.grade`), in parts that
never share a process with the reader's code by accident. Nothing here imports a lesson or the CLI.

- :mod:`labs.grading.source`: the parent's checks of the file from its syntax tree (nothing is executed).
- :mod:`labs.grading.rank`: each rank's run: import the file under guard, every class through the probes
  of its interface, on a process group behind torch's collective checker.
- :mod:`labs.grading.probes`: a DDP's probes (raw measurements, no verdicts) and the tools the others share;
  :mod:`labs.grading.zero_probes` a ZeRO-1 optimizer's, :mod:`labs.grading.fsdp_probes` a small FSDP's;
  :mod:`labs.grading.reach` finds what an object keeps alive, for their storage accounting.
- :mod:`labs.grading.judge`: the parent's verdicts on a DDP from those records, with every threshold, one
  function per check in a table; :mod:`labs.grading.zero_judge` and :mod:`labs.grading.fsdp_judge` for
  chapter 13's interfaces; :mod:`labs.grading.verdicts` walks any such table; :mod:`labs.grading.summary`
  picks each class's judge (the lab's ``summarize``).
- :mod:`labs.grading.config`: what both sides share (the probes' optimizers and settings); the parent's
  modules import no rank-side one.
- :mod:`labs.grading.hints` and :mod:`labs.grading.report`: the words for each check and the Korean report.
- :mod:`labs.grading.runner`: :func:`grade`, which runs the lab and explains a dead or stuck rank.
"""

from .report import diagnosis, explain_error, failed_checks, report
from .runner import grade
from .source import GradeInputError

__all__ = ["GradeInputError", "diagnosis", "explain_error", "failed_checks", "grade", "report"]
