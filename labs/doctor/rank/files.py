"""Files the script writes: ``torch.save`` to a path (torch writes it from C++, not through ``open``) and
every ``open`` for writing (``w``, ``a``, ``x``, ``+``; ``pathlib`` and ``numpy.save`` go through it), each
with its real path and the reader's line. Writes from library code alone (no reader frame) are left out."""

from __future__ import annotations

import builtins
import functools
import io
import os
from collections.abc import Callable
from typing import Any

import torch

from .record import Recorder

_SPECIAL = ("/dev/", "/proc/", "/sys/")


class Files:
    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    def wrote(self, target: object, how: str) -> None:
        if self.rec.busy or not isinstance(target, (str, bytes, os.PathLike)):
            return
        site = self.rec.reader.site()
        if site is None:
            return
        path = os.path.realpath(os.fsdecode(target))
        if path.startswith(_SPECIAL):
            return
        if self.rec.once("write", path, site["file"], site["line"]):
            self.rec.emit("write", path=path, how=how, site=site, step=self.rec.steps)

    def install(self) -> None:
        save = torch.save
        files = self

        @functools.wraps(save)
        def torch_save(obj: object, f: Any, *args: Any, **kwargs: Any) -> Any:
            files.wrote(f if isinstance(f, (str, bytes, os.PathLike)) else getattr(f, "name", None), "torch.save")
            return save(obj, f, *args, **kwargs)

        torch.save = torch_save
        opener = self._open(builtins.open)
        builtins.open = opener
        io.open = opener

    def _open(self, original: Callable[..., Any]) -> Callable[..., Any]:
        files = self

        @functools.wraps(original)
        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            if isinstance(mode, str) and any(c in mode for c in "wax+"):
                files.wrote(file, f'open(mode="{mode}")')
            return original(file, mode, *args, **kwargs)

        return open_
