"""The flight recorder's per-rank dump files, read by torch's own analyzer (``torchfrtrace``).

A dump is the pickle ``torch._C._distributed_c10d._dump_fr_trace`` returns: the bytes NCCL's watchdog
writes to ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` on a timeout. The analyzer
(``python -m torch.distributed.flight_recorder.fr_trace <folder>``) reads one such file per rank and
names the ranks missing from a collective, but it finds each group's ranks in the dump's
``pg_config``. torch 2.13's gloo process group records its ranks there when it is constructed,
before it has a name or a rank list (one entry named ``""`` with no ranks is all a dump holds), so
:func:`add_membership` writes them in from what the ranks know.
"""

from __future__ import annotations

import io
import logging
import pickle
from pathlib import Path

import torch

PREFIX = "fr_rank_"
_LOGGER = "Flight Recorder"  # torch.distributed.flight_recorder's logger: the analyzer's report goes there


def dump() -> bytes:
    """This rank's flight-recorder dump (collectives, no stack traces, finished ones too)."""
    return torch._C._distributed_c10d._dump_fr_trace(True, False, False)  # type: ignore[attr-defined]  # not in the stubs


def write(folder: Path, dumps: list[bytes]) -> list[str]:
    """One file per rank, named as the analyzer expects; the file names."""
    for rank, data in enumerate(dumps):
        (folder / f"{PREFIX}{rank}").write_bytes(data)
    return sorted(p.name for p in folder.iterdir())


def pg_config(data: bytes) -> dict:
    """A dump's ``pg_config``: what it knows of each group (name, description, ranks)."""
    return pickle.loads(data)["pg_config"]


def add_membership(folder: Path, ranks_of: dict[str, list[int]]) -> None:
    """Write each group's ranks into every file's ``pg_config`` (the description is the entries' own)."""
    for path in folder.glob(f"{PREFIX}*"):
        record = pickle.loads(path.read_bytes())
        desc = {e["process_group"][0]: e["process_group"][1] for e in record["entries"]}
        record["pg_config"] = {name: {"name": name, "desc": desc.get(name, "undefined"), "ranks": str(ranks)}
                               for name, ranks in ranks_of.items()}
        path.write_bytes(pickle.dumps(record))


def analyze(folder: Path) -> str:
    """What ``fr_trace <folder> --prefix fr_rank_`` reports (its log lines), or the exception it raised."""
    from torch.distributed.flight_recorder.fr_trace import main

    logger = logging.getLogger(_LOGGER)
    saved = logger.handlers[:]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers = [handler]  # 분석기의 보고를 표준 오류 대신 여기로 받는다
    try:
        main([str(folder), "--prefix", PREFIX])
    except Exception as exc:  # noqa: BLE001 - 분석기가 이 덤프에서 무엇을 했는지 그대로 기록한다
        out.write(f"{type(exc).__name__}: {exc}")
    finally:
        logger.handlers = saved
    return out.getvalue().strip()
