"""The lab catalog: name -> rank function, Korean description and summary with checks."""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable

from .context import RankContext
from .errors import LabConfigError
from .result import LabResult

RankFn = Callable[..., dict]
Summarize = Callable[[list, str, dict], LabResult]


@dataclass(frozen=True)
class Lab:
    """A lesson run on every rank (``rank_fn``) and turned into checks (``summarize``).

    ``rank_fn(ctx, **params)`` returns plain data (numbers, lists); ``summarize(ranks, backend,
    params)`` receives the list of those records in rank order and returns a :class:`LabResult`.
    """

    name: str
    description: str
    rank_fn: RankFn
    summarize: Summarize
    default_nproc: int = 2
    defaults: dict[str, Any] | None = None
    # Extra checks of the parameters for a given world size; raises LabConfigError.
    validate: Callable[[dict, int], None] | None = None
    chapter: int = 99  # the book chapter that teaches it (orders `python -m labs list`)

    def params(self, overrides: dict[str, Any], world_size: int) -> dict[str, Any]:
        """Defaults merged with ``overrides``, type-checked and validated for ``world_size`` ranks."""
        params = dict(self.defaults or {})
        unknown = set(overrides) - set(params)
        if unknown:
            raise LabConfigError(
                f"실습 '{self.name}'에 없는 인자입니다: {', '.join(sorted(unknown))}. "
                f"쓸 수 있는 인자: {', '.join(sorted(params)) or '(없음)'}"
            )
        for key, value in overrides.items():
            expected = type(params[key])
            if expected is str and not isinstance(value, str):
                raise LabConfigError(f"실습 '{self.name}'의 인자 {key}는 문자열이어야 합니다. 받은 값: {value!r}")
            if expected is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise LabConfigError(f"실습 '{self.name}'의 인자 {key}는 정수여야 합니다. 받은 값: {value!r}")
            if expected is int and "seed" not in key and "rank" not in key and value < 1:
                raise LabConfigError(f"실습 '{self.name}'의 인자 {key}는 1 이상이어야 합니다. 받은 값: {value!r}")
        params.update(overrides)
        if self.validate:
            self.validate(params, world_size)
        return params

    def run_rank(self, ctx: RankContext, params: dict[str, Any]) -> dict:
        return self.rank_fn(ctx, **params)


def lesson_modules() -> list[str]:
    """Importable names of the lesson modules (without importing them)."""
    from . import lessons

    return [f"{lessons.__name__}.{info.name}" for info in pkgutil.iter_modules(lessons.__path__)]


@functools.lru_cache(maxsize=None)
def _catalog() -> dict[str, Lab]:
    """Every ``LAB`` defined by a module of :mod:`labs.lessons`, in chapter order."""
    found = []
    for name in lesson_modules():
        module = importlib.import_module(name)
        if isinstance(getattr(module, "LAB", None), Lab):
            found.append(module.LAB)
    found.sort(key=lambda lab: (lab.chapter, lab.name))
    return {lab.name: lab for lab in found}


def all_labs() -> dict[str, Lab]:
    return _catalog()


def get_lab(name: str) -> Lab:
    labs = _catalog()
    if name in labs:
        return labs[name]
    close = difflib.get_close_matches(name, labs, n=1)
    hint = f" 혹시 '{close[0]}'을(를) 찾으셨나요?" if close else ""
    raise LabConfigError(
        f"알 수 없는 실습 이름입니다: {name!r}.{hint} 사용 가능한 실습: {', '.join(labs)} "
        "(목록과 설명은 `python -m labs list`)."
    )
