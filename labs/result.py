"""Lab results: measured data plus named checks, shared by chapters, the CLI and the tests.

A check says what it compares (its ``kind``): ``close`` (|value − expected| ≤ tolerance), ``equal``,
``at_most`` / ``at_least`` (a bound), ``true`` (a condition whose evidence is ``value``) or ``n/a``
(the premise does not hold for the chosen inputs: reported, never a failure). A check whose measured
value is missing (``None``, NaN) fails: a claim is never passed vacuously.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import LabCheckFailed

KINDS = ("close", "equal", "at_most", "at_least", "true", "n/a")


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def largest(values: Iterable[Any]) -> Any:
    """``max`` over the ranks' values that a NaN cannot hide from: NaN if any value is NaN (Python's ``max``
    keeps whichever value it met first, so ``max([0.0, nan])`` is 0.0 and a diverged rank 1 would pass)."""
    items = list(values)
    if any(isinstance(v, float) and math.isnan(v) for v in items):
        return math.nan
    return max(items)


@dataclass(frozen=True)
class Check:
    """One claim of a lesson, measured on real ranks. Build it with the ``check_*`` functions."""

    name: str
    kind: str
    ok: bool
    value: Any
    description: str
    expected: Any = None  # equal: the expected value; close: the centre; at_most/at_least: the bound
    tolerance: float | None = None  # close only

    @property
    def applicable(self) -> bool:
        return self.kind != "n/a"

    def criterion(self) -> str:
        """The rule the value was held to, in the report's words."""
        if self.kind == "close":
            if self.tolerance == 0:
                return f"= {format_value(self.expected)} (정확히)"
            return f"|값 − {format_value(self.expected)}| ≤ {format_value(self.tolerance)}"
        if self.kind == "equal":
            return f"= {format_value(self.expected)}"
        if self.kind == "at_most":
            return f"≤ {format_value(self.expected)}"
        if self.kind == "at_least":
            return f"≥ {format_value(self.expected)}"
        if self.kind == "true":
            return "참이어야 함"
        return "해당 없음"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "ok": bool(self.ok),
            "applicable": self.applicable,
            "value": _jsonable(self.value),
            "expected": _jsonable(self.expected),
            "tolerance": _jsonable(self.tolerance),
            "criterion": self.criterion(),
            "description": self.description,
        }


def check_close(name: str, value: float | None, expected: float, tolerance: float, description: str) -> Check:
    """A numeric claim: ``|value - expected| <= tolerance``."""
    ok = value is not None and not _missing(value) and abs(value - expected) <= tolerance
    return Check(name, "close", ok, value, description, expected, tolerance)


def check_equal(name: str, value: Any, expected: Any, description: str) -> Check:
    """An exact claim: ``value == expected``."""
    ok = not _missing(value) and not _missing(expected) and value == expected
    return Check(name, "equal", ok, value, description, expected)


def check_at_most(name: str, value: float | None, bound: float, description: str) -> Check:
    """An upper bound: ``value <= bound``."""
    ok = value is not None and not _missing(value) and value <= bound
    return Check(name, "at_most", ok, value, description, bound)


def check_at_least(name: str, value: float | None, bound: float, description: str) -> Check:
    """A lower bound: ``value >= bound``."""
    ok = value is not None and not _missing(value) and value >= bound
    return Check(name, "at_least", ok, value, description, bound)


def check_true(name: str, condition: bool | None, value: Any, description: str) -> Check:
    """A condition that is not one comparison; ``value`` is the evidence shown in the report."""
    ok = condition is True and not _missing(value)
    return Check(name, "true", ok, value, description)


def not_applicable(name: str, reason: str) -> Check:
    """A claim whose premise does not hold for the chosen inputs: reported, never a failure."""
    return Check(name, "n/a", True, None, reason)


# Rank records read by a key chosen at run time (``r[run]``): helpers of a ``summarize`` take these; the
# ``summarize`` itself takes ``list[XRecord]``, so literal keys are checked against the lab's TypedDicts.
RankRecords = Sequence[Mapping[str, Any]]

D = TypeVar("D")  # a lab's summary data: its ``XData`` TypedDict


@dataclass(frozen=True)
class Summary(Generic[D]):
    """What a lesson's ``summarize`` returns: its data (typed by the lab's ``XData``) and its checks (the engine adds
    the rest). ``summarize(...) -> Summary[XData]`` lets the type checker hold the data's keys to ``XData``."""

    data: D
    checks: list[Check]


