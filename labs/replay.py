"""Run each lab once per `make test`: the book build records every run, the tests replay them.

`make book` executes every chapter, and so every lab, on real ranks. With ``LABS_RECORD_DIR`` set,
:func:`labs.run` also saves what the ranks returned (or the error the launcher raised). With
``LABS_REPLAY_DIR`` set, a later call with the *same* lab, N, backend, parameters and lab source
code gets those rank records back instead of spawning again; the lesson's ``summarize`` still runs on
them, so every check is evaluated by the current code. `make test` sets both for the notebook
execution (`pytest --nbval`) and the lesson tests, which then cost what their Python costs, not what
the labs cost. The launcher's own tests and every call with other inputs run for real. Nothing is
recorded or replayed unless these variables are set: a reader's `labs.run` always runs.

A record is data, not code: one JSON file (:data:`FORMAT`, :data:`VERSION`) holding only numbers,
strings, lists, dicts, tuples, bytes and the launcher's errors by their constructor arguments; reading
one never runs anything. Every record is checked when read (its format and version, the lab and N it
was made for; a lab run's N rank records in rank order with the lab's declared keys; a command's exit
status and output). A record that is not valid (cut short, garbage, an old pickle record, one rank's
record missing) is skipped with a one-line note on standard error, and the run happens for real.

A parameter that names a folder the ranks read and write (:class:`labs.params.Folder`: chapter 6's
checkpoint folder) keys the run by what the folder holds before it, not by its (temporary) name, and
the record keeps what the run left there; a replay puts exactly that back (:class:`Recording`). So a
failed run that wrote a checkpoint and the run that resumes from it replay as a pair. A parameter
that names a file the ranks only read (:class:`labs.params.InputFile`: the file chapter 9 grades)
keys the run by the file's contents. Chapter 6 also starts ``torchrun`` itself; that command is
recorded and replayed the same way (:class:`CommandRecording`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from .errors import LabTimeoutError, RankCrashedError, RankFailedError

RECORD_ENV = "LABS_RECORD_DIR"
REPLAY_ENV = "LABS_REPLAY_DIR"
FORMAT = "ddp-course-lab-record"
VERSION = 2  # 1 was pickle
SUFFIX = ".json"
OLD_SUFFIX = ".pkl"
# The only objects a record names by type: the launcher's errors, rebuilt from their constructor arguments.
ERRORS = {cls.__name__: cls for cls in (RankFailedError, RankCrashedError, LabTimeoutError)}


# Modules only the caller runs to present a result (figures, widgets, quizzes, command lines, the CLI):
# changing them cannot change what the ranks record, so they do not invalidate the recordings.
PRESENTATION = ("viz/", "widgets/", "quiz.py", "checklist.py", "commands.py", "cli.py", "__main__.py")


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A hash of every source file of the ``labs`` package that ranks may run, and the torch version."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix().startswith(PRESENTATION):
            continue
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def run_key(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float) -> str:
    text = json.dumps([lab, nproc, backend, sorted(params.items()), timeout, code_digest()], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class InvalidRecord(ValueError):
    """A record file that is not a valid record of this run (the Korean reason is the message)."""


_TAGS = ("$tuple", "$bytes", "$dict", "$error")


def encode(value: Any) -> Any:
    """``value`` as JSON data; tuples, bytes, dicts with other than text keys and the launcher's errors tagged."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not any(k.startswith("$") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"$dict": [[encode(k), encode(v)] for k, v in value.items()]}
    if type(value) in ERRORS.values():
        return {"$error": [type(value).__name__, encode(list(value._init_args))]}
    raise TypeError(f"a record holds plain data only, not {type(value).__name__}")


def decode(data: Any) -> Any:
    """The value :func:`encode` wrote; :class:`InvalidRecord` for anything else."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        raise InvalidRecord(f"알 수 없는 값 {type(data).__name__}")
    tags = [k for k in data if k.startswith("$")]
    if not tags:
        return {k: decode(v) for k, v in data.items()}
    if len(data) != 1 or tags[0] not in _TAGS:
        raise InvalidRecord(f"알 수 없는 표시 {tags}")
    tag, body = tags[0], data[tags[0]]
    try:
        if tag == "$tuple":
            return tuple(decode(v) for v in body)
        if tag == "$bytes":
            return base64.b64decode(body.encode("ascii"), validate=True)
        if tag == "$dict":
            return {decode(k): decode(v) for k, v in body}
        name, args = body
        return ERRORS[name](*decode(args))
    except InvalidRecord:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise InvalidRecord(f"{tag} 값이 맞지 않음({type(err).__name__})") from None


def _path(env: str, name: str) -> Path | None:
    """``<dir>/<code digest>/<name>.json``: one folder per version of the labs' code."""
    folder = os.environ.get(env)
    return Path(folder) / code_digest()[:16] / f"{name}{SUFFIX}" if folder else None


