"""What the checks read: every rank's events, the reader's files, and small accessors over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..rank.record import ReaderFiles, Site
from ..spawn import Rehearsal

Event = dict[str, Any]


@dataclass
class View:
    rehearsal: Rehearsal
    reader: ReaderFiles

    @property
    def nproc(self) -> int:
        return len(self.rehearsal.ranks)

    def events(self, rank: int, *kinds: str) -> list[Event]:
        return [e for e in self.rehearsal.ranks[rank].events if e["ev"] in kinds]

    def first(self, rank: int, kind: str) -> Event | None:
        found = self.events(rank, kind)
        return found[0] if found else None

    def every(self, kind: str) -> list[list[Event]]:
        """Per rank, that rank's events of ``kind``."""
        return [self.events(r, kind) for r in range(self.nproc)]

    def steps(self, rank: int) -> int:
        """Optimizer steps the rank finished (its first optimizer)."""
        posts = self.events(rank, "post")
        primary = posts[0]["opt"] if posts else None
        return sum(1 for e in posts if e["opt"] == primary)

    def ended(self, rank: int) -> Event | None:
        """The rank's ``end`` event (finished, stopped after --steps, sys.exit), None if it never got there."""
        return self.first(rank, "end")

    def exception(self, rank: int) -> Event | None:
        return self.first(rank, "exception")

    def ddp_site(self, rank: int = 0) -> Site | None:
        for e in self.events(rank, "sync"):
            if e["op"] == "DDP":
                site: Site | None = e["site"]
                return site
        return None
