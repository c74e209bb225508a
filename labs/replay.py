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
failed run that wrote a checkpoint and the run that resumes from it replay as a pair.
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


def _path(env: str, lab: str, key: str) -> Path | None:
    """``<dir>/<code digest>/<lab>-<key>.pkl``: one folder per version of the labs' code."""
    folder = os.environ.get(env)
    return Path(folder) / code_digest()[:16] / f"{lab}-{key}.pkl" if folder else None


def load(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float) -> dict | None:
    """The recorded outcome ``{"records": [...], "wall_seconds": s}`` or ``{"error": exc}``, if any."""
    path = _path(REPLAY_ENV, lab, run_key(lab, nproc, backend, params, timeout))
    if path is None or not path.exists():
        return None
    with path.open("rb") as f:
        return pickle.load(f)


def save(lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float, outcome: dict) -> None:
    """Record an outcome when ``LABS_RECORD_DIR`` is set (written atomically: builds may overlap)."""
    path = _path(RECORD_ENV, lab, run_key(lab, nproc, backend, params, timeout))
    if path is None:
        return
    # One folder per code version, never removed here: a run from another copy of the code (a test's
    # broken variant, say) must not wipe the book's records. `make clean` empties _build/.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        pickle.dump(outcome, f)
    tmp.replace(path)


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


class Recording:
    """One :func:`labs.run` call's place in the records, keyed when the call starts.

    ``folders`` are the parameters that name folders (:class:`labs.params.Folder`): in the key, each
    non-empty one stands for what its folder holds now; :meth:`save` adds what the run left in it,
    and a replay by :meth:`load` leaves the folder holding exactly that.
    """

    def __init__(self, lab: str, nproc: int, backend: str, params: dict[str, Any], timeout: float,
                 folders: tuple[str, ...] = ()):
        self.lab = lab
        self.active = bool(os.environ.get(RECORD_ENV) or os.environ.get(REPLAY_ENV))
        self.folders = {name: params[name] for name in folders if params.get(name)}
        keyed = dict(params)
        if self.active:
            keyed.update({name: _contents_digest(folder_files(path)) for name, path in self.folders.items()})
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