def _note(path: Path, reason: str) -> None:
    print(f"실습 기록 {path}을(를) 건너뜁니다({reason}). 기록을 쓰지 않고 실제로 실행합니다.", file=sys.stderr)


def _read(path: Path | None, name: str, nproc: int | None, check: Callable[[Any], None]) -> Any:
    """The recorded outcome at ``path``, checked by ``check``; ``None`` (after a note) when it is not valid."""
    if path is None:
        return None
    if not path.exists():
        if path.with_suffix(OLD_SUFFIX).exists():
            _note(path.with_suffix(OLD_SUFFIX), "옛 pickle 형식의 기록은 읽지 않습니다")
        return None
    try:
        envelope = json.loads(path.read_bytes().decode("utf-8"))
        if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
            raise InvalidRecord("실습 기록 형식이 아님")
        if envelope.get("version") != VERSION:
            raise InvalidRecord(f"형식 버전 {envelope.get('version')!r}, 이 코드는 {VERSION}")
        if envelope.get("name") != name or envelope.get("nproc") != nproc:
            raise InvalidRecord("다른 실행의 기록")
        outcome = decode(envelope.get("outcome"))
        check(outcome)
    except UnicodeDecodeError:
        _note(path, "UTF-8 텍스트가 아님")
        return None
    except json.JSONDecodeError as err:
        _note(path, f"JSON이 아님: {err.msg}, {err.pos}번째 바이트")
        return None
    except InvalidRecord as err:
        _note(path, str(err))
        return None
    except RecursionError:
        _note(path, "너무 깊이 중첩된 값")
        return None
    except OSError as err:
        _note(path, f"읽을 수 없음: {err.strerror}")
        return None
    return outcome


def _write(path: Path | None, name: str, nproc: int | None, outcome: Any) -> None:
    """Written atomically (builds may overlap); an outcome that is not plain data is not recorded (a note says so)."""
    if path is None:
        return
    try:
        text = json.dumps({"format": FORMAT, "version": VERSION, "name": name, "nproc": nproc,
                           "outcome": encode(outcome)}, ensure_ascii=False)
    except TypeError as err:
        print(f"실습 기록 {path}을(를) 쓰지 않습니다({err}). 다음 실행도 실제로 실행합니다.", file=sys.stderr)
        return
    # One folder per code version, never removed here: a run from another copy of the code (a test's
    # broken variant, say) must not wipe the book's records. `make clean` empties _build/.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _require(condition: bool, reason: str) -> None:
    if not condition:
        raise InvalidRecord(reason)


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


def load(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float,
         check: Callable[[Any], None] = lambda outcome: _require(_is_dict(outcome), "사전이 아님")) -> Any:
    """The recorded outcome of this run, if there is a valid one (``check`` raises :class:`InvalidRecord`)."""
    return _read(_path(REPLAY_ENV, f"{lab}-{run_key(lab, nproc, backend, params, timeout)}"), lab, nproc, check)


def save(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float, outcome: Any) -> None:
    """Record an outcome when ``LABS_RECORD_DIR`` is set."""
    _write(_path(RECORD_ENV, f"{lab}-{run_key(lab, nproc, backend, params, timeout)}"), lab, nproc, outcome)


def folder_files(path: str) -> dict[str, bytes]:
    """Every file under ``path`` (relative POSIX path -> bytes); ``{}`` for a missing folder."""
    root = Path(path)
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _contents_digest(files: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for rel, data in sorted(files.items()):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    return "contents:" + digest.hexdigest()


def _restore(path: str, files: dict[str, bytes]) -> None:
    """Make the folder hold exactly ``files``."""
    root = Path(path)
    for rel in set(folder_files(path)) - set(files):
        (root / rel).unlink()
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def _file_digest(path: str) -> str:
    file = Path(path)
    return "contents:" + (hashlib.sha256(file.read_bytes()).hexdigest() if file.is_file() else "missing")


def _safe_relative(rel: Any) -> bool:
    """A path inside the folder: relative, no ``..``, not empty."""
    parts = rel.split("/") if isinstance(rel, str) else []
    return bool(parts) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts)


