"""Rewrite every written HTML page of a build with a text transform (shared by the extensions that
fix what the theme's templates hard-code)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def rewrite_pages(outdir: Path, transform: Callable[[Path, str], str]) -> None:
    """Apply ``transform(page, text)`` to every ``*.html`` under ``outdir``; write only what changed."""
    for page in Path(outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = transform(page, text)
        if new != text:
            page.write_text(new, encoding="utf-8")
