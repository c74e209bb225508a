"""Lab results: measured data plus named checks, shared by chapters, the CLI and the tests."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .errors import LabCheckFailed


@dataclass(frozen=True)
class Check:
    """One claim of a lesson, measured on real ranks.

    ``value`` is what was measured, ``tolerance`` the largest deviation that still
    counts as the claim holding (``None`` for an exact, non-numeric condition).
    """

    name: str
    ok: bool
    value: Any
    tolerance: Any
    description: str

    def to_dict(self) -> dict:
        return {
            "ok": bool(self.ok),
            "value": _jsonable(self.value),
            "tolerance": _jsonable(self.tolerance),
            "description": self.description,
        }


def check_close(name: str, value: float, expected: float, tolerance: float, description: str) -> Check:
    """A numeric claim: ``|value - expected| <= tolerance``."""
    ok = math.isfinite(value) and abs(value - expected) <= tolerance
    return Check(name, ok, value, tolerance, description)


def check_equal(name: str, value: Any, expected: Any, description: str) -> Check:
    """An exact claim: ``value == expected``."""
    return Check(name, value == expected, value, None, description)


@dataclass
class LabResult:
    """Everything a lab run produced: per-rank records, a summary and its checks."""

    lab: str
    world_size: int
    backend: str
    ranks: list[dict]
    data: dict = field(default_factory=dict)
    checks: dict[str, Check] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks.values())

    def failed(self) -> list[Check]:
        return [c for c in self.checks.values() if not c.ok]

    def assert_ok(self) -> "LabResult":
        """Raise :class:`LabCheckFailed` (in Korean) if any claim stopped holding."""
        bad = self.failed()
        if bad:
            lines = [f"- {c.name}: 측정값 {c.value!r}, 허용 오차 {c.tolerance!r} — {c.description}" for c in bad]
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
            "checks": {name: c.to_dict() for name, c in self.checks.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    def report(self) -> str:
        """A Korean plain-text report, the one the CLI prints."""
        head = f"실습 {self.lab} · 월드 크기 N={self.world_size} · 백엔드 {self.backend}"
        lines = [head, "-" * len(head)]
        for c in self.checks.values():
            mark = "통과" if c.ok else "실패"
            tol = "" if c.tolerance is None else f" (허용 오차 {_fmt(c.tolerance)})"
            lines.append(f"[{mark}] {c.name}: {_fmt(c.value)}{tol}")
            lines.append(f"       {c.description}")
        lines.append(f"결과: 확인 {len(self.checks)}개 중 {len(self.checks) - len(self.failed())}개 통과")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = []
        for c in self.checks.values():
            mark = '<span class="check-ok">○ 통과</span>' if c.ok else '<span class="check-fail">× 실패</span>'
            tol = "—" if c.tolerance is None else html.escape(_fmt(c.tolerance))
            rows.append(
                f"<tr><td>{mark}</td><td><code>{html.escape(c.name)}</code></td>"
                f"<td>{html.escape(_fmt(c.value))}</td><td>{tol}</td><td>{html.escape(c.description)}</td></tr>"
            )
        caption = f"실습 <code>{html.escape(self.lab)}</code>의 확인 결과 (N={self.world_size}, {html.escape(self.backend)})"
        return (
            '<table class="lab-checks"><caption>' + caption + "</caption>"
            "<thead><tr><th>결과</th><th>확인</th><th>측정값</th><th>허용 오차</th><th>주장</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>"
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return value
