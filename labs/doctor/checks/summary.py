"""The run in numbers: N, the per-rank batch b, the accumulation K, B = b·N·K, what the process group ran in
one step, and rank 0's time per step without the doctor's own bookkeeping."""

from __future__ import annotations

import statistics
from collections import Counter

from ..findings import Summary
from ..rank.comms import COLLECTIVES
from .view import View


def summarize(view: View) -> Summary:
    steps = view.steps(0)
    forwards = [e for e in view.events(0, "forward") if e["grad"] and e["step"] < steps]
    batches = [e for e in view.events(0, "batch") if e["step"] < steps]
    sizes = [e["b"] for e in forwards if e["b"]] or [e["b"] for e in batches if e["b"]]
    b = int(statistics.median(sizes)) if sizes else None
    per_step = Counter(e["step"] for e in forwards) if forwards else Counter(e["step"] for e in batches)
    k = int(statistics.median(per_step.values())) if per_step else None
    profile = view.first(0, "profile")
    syncs = [e for e in view.events(0, "sync") if e["seq"] >= 0 and e["op"] in COLLECTIVES and 0 < e["step"] < steps]
    post = [e for e in view.events(0, "post") if e["opt"] == 0]
    times = [(b2["t"] - b1["t"]) - (b2["overhead"] - b1["overhead"]) for b1, b2 in zip(post, post[1:])]
    backend = next((e.get("backend") for e in view.events(0, "synced") if e["op"] == "init_process_group"), None)
    return Summary(world_size=view.nproc, backend=backend, steps=steps, batch_per_rank=b, accumulation=k,
                   global_batch=b * view.nproc * k if b and k else None,
                   collectives_per_step=profile["counts"] if profile else None,
                   profiled_step=profile["step_to"] if profile else None,
                   python_collectives_per_step=len(syncs) / (steps - 1) if steps > 1 else None,
                   seconds_per_step=statistics.median(times) if times else None,
                   ddp=any(e["op"] == "DDP" for e in view.events(0, "sync")))