class Recording:
    """One :func:`labs.run` call's place in the records, keyed when the call starts.

    ``folders`` are the parameters that name folders (:class:`labs.params.Folder`): in the key, each
    non-empty one stands for what its folder holds now; :meth:`save` adds what the run left in it,
    and a replay by :meth:`load` leaves the folder holding exactly that. ``files`` name files the
    ranks only read (:class:`labs.params.InputFile`): each non-empty one stands for its contents.
    """

    def __init__(self, lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float,
                 folders: tuple[str, ...] = (), files: tuple[str, ...] = ()):
        self.lab = lab
        self.nproc = nproc
        self.active = bool(os.environ.get(RECORD_ENV) or os.environ.get(REPLAY_ENV))
        self.folders = {name: params[name] for name in folders if params.get(name)}
        keyed = dict(params)
        if self.active:
            keyed.update({name: _contents_digest(folder_files(path)) for name, path in self.folders.items()})
            keyed.update({name: _file_digest(params[name]) for name in files if params.get(name)})
        self.key = (nproc, backend, keyed, timeout)

    def check(self, outcome: Any) -> None:
        """A lab run's outcome: N rank records in rank order with the lab's keys, or a launcher error;
        and what the run left in each folder."""
        from .registry import get_lab

        _require(_is_dict(outcome), "사전이 아님")
        folders = outcome.get("folders")
        _require(_is_dict(folders) and set(folders) == set(self.folders), "폴더 내용이 없거나 다른 폴더의 것")
        for files in folders.values():
            _require(_is_dict(files) and all(_safe_relative(rel) and isinstance(data, bytes)
                                             for rel, data in files.items()), "폴더 내용이 파일 이름과 바이트가 아님")
        if "error" in outcome:
            _require(set(outcome) == {"error", "folders"} and type(outcome["error"]) in ERRORS.values(),
                     "런처 오류가 아닌 오류")
            return
        _require(set(outcome) == {"records", "wall_seconds", "folders"}, "records·wall_seconds가 없음")
        wall, records = outcome["wall_seconds"], outcome["records"]
        _require(isinstance(wall, float) and math.isfinite(wall) and wall >= 0, "실행 시간이 0 이상의 초가 아님")
        _require(isinstance(records, list) and len(records) == self.nproc,
                 f"랭크 기록이 월드 크기 {self.nproc}개가 아니라 "
                 f"{len(records) if isinstance(records, list) else '목록이 아닌 값'}개")
        declared = get_lab(self.lab).record_keys
        for rank, record in enumerate(records):
            _require(_is_dict(record), f"랭크 {rank}의 기록이 사전이 아님")
            if declared is not None:
                missing = sorted(declared - record.keys())
                _require(not missing and record.keys() == declared,
                         f"랭크 {rank}의 기록에 {'빠진 키 ' + ', '.join(missing) if missing else '선언하지 않은 키'}")
            wrong = get_lab(self.lab).mistyped(record)
            _require(not wrong, f"랭크 {rank}의 기록에서 선언과 타입이 다른 값: {', '.join(wrong[:3])}")
            if "rank" in record:
                _require(record["rank"] == rank and record.get("world_size") == self.nproc,
                         f"{rank}번째 기록이 랭크 {record['rank']!r}(월드 크기 {record.get('world_size')!r})의 것: "
                         f"랭크 0..{self.nproc - 1}이 한 번씩 있어야 함")

    def load(self) -> dict | None:
        recorded = load(self.lab, *self.key, check=self.check) if self.active else None
        if recorded is not None:
            for name, path in self.folders.items():
                _restore(path, recorded["folders"][name])
        return recorded

    def save(self, outcome: dict) -> None:
        if os.environ.get(RECORD_ENV):
            left = {name: folder_files(path) for name, path in self.folders.items()}
            save(self.lab, *self.key, {**outcome, "folders": left})


def _check_command(outcome: Any) -> None:
    _require(_is_dict(outcome) and set(outcome) == {"returncode", "stdout", "stderr"}
             and isinstance(outcome["returncode"], int) and not isinstance(outcome["returncode"], bool)
             and isinstance(outcome["stdout"], str) and isinstance(outcome["stderr"], str),
             "명령의 종료 코드·표준 출력·표준 오류가 아님")


class CommandRecording:
    """One command's place in the records: chapter 6 starts ``torchrun`` itself, not through :func:`labs.run`.

    The key is the command line, the environment variables it gets beyond this process's own, its
    timeout and the labs' code digest. The run's temporary folder (the ``TMPDIR`` it is given) is
    written ``$TMPDIR`` wherever it occurs, and stands in the key for what it holds when the command
    starts. Recorded: the exit status, stdout and stderr, not what the command leaves in that folder
    (which the chapter removes).
    """

    def __init__(self, cmd: list[str], env: dict[str, str], timeout: float):
        active = bool(os.environ.get(RECORD_ENV) or os.environ.get(REPLAY_ENV))
        tmp = env.get("TMPDIR") if env.get("TMPDIR") != os.environ.get("TMPDIR") else None

        def general(text: str) -> str:
            return text.replace(tmp, "$TMPDIR") if tmp else text

        added = sorted((name, general(value)) for name, value in env.items() if os.environ.get(name) != value)
        removed = sorted(set(os.environ) - set(env))
        held = _contents_digest(folder_files(tmp)) if tmp and active else None
        text = json.dumps([[general(arg) for arg in cmd], added, removed, held, timeout, code_digest()])
        self.key = hashlib.sha256(text.encode()).hexdigest()[:32]

    def load(self) -> dict | None:
        """``{"returncode": int, "stdout": str, "stderr": str}`` of the recorded run, if any."""
        return _read(_path(REPLAY_ENV, f"command-{self.key}"), "command", None, _check_command)

    def save(self, outcome: dict) -> None:
        _write(_path(RECORD_ENV, f"command-{self.key}"), "command", None, outcome)
