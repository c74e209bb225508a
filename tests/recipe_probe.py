"""Run a training script on one rank under ``labs.tools.comms.CollectiveCounter`` (not a test module).

    torchrun --nproc_per_node=2 tests/recipe_probe.py OUT_FOLDER SCRIPT [ARGS…]

Each rank runs SCRIPT as ``__main__`` (unchanged) and writes the work items its process group ran (op, element count,
dtype, in order) to ``OUT_FOLDER/probe-rank<RANK>.json``: what the backend really did, whoever called it.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

from labs.tools.comms import CollectiveCounter

if __name__ == "__main__":
    out, script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    with CollectiveCounter() as counter:
        runpy.run_path(script, run_name="__main__")
    Path(out, f"probe-rank{os.environ['RANK']}.json").write_text(json.dumps(counter.items), encoding="utf-8")
