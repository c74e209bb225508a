"""The lab catalog: name -> rank function, Korean description and summary with checks."""

from __future__ import annotations

import difflib
import functools
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, get_origin, get_type_hints, is_typeddict

from .context import RankContext
from .errors import LabConfigError
from .params import Folder, InputFile, Spec, parse_pairs, resolve
from .result import LabResult, Summary

RankFn = Callable[..., Mapping[str, Any]]  # rank_fn(ctx, **params) -> XRecord (a TypedDict)
Summarize = Callable[[list[Any], str, dict[str, Any]], Summary[Any]]  # summarize(list[XRecord], ...) -> Summary[XData]


@dataclass(frozen=True)
class Lab:
    """A lesson run on every rank (``rank_fn``) and turned into checks (``summarize``).

    ``rank_fn(ctx, **params)`` returns one record (a dict of plain data) per rank, typed by the
    ``TypedDict`` ``record``; ``summarize(ranks, backend, params)`` receives the records in rank order
    and returns a :class:`Summary` whose data is typed by the ``TypedDict`` ``data``. The engine
    validates the parameters against ``params`` before spawning, checks every record's keys against
    ``record`` and the summary's against ``data`` (a renamed field fails here, naming the lab), and
    builds the :class:`LabResult`.
    """

    name: str
    description: str
    rank_fn: RankFn
    summarize: Summarize
    params: dict[str, Spec] = field(default_factory=dict)
    record: type | None = None  # a TypedDict: the keys of every rank's record
    data: type | None = None  # a TypedDict: the keys of the summary's data
    default_nproc: int = 2
    # Rules between parameters or with the world size; raises LabConfigError (Korean).
    validate: Callable[[dict, int], None] | None = None
    chapter: int = 99  # the book chapter that teaches it (orders `python -m labs list`)
    # A lab with a command of its own (`python -m labs bench`): the module with its FULL parameters,
    # default_world_sizes(), report(result) and to_json(results). The CLI reaches it here, importing no lesson.
    report: ModuleType | None = None

    def __post_init__(self) -> None:
        for what, typed in (("record", self.record), ("data", self.data)):
            if typed is not None and not is_typeddict(typed):
                raise TypeError(f"lab {self.name!r}: {what} must be a TypedDict, got {typed!r}")

    @property
    def record_keys(self) -> frozenset[str] | None:
        """The keys every rank's record has: the fields of ``record``."""
        return typed_keys(self.record)

    def mistyped(self, record: Mapping[str, Any]) -> list[str]:
        """The fields of ``record`` whose value is not of the plain type ``record``'s TypedDict declares (int, float,
        str, bool, list, dict, tuple, a nested TypedDict); fields of other types (unions, Any) are not checked."""
        if self.record is None:
            return []
        wrong = []
        for key, hint in get_type_hints(self.record).items():
            value, kind = record.get(key), get_origin(hint) or hint
            if is_typeddict(hint):
                ok = isinstance(value, dict)
            elif kind in (int, float):  # bool is an int in Python, never a count or a measurement here
                ok = isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
            elif kind in (str, bool, list, dict, tuple):
                ok = isinstance(value, kind)
            else:
                continue
            if not ok:
                wrong.append(f"{key}({type(value).__name__}, 선언 {getattr(hint, '__name__', hint)})")
        return wrong

    @property
    def data_keys(self) -> frozenset[str] | None:
        """The keys of the summary's data: the fields of ``data``."""
        return typed_keys(self.data)

    def resolve_params(self, overrides: dict[str, Any], world_size: int) -> dict[str, Any]:
        """Defaults merged with ``overrides``, each checked by its spec, then ``validate``d."""
        values = resolve(self.name, self.params, overrides)
        if self.validate:
            self.validate(values, world_size)
        return values

    @property
    def folders(self) -> tuple[str, ...]:
        """The parameters that name a folder the ranks read and write (:class:`~labs.params.Folder`)."""
        return tuple(name for name, spec in self.params.items() if isinstance(spec, Folder))

    @property
    def input_files(self) -> tuple[str, ...]:
        """The parameters that name a file the ranks only read (:class:`~labs.params.InputFile`)."""
        return tuple(name for name, spec in self.params.items() if isinstance(spec, InputFile))

    def parse_params(self, pairs: list[str]) -> dict[str, Any]:
        """Command-line ``KEY=VALUE`` strings as typed values (not yet merged with the defaults)."""
        return parse_pairs(self.name, self.params, pairs)

    def run_rank(self, ctx: RankContext, params: dict[str, Any]) -> Mapping[str, Any]:
        record = self.rank_fn(ctx, **params)
        _check_keys(self.name, "랭크 기록", record, self.record_keys)
        return record

    def finish(self, records: list[dict], backend: str, params: dict[str, Any]) -> LabResult:
        """The engine's end of a run: the lesson's summary wrapped with name, N, backend and ranks."""
        summary = self.summarize(records, backend, params)
        if not isinstance(summary, Summary):
            raise TypeError(f"lab {self.name!r}: summarize must return a Summary, got {type(summary).__name__}")
        _check_keys(self.name, "요약 데이터", summary.data, self.data_keys)
        names = [c.name for c in summary.checks]
        if len(set(names)) != len(names):
            raise TypeError(f"lab {self.name!r}: duplicate check names {sorted(n for n in names if names.count(n) > 1)}")
        return LabResult(self.name, len(records), backend, records, dict(summary.data),
                         {c.name: c for c in summary.checks}, dict(params))


def typed_keys(typed: type | None) -> frozenset[str] | None:
    """The field names of a ``TypedDict`` (its own and those it inherits); ``None`` for ``None``."""
    if typed is None:
        return None
    keys: frozenset[str] = getattr(typed, "__required_keys__") | getattr(typed, "__optional_keys__")
    return frozenset(keys)


def _check_keys(lab: str, what: str, record: Mapping[str, Any], declared: frozenset[str] | None) -> None:
    if declared is None:
        return
    if not isinstance(record, dict):
        raise TypeError(f"lab {lab!r}: {what} must be a dict, got {type(record).__name__}")
    missing, extra = declared - record.keys(), record.keys() - declared
    if missing or extra:
        raise TypeError(f"lab {lab!r}: {what} keys differ from the declared ones: "
                        f"missing {sorted(missing)}, undeclared {sorted(extra)}")


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
