"""What an object keeps alive, for the grader's storage accounting: the reader may keep an optimizer, a gathered
weight or a gradient anywhere (an attribute, a dict of dataclasses, a hook's closure, an autograd node's saved
tensors, a custom Function's context), and what is measured is the memory held, not where it was put.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Iterator
from contextlib import suppress

import torch

from ..tools.models import storage_bytes

MAX_DEPTH = 12        # 래퍼 → 모듈 → 층 → _parameters → 텐서처럼 내려가는 깊이
MAX_OBJECTS = 200_000  # 한 번의 걷기에서 볼 객체 수의 상한 (채점이 느려지지 않게)
SKIP = (type, types.ModuleType, str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device)


def _children(obj: object) -> list[object]:
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, types.MethodType):
        return [obj.__self__, obj.__func__]
    found: list[object] = []
    if isinstance(obj, types.FunctionType):
        for cell in obj.__closure__ or ():
            with suppress(ValueError):  # 아직 값이 없는 칸
                found.append(cell.cell_contents)
        return found
    if hasattr(obj, "next_functions"):  # autograd의 노드: 다음 노드, 저장한 텐서, 사용자 Function의 ctx 속성
        for name in (n for n in dir(obj) if n.startswith("_saved_")):
            with suppress(RuntimeError):  # 역전파가 이미 풀어 버린 값
                found.append(getattr(obj, name))
        nodes = [node for node, _ in obj.next_functions if node is not None]
        return nodes + found + list(getattr(obj, "__dict__", {}).values())
    if not hasattr(obj, "__dict__") or (type(obj).__module__.startswith(("torch._C", "torch.distributed"))
                                        and not isinstance(obj, (torch.optim.Optimizer, torch.nn.Module))):
        return []  # 프로세스 그룹 같은 torch의 객체: 그 안의 텐서는 읽는 사람이 쥔 것이 아니다
    return list(vars(obj).values())


def reachable(*roots: object) -> Iterator[object]:
    """Every object reachable from ``roots`` (tensors are yielded, not entered; their ``.grad`` is)."""
    seen, kept, frontier = set[int](), list[object](), list(roots)
    for _ in range(MAX_DEPTH):
        nxt: list[object] = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, SKIP) or len(seen) >= MAX_OBJECTS:
                continue
            seen.add(id(obj))
            kept.append(obj)  # 걷는 동안 살려 둔다: 풀린 객체의 id를 새 객체가 물려받으면 건너뛰게 된다
            yield obj
            if not torch.is_tensor(obj):
                nxt += _children(obj)
            elif obj.is_leaf and obj.grad is not None:
                nxt.append(obj.grad)
        frontier = nxt


def held_bytes(roots: list[object], exclude: Iterable[torch.Tensor | None] = ()) -> int:
    """Bytes of the distinct storages of every tensor reachable from ``roots``, those of ``exclude``
    (parameters and their gradients) left out: a tensor that aliases them is not extra memory."""
    skip = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
    return storage_bytes(t for t in reachable(*roots) if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in skip)