@dataclass
class LabResult:
    """Everything a lab run produced: per-rank records, a summary and its checks."""

    lab: str
    world_size: int
    backend: str
    ranks: list[dict]
    data: dict = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    wall_seconds: float | None = None  # launch to last record, set by the launcher
    replayed: bool = False  # records recorded earlier by the same code (labs.replay), summarized anew

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks.values())

    def failed(self) -> list[Check]:
        if not self.checks:
            return [check_true("has_checks", False, None, "실습이 확인 항목을 하나도 만들지 않았다")]
        return [c for c in self.checks.values() if not c.ok]

    def assert_ok(self) -> "LabResult":
        """Raise :class:`LabCheckFailed` (in Korean) if any claim stopped holding."""
        bad = self.failed()
        if bad:
            lines = [f"- {c.name}: 측정값 {format_value(c.value)}, 기준 {c.criterion()} — {c.description}" for c in bad]
            raise LabCheckFailed(
                f"실습 '{self.lab}'(N={self.world_size}, {self.backend})에서 확인이 실패했습니다. "
                "본문의 주장이 더 이상 성립하지 않습니다:\n" + "\n".join(lines)
            )
        return self

    def to_dict(self) -> dict:
        return {
            "lab": self.lab,
            "world_size": self.world_size,
            "backend": self.backend,
            "ok": self.ok,
            "params": _jsonable(self.params),
            "checks": {name: c.to_dict() for name, c in self.checks.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    def report(self) -> str:
        """A Korean plain-text report, the one the CLI prints."""
        head = f"실습 {self.lab} · 월드 크기 N={self.world_size} · 백엔드 {self.backend}"
        lines = [head, "-" * len(head)]
        for c in self.checks.values():
            mark = "해당 없음" if not c.applicable else ("통과" if c.ok else "실패")
            value = "" if not c.applicable else f"{format_value(c.value)} (기준 {c.criterion()})"
            lines.append(f"[{mark}] {c.name}: {value}".rstrip(": "))
            lines.append(f"       {c.description}")
        applicable = [c for c in self.checks.values() if c.applicable]
        passed = sum(c.ok for c in applicable)
        skipped = len(self.checks) - len(applicable)
        tail = f", 해당 없음 {skipped}개" if skipped else ""
        lines.append(f"결과: 확인 {len(applicable)}개 중 {passed}개 통과{tail}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for c in self.checks.values():
            if not c.applicable:
                mark = '<span class="check-na">– 해당 없음</span>'
            else:
                mark = '<span class="check-ok">○ 통과</span>' if c.ok else '<span class="check-fail">× 실패</span>'
            value = "—" if not c.applicable else _cell(format_value(c.value))
            rows.append(
                f"<tr><td>{mark}</td><td><code>{html.escape(c.name)}</code></td>"
                f"<td>{value}</td><td>{_cell(c.criterion())}</td><td>{html.escape(c.description)}</td></tr>"
            )
        caption = f"실습 <code>{html.escape(self.lab)}</code>의 확인 결과 (N={self.world_size}, {html.escape(self.backend)})"
        table = ('<table class="lab-checks"><caption>' + caption + "</caption>"
                 "<thead><tr><th>결과</th><th>확인</th><th>측정값</th><th>기준</th><th>주장</th></tr></thead>"
                 "<tbody>" + "".join(rows) + "</tbody></table>")
        # 표는 언제나 한 줄로 접어 둔다(책에서 일부러 망가뜨린 실행도 마찬가지). 실패가 있으면 그 한 줄이
        # "× … 실패"로 시작하고 빨갛게 보인다. 확인할 항목이 없을 때만 열어서 빈 표임을 보여 준다.
        opened = " open" if not self.checks else ""
        failed = ' class="has-failures"' if not self.ok else ""
        return (f'<details class="lab-checks-box"{opened}>'
                f'<summary{failed}>{html.escape(self.summary_line())}</summary>{table}</details>')

    def summary_line(self) -> str:
        """One Korean line: ``✓ 확인 9개 모두 통과 — 자세히 보기`` (or how many failed)."""
        applicable = [c for c in self.checks.values() if c.applicable]
        passed = sum(c.ok for c in applicable)
        skipped = len(self.checks) - len(applicable)
        tail = f" (해당 없음 {skipped}개)" if skipped else ""
        if not applicable:
            return f"– 확인할 항목이 없습니다{tail} — 자세히 보기"
        if passed == len(applicable):
            return f"✓ {self.lab} 실습의 확인 {len(applicable)}개 모두 통과{tail} — 자세히 보기"
        return f"× {self.lab} 실습의 확인 {len(applicable)}개 중 {len(applicable) - passed}개 실패{tail} — 자세히 보기"


def format_value(value: Any) -> str:
    """A measured value or a bound as every report shows it (floats to six significant digits)."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


CELL_CHARS = 90  # 확인 표의 측정값·기준 칸에 보이는 글자 수: 더 길면 잘라 보이고 전체는 title(마우스를 올리면)에


def _cell(text: str, limit: int = CELL_CHARS) -> str:
    """``text`` escaped for a table cell; past ``limit`` characters it is cut with … and kept whole in ``title``."""
    if len(text) <= limit:
        return html.escape(text)
    return f'<span title="{html.escape(text)}">{html.escape(text[:limit].rstrip())}…</span>'


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
