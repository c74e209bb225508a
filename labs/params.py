"""Typed lab parameters: each lab declares its parameters once, the engine validates them once.

A lab declares ``params={"per_rank_batch": Int(4, min=1, max=4096, help="랭크당 배치 B/N"), ...}``.
The same spec converts a command-line string (``--param per_rank_batch=8``), checks a Python value
(``labs.run("replicas", per_rank_batch=8)``) and describes the allowed range in every Korean error,
before any process is spawned. Rank functions receive plain, already valid values.
"""

from __future__ import annotations

import ast
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from .errors import LabConfigError


def _bad(name: str, rule: str, value: Any) -> LabConfigError:
    return LabConfigError(f"인자 {name}의 값이 맞지 않습니다. 허용: {rule}. 받은 값: {value!r}")


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def _range_text(low: float | None, high: float | None, *, low_open: bool = False) -> str:
    parts = []
    if low is not None:
        parts.append(f"{_num(low)} {'초과' if low_open else '이상'}")
    if high is not None:
        parts.append(f"{_num(high)} 이하")
    return " ".join(parts)


@dataclass(frozen=True)
class Int:
    """A whole number in ``[min, max]``."""

    default: int
    min: int | None = None
    max: int | None = None
    help: str = ""

    def rule(self) -> str:
        return f"{_range_text(self.min, self.max)}의 정수".lstrip("의 ")

    def parse(self, name: str, text: str) -> int:
        value = _literal(text.strip())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return self.check(name, value)

    def check(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(name, self.rule(), value)
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise _bad(name, self.rule(), value)
        return value


@dataclass(frozen=True)
class Float:
    """A finite real number in ``[min, max]`` (``(min, max]`` when ``min_open``)."""

    default: float
    min: float | None = None
    max: float | None = None
    min_open: bool = False
    help: str = ""

    def rule(self) -> str:
        return f"{_range_text(self.min, self.max, low_open=self.min_open)}의 유한한 실수".lstrip("의 ")

    def parse(self, name: str, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise _bad(name, self.rule(), text) from None
        return self.check(name, value)

    def check(self, name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(name, self.rule(), value)
        value = float(value)
        too_low = self.min is not None and (value <= self.min if self.min_open else value < self.min)
        too_high = self.max is not None and value > self.max
        if not math.isfinite(value) or too_low or too_high:
            raise _bad(name, self.rule(), value)
        return value


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of words."""

    default: str
    options: tuple[str, ...]
    help: str = ""

    def rule(self) -> str:
        return f"{', '.join(self.options)} 중 하나"

    def parse(self, name: str, text: str) -> str:
        value = _literal(text.strip())
        return self.check(name, value if isinstance(value, str) else text.strip())

    def check(self, name: str, value: Any) -> str:
        if value not in self.options:
            raise _bad(name, self.rule(), value)
        return value


@dataclass(frozen=True)
class Bool:
    """True or false (``true/false``, ``on/off``, ``1/0`` on the command line)."""

    default: bool
    help: str = ""
    _WORDS = {"true": True, "false": False, "on": True, "off": False, "1": True, "0": False,
              "yes": True, "no": False}

    def rule(self) -> str:
        return "참/거짓(true/false)"

    def parse(self, name: str, text: str) -> bool:
        word = text.strip().lower()
        if word not in self._WORDS:
            raise _bad(name, self.rule(), text)
        return self._WORDS[word]

    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _bad(name, self.rule(), value)
        return value


@dataclass(frozen=True)
class Text:
    """Free text (a path, a label); ``allow_empty`` says whether ``""`` is allowed."""

    default: str
    allow_empty: bool = True
    help: str = ""

    def rule(self) -> str:
        return "문자열" + ("" if self.allow_empty else "(비어 있으면 안 됨)")

    def parse(self, name: str, text: str) -> str:
        value = _literal(text)
        return self.check(name, value if isinstance(value, str) else text)

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or (not value and not self.allow_empty):
            raise _bad(name, self.rule(), value)
        return value


# What the file systems the course runs on allow when the path's file system does not say (Linux and macOS:
# NAME_MAX and PATH_MAX, in bytes); os.pathconf of the path's nearest existing folder says otherwise.
NAME_MAX, PATH_MAX = 255, 4096


def _nearest_existing(value: str) -> str:
    """The deepest folder (or file) of ``value`` that exists now (``value`` itself if it does)."""
    here = os.path.abspath(value)
    while not os.path.lexists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    return here


def _limits(value: str) -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) in bytes of the file system that would hold ``value``."""
    try:
        base = _nearest_existing(value)
        return os.pathconf(base, "PC_NAME_MAX"), os.pathconf(base, "PC_PATH_MAX")
    except (OSError, ValueError):
        return NAME_MAX, PATH_MAX


def _path_problem(value: str) -> str | None:
    """Why the operating system could not open ``value`` (Korean), or ``None``."""
    if "\0" in value:
        return "NUL 문자가 들어 있습니다"
    encoded = os.fsencode(value)
    name_max, path_max = _limits(value)
    long = [part for part in encoded.split(b"/") if len(part) > name_max]
    if long:
        return f"이름 하나가 {name_max}바이트를 넘습니다({len(long[0])}바이트: {os.fsdecode(long[0][:24])}…)"
    if len(encoded) > path_max:
        return f"경로 전체가 {path_max}바이트를 넘습니다({len(encoded)}바이트)"
    return None


def _folder_problem(value: str) -> str | None:
    """Why the ranks could not create ``value`` as a folder or write in it (Korean), or ``None``."""
    if os.path.lexists(value) and not os.path.isdir(value):
        return "폴더가 아니라 이미 있는 파일입니다"
    base = _nearest_existing(value)
    if not os.path.isdir(base):
        return f"경로 중간의 {base}이(가) 폴더가 아니라 파일이라 그 아래에 폴더를 만들 수 없습니다"
    try:
        with tempfile.TemporaryFile(dir=base):  # 권한·읽기 전용 파일 시스템·꽉 찬 디스크: 직접 써 본다
            pass
    except OSError as err:
        what = "폴더에" if base == os.path.abspath(value) else f"폴더를 만들 {base}에"
        return f"{what} 쓸 수 없습니다({err.strerror or err})"
    return None


@dataclass(frozen=True)
class FilePath(Text):
    """A path the operating system must be able to open: no NUL character, no name over
    :data:`NAME_MAX` bytes, not over :data:`PATH_MAX` bytes in all (or what ``os.pathconf`` says of the file
    system that would hold it; otherwise a rank fails with OSError)."""

    def check(self, name: str, value: Any) -> str:
        value = super().check(name, value)
        problem = _path_problem(value)
        if problem:
            raise LabConfigError(f"인자 {name}의 경로를 운영 체제가 열 수 없습니다: {problem}. 더 짧은 경로나 다른 경로를 주세요.")
        return value


@dataclass(frozen=True)
class Folder(FilePath):
    """A folder the ranks create if need be, read and write (a checkpoint folder, say); ``""`` means none.
    ``writes``: the names the ranks put inside it (a folder too long to hold them is refused too). Refused
    before any rank starts: a path that names a file, lies under a file, or cannot be written. A recorded
    run (labs/replay.py) is keyed by what the folder holds, not by its name, and a replay leaves in it
    what the run left."""

    writes: tuple[str, ...] = ()

    def rule(self) -> str:
        return "폴더 경로 문자열" + ("(비우면 폴더를 쓰지 않음)" if self.allow_empty else "(비어 있으면 안 됨)")

    def check(self, name: str, value: Any) -> str:
        value = super().check(name, value)
        if not value:
            return value
        inside = next(filter(None, (_path_problem(os.path.join(value, file)) for file in self.writes)), None)
        if inside:
            raise LabConfigError(f"인자 {name}의 폴더는 그 안에 랭크가 쓸 파일({', '.join(self.writes)})의 경로를 "
                                 f"운영 체제가 열 수 없습니다: {inside}. 더 짧은 경로를 주세요.")
        problem = _folder_problem(value)
        if problem:
            raise LabConfigError(f"인자 {name}의 폴더 {value}를 쓸 수 없습니다: {problem}. 쓸 수 있는 다른 폴더를 주세요.")
        return value


@dataclass(frozen=True)
class InputFile(FilePath):
    """A file the ranks only read (a reader's Python file to grade, say). A recorded run
    (labs/replay.py) is keyed by the file's contents, not by its name; a module that file imports
    is not part of the key."""

    def rule(self) -> str:
        return "파일 경로 문자열" + ("(비우면 기본 파일)" if self.allow_empty else "(비어 있으면 안 됨)")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


@dataclass(frozen=True)
class ListOf:
    """A list of items of one spec, written ``"4K 1M"`` or ``"0.1,1,default"`` on the command line.

    ``words`` are extra literal items allowed besides numbers (e.g. ``"default"``); ``sizes`` lets
    integer items carry a binary unit suffix (``4K`` = 4096). Values are tuples.
    """

    item: Int | Float | Choice
    default: tuple
    min_len: int = 1
    max_len: int = 64
    words: tuple[str, ...] = ()
    sizes: bool = False
    help: str = ""

    def rule(self) -> str:
        extra = f" 또는 {', '.join(self.words)}" if self.words else ""
        unit = " (K·M·G 단위 가능)" if self.sizes else ""
        return f"값 {self.min_len}~{self.max_len}개의 목록(공백이나 쉼표로 구분), 각 값은 {self.item.rule()}{extra}{unit}"

    def parse(self, name: str, text: str) -> tuple:
        value = _literal(text.strip())
        if isinstance(value, (list, tuple)):
            return self.check(name, value)
        tokens = str(text).replace(",", " ").split()
        return self.check(name, tuple(self._token(name, t) for t in tokens))

    def _token(self, name: str, token: str) -> Any:
        if token in self.words:
            return token
        if self.sizes:
            number, unit = token[:-1], token[-1].upper()
            if unit in _UNITS and unit and number.isdigit():
                return int(number) * _UNITS[unit]
        try:
            return self.item.parse(name, token)
        except LabConfigError:
            raise _bad(name, self.rule(), token) from None

    def check(self, name: str, value: Any) -> tuple:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise _bad(name, self.rule(), value)
        if not self.min_len <= len(value) <= self.max_len:
            raise _bad(name, self.rule(), value)
        items: list[Any] = []
        for v in value:
            if isinstance(v, str) and v in self.words:
                items.append(v)
            else:
                try:
                    items.append(self.item.check(name, v))
                except LabConfigError:
                    raise _bad(name, self.rule(), value) from None
        return tuple(items)


Spec = Int | Float | Choice | Bool | Text | ListOf


def seed(default: int = 0) -> Int:
    """A random seed: any non-negative 32-bit integer."""
    return Int(default, min=0, max=2**31 - 1, help="난수 시드")


def resolve(lab: str, specs: dict[str, Spec], overrides: dict[str, Any], where: str = "") -> dict[str, Any]:
    """Defaults merged with ``overrides`` (Python values), each checked against its spec. ``where`` names the
    case of a lab made of cases (``trap=shape``) whose parameters ``specs`` are."""
    unknown = set(overrides) - set(specs)
    if unknown:
        raise LabConfigError(
            f"실습 '{lab}'{f'의 {where}' if where else ''}에 없는 인자입니다: {', '.join(sorted(unknown))}. "
            f"쓸 수 있는 인자: {', '.join(sorted(specs)) or '(없음)'} (`python -m labs list --params`)"
        )
    values = {name: spec.default for name, spec in specs.items()}
    for name, value in overrides.items():
        values[name] = specs[name].check(name, value)
    return values


def parse_pairs(lab: str, specs: dict[str, Spec], pairs: list[str], where: str = "") -> dict[str, Any]:
    """Command-line ``KEY=VALUE`` strings converted by each key's spec (``where``: as in :func:`resolve`)."""
    parsed = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise LabConfigError(f"--param은 KEY=VALUE 형식이어야 합니다. 받은 값: {pair!r}")
        if key not in specs:
            resolve(lab, specs, {key: raw}, where)  # raises the unknown-parameter error
        parsed[key] = specs[key].parse(key, raw)
    return parsed


def describe(specs: dict[str, Spec]) -> list[str]:
    """One Korean line per parameter: name, default, allowed values, help."""
    lines = []
    for name, spec in specs.items():
        default = " ".join(str(v) for v in spec.default) if isinstance(spec, ListOf) else spec.default
        lines.append(f"{name}={default!s}  ({spec.rule()}){' — ' + spec.help if spec.help else ''}")
    return lines
