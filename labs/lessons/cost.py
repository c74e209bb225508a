"""Chapter 7+ lab: the communication benchmark, registered so the launcher can run it.

The benchmark itself lives in :mod:`labs.bench` (``python -m labs bench`` prints it as
nccl-tests-style tables); this module only puts its ``LAB`` in the catalog, so that
``labs.run("bench", nproc=N)`` and ``torchrun ... -m labs run bench`` work like every lab.
"""

from ..bench import LAB

__all__ = ["LAB"]
