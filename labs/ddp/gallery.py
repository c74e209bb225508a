"""One entry of a bug gallery (chapter 13's ``zero_bugs`` and ``fsdp_bugs``): what one named mistake breaks,
read by the chapter's lab (its ``mistake=`` values), the grader's tests and the chapter's tables."""

from __future__ import annotations

from typing import NamedTuple


class Bug(NamedTuple):
    """A mistake: the lab's ``mistake=`` value that runs it (None if no lab does), the grader's checks it fails
    at N=2 (the first is its diagnosis; the tests hold it to exactly these) and what it does wrong, in Korean."""

    mistake: str | None
    fails: tuple[str, ...]
    claim: str
