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
from .params import Choice, Folder, InputFile, Spec, parse_pairs, resolve
from .result import LabResult, Summary

RankFn = Callable[..., Mapping[str, Any]]  # rank_fn(ctx, **params) -> XRecord (a TypedDict)
Summarize = Callable[[list[Any], str, dict[str, Any]], Summary[Any]]  # summarize(list[XRecord], ...) -> Summary[XData]
Validate = Callable[[dict, int], None]  # validate(params, world_size): raises LabConfigError (Korean)
# summarize_outcome(outcome, backend, params) -> Summary[XData]: a run that must hang, raise or crash (labs/outcome.py)
SummarizeOutcome = Callable[[dict[str, Any], str, dict[str, Any]], Summary[Any]]


@dataclass(frozen=True)
class Case:
    """One case of a lab made of cases (chapter 10's ``traps``: ``trap=shape``): the parameters only that case
    reads, and its rules between them and with the world size (``validate``)."""

    params: dict[str, Spec]
    validate: Validate | None = None


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
    validate: Validate | None = None
    # A lab made of cases: ``params[case_key]`` is a Choice of the names of ``cases``, and a run takes the shared
    # ``params`` and its own case's only (another case's parameter is refused like an unknown one).
    case_key: str = ""
    cases: Mapping[str, Case] = field(default_factory=dict)
    # A lab some of whose runs must hang, raise or crash: their checks, from how the run ended (labs/outcome.py).
    summarize_outcome: SummarizeOutcome | None = None
    chapter: int = 99  # the book chapter that teaches it (orders `python -m labs list`)
    # A lab with a command of its own (`python -m labs bench`): the module with its FULL parameters,
    # default_world_sizes(), report(result) and to_json(results). The CLI reaches it here, importing no lesson.
    report: ModuleType | None = None

    def __post_init__(self) -> None:
        for what, typed in (("record", self.record), ("data", self.data)):
            if typed is not None and not is_typeddict(typed):
                raise TypeError(f"lab {self.name!r}: {what} must be a TypedDict, got {typed!r}")
        if self.cases:
            chooser = self.params.get(self.case_key)
            if not (isinstance(chooser, Choice) and tuple(chooser.options) == tuple(self.cases)):
                raise TypeError(f"lab {self.name!r}: params[{self.case_key!r}] must be a Choice of its cases")
            shared = {name for case in self.cases.values() for name in case.params} & set(self.params)
            if shared:
                raise TypeError(f"lab {self.name!r}: case parameters also declared for every case: {sorted(shared)}")

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

    def case_of(self, chosen: dict[str, Any]) -> tuple[Case | None, str]:
        """The case ``chosen[case_key]`` picks (its default when absent) and ``"case_key=name"``; ``(None, "")``
        for a lab without cases."""
        if not self.cases:
            return None, ""
        spec = self.params[self.case_key]
        assert isinstance(spec, Choice)  # __post_init__ made sure
        name = spec.check(self.case_key, chosen.get(self.case_key, spec.default))
        return self.cases[name], f"{self.case_key}={name}"

    def specs(self, case: Case | None) -> dict[str, Spec]:
        """The parameters a run of ``case`` takes: the shared ones and the case's own."""
        return {**self.params, **case.params} if case else self.params

    def resolve_params(self, overrides: dict[str, Any], world_size: int) -> dict[str, Any]:
        """Defaults merged with ``overrides``, each checked by its spec, then ``validate``d (the case's rules first)."""
        case, where = self.case_of(overrides)
        values = resolve(self.name, self.specs(case), overrides, where)
        for validate in (case.validate if case else None, self.validate):
            if validate:
                validate(values, world_size)
        return values

    def _all_specs(self) -> dict[str, Spec]:
        return {name: spec for specs in (self.params, *(c.params for c in self.cases.values()))
                for name, spec in specs.items()}

    @property
    def folders(self) -> tuple[str, ...]:
        """The parameters that name a folder the ranks read and write (:class:`~labs.params.Folder`)."""
        return tuple(name for name, spec in self._all_specs().items() if isinstance(spec, Folder))

    @property
    def input_files(self) -> tuple[str, ...]:
        """The parameters that name a file the ranks only read (:class:`~labs.params.InputFile`)."""
        return tuple(name for name, spec in self._all_specs().items() if isinstance(spec, InputFile))

    def parse_params(self, pairs: list[str]) -> dict[str, Any]:
        """Command-line ``KEY=VALUE`` strings as typed values (not yet merged with the defaults); a lab made of
        cases reads its case's pair first, then the rest by that case's parameters."""
        chooser = [pair for pair in pairs if self.cases and pair.partition("=")[0].strip() == self.case_key]
        case, where = self.case_of(parse_pairs(self.name, self.params, chooser))
        return parse_pairs(self.name, self.specs(case), pairs, where)

    def run_rank(self, ctx: RankContext, params: dict[str, Any]) -> Mapping[str, Any]:
        record = self.rank_fn(ctx, **params)
        check_keys(self.name, "랭크 기록", record, self.record_keys)
        return record

    def finish(self, records: list[dict], backend: str, params: dict[str, Any]) -> LabResult:
        """The engine's end of a run: the lesson's summary wrapped with name, N, backend and ranks."""
        return self._result(self.summarize(records, backend, params), records, len(records), backend, params)

    def finish_outcome(self, outcome: dict[str, Any], world_size: int, backend: str,
                       params: dict[str, Any]) -> LabResult:
        """The end of a run that must hang, raise or crash (:func:`labs.outcome.outcome_results`): no rank
        records, and the lesson's ``summarize_outcome`` of how the run ended, wrapped like :meth:`finish`."""
        if self.summarize_outcome is None:
            raise TypeError(f"lab {self.name!r} declares no summarize_outcome")
        return self._result(self.summarize_outcome(outcome, backend, params), [], world_size, backend, params)

    def _result(self, summary: Summary, records: list[dict], world_size: int, backend: str,
                params: dict[str, Any]) -> LabResult:
        if not isinstance(summary, Summary):
            raise TypeError(f"lab {self.name!r}: summarize must return a Summary, got {type(summary).__name__}")
        check_keys(self.name, "요약 데이터", summary.data, self.data_keys)
        names = [c.name for c in summary.checks]
        if len(set(names)) != len(names):
            raise TypeError(f"lab {self.name!r}: duplicate check names {sorted(n for n in names if names.count(n) > 1)}")
        return LabResult(self.name, world_size, backend, records, dict(summary.data),
                         {c.name: c for c in summary.checks}, dict(params))


def typed_keys(typed: type | None) -> frozenset[str] | None:
    """The field names of a ``TypedDict`` (its own and those it inherits); ``None`` for ``None``."""
    if typed is None:
        return None
    keys: frozenset[str] = getattr(typed, "__required_keys__") | getattr(typed, "__optional_keys__")
    return frozenset(keys)


def check_keys(lab: str, what: str, record: Mapping[str, Any], declared: frozenset[str] | None) -> None:
    """``record``'s keys are exactly ``declared`` (a TypedDict's :func:`typed_keys`; ``None``: not declared)."""
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
