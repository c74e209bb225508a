"""Run each lab once per `make test`: the book build records every run, the tests replay them.

`make book` executes every chapter, and so every lab, on real ranks. With ``LABS_RECORD_DIR`` set,
:func:`labs.run` also saves what the ranks returned (or the error the launcher raised). With
``LABS_REPLAY_DIR`` set, a later call with the *same* lab, N, backend, parameters and lab source
code gets those rank records back instead of spawning again; the lesson's ``summarize`` still runs on
them, so every check is evaluated by the current code. `make test` sets both for the notebook
execution (`pytest --nbval`) and the lesson tests, which then cost what their Python costs, not what
the labs cost. The launcher's own tests and every call with other inputs run for real. Nothing is
recorded or replayed unless these variables are set: a reader's `labs.run` always runs.

A parameter that names a folder the ranks read and write (:class:`labs.params.Folder`: chapter 6's
checkpoint folder) keys the run by what the folder holds before it, not by its (temporary) name, and
the record keeps what the run left there; a replay puts exactly that back (:class:`Recording`). So a
failed run that wrote a checkpoint and the run that resumes from it replay as a pair. A parameter
that names a file the ranks only read (:class:`labs.params.InputFile`: the file chapter 9 grades)
keys the run by the file's contents. Chapter 6 also starts ``torchrun`` itself; that command is
recorded and replayed the same way (:class:`CommandRecording`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import torch

RECORD_ENV = "LABS_RECORD_DIR"
REPLAY_ENV = "LABS_REPLAY_DIR"


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


def _path(env: str, name: str) -> Path | None:
    """``<dir>/<code digest>/<name>.pkl``: one folder per version of the labs' code."""
    folder = os.environ.get(env)
    return Path(folder) / code_digest()[:16] / f"{name}.pkl" if folder else None


def _read(path: Path | None) -> dict | None:
    if path is None or not path.exists():
        return None
    with path.open("rb") as f:
        return pickle.load(f)


def _write(path: Path | None, outcome: dict) -> None:
    """Written atomically (builds may overlap)."""
    if path is None:
        return
    # One folder per code version, never removed here: a run from another copy of the code (a test's
    # broken variant, say) must not wipe the book's records. `make clean` empties _build/.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        pickle.dump(outcome, f)
    tmp.replace(path)


def load(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float) -> dict | None:
    """The recorded outcome ``{"records": [...], "wall_seconds": s}`` or ``{"error": exc}``, if any."""
    return _read(_path(REPLAY_ENV, f"{lab}-{run_key(lab, nproc, backend, params, timeout)}"))


def save(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float, outcome: dict) -> None:
    """Record an outcome when ``LABS_RECORD_DIR`` is set."""
    _write(_path(RECORD_ENV, f"{lab}-{run_key(lab, nproc, backend, params, timeout)}"), outcome)


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
        self.active = bool(os.environ.get(RECORD_ENV) or os.environ.get(REPLAY_ENV))
        self.folders = {name: params[name] for name in folders if params.get(name)}
        keyed = dict(params)
        if self.active:
            keyed.update({name: _contents_digest(folder_files(path)) for name, path in self.folders.items()})
            keyed.update({name: _file_digest(params[name]) for name in files if params.get(name)})
        self.key = (nproc, backend, keyed, timeout)

    def load(self) -> dict | None:
        recorded = load(self.lab, *self.key) if self.active else None
        if recorded is not None:
            for name, path in self.folders.items():
                _restore(path, recorded["folders"][name])
        return recorded

    def save(self, outcome: dict) -> None:
        if os.environ.get(RECORD_ENV):
            left = {name: folder_files(path) for name, path in self.folders.items()}
            save(self.lab, *self.key, {**outcome, "folders": left})


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
        return _read(_path(REPLAY_ENV, f"command-{self.key}"))

    def save(self, outcome: dict) -> None:
        _write(_path(RECORD_ENV, f"command-{self.key}"), outcome)
