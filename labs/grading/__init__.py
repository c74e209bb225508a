"""The grader of chapter 9, in three parts that never share a process with the reader's code by accident.

- :mod:`labs.grading.source`: the parent's checks of the file from its syntax tree (nothing is executed).
- :mod:`labs.grading.probes`: the ranks' side: import the file under guard, run it, record raw measurements.
- :mod:`labs.grading.judge`: the parent's verdicts from those records; every threshold lives there.

Chapter 13's interfaces have their own probes and verdicts in the same split: a ZeRO-1 optimizer in
:mod:`labs.grading.zero_probes` and :mod:`labs.grading.zero_judge`, a small FSDP in
:mod:`labs.grading.fsdp_probes` and :mod:`labs.grading.fsdp_judge`; :mod:`labs.grading.reach` finds what
an object keeps alive, for their storage accounting.
"""
