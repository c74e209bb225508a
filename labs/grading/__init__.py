"""The grader of chapter 9, in three parts that never share a process with the reader's code by accident.

- :mod:`labs.grading.source`: the parent's checks of the file from its syntax tree (nothing is executed).
- :mod:`labs.grading.probes`: the ranks' side: import the file under guard, run it, record raw measurements.
- :mod:`labs.grading.judge`: the parent's verdicts from those records; every threshold lives there.
"""
