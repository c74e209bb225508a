"""What must agree across ranks at each sync point (one rank's ``sync`` event): the operation and, for tensor
collectives, the shape and dtype of the tensor (object collectives and gather/scatter legitimately differ)."""

from __future__ import annotations

from typing import Any

OBJECT_OPS = ("all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list")
# The sync points a rank enters and leaves in Python (``sync`` … ``synced``): torch.distributed's collectives and
# DDP's constructor. DDP's forward only prepares the All-Reduce that its backward runs in C++ (no ``synced``).
PYTHON_SYNCS = frozenset(("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object",
                          "gather", "gather_object", "scatter", "scatter_object_list", "reduce_scatter",
                          "reduce_scatter_tensor", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier",
                          "broadcast_object_list", "all_reduce_coalesced", "all_gather_coalesced", "new_group",
                          "_all_gather_base", "_reduce_scatter_base", "init_process_group", "DDP"))


def key(event: dict[str, Any]) -> tuple[object, ...]:
    shape = None if event["op"] in OBJECT_OPS or event["op"] in ("gather", "scatter") else str(event["shape"])
    return (event["op"], shape)


def describe(event: dict[str, Any]) -> str:
    """``all_reduce([4], float32)``: the operation with its tensor's shape and dtype."""
    shape = event.get("shape")
    if event["op"] == "DDP":
        return f"DDP 생성(파라미터 {shape[0][0]}개를 랭크 0에서 broadcast)" if shape else "DDP 생성"
    return f"{event['op']}({shape[0]}, {shape[1]})" if shape and event["op"] not in OBJECT_OPS else str(event["op"])
