"""Build a tiny book with the project's real configuration and extensions (for build and search tests).

Not a test module: test files put ``tests/`` on ``sys.path`` and import it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"


def notebook(*sources: str) -> str:
    cells: list[dict[str, object]] = [{"cell_type": "markdown", "metadata": {}, "source": ["# 시험 장"]}]
    cells += [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": [s]}
              for s in sources]
    return json.dumps({"cells": cells, "nbformat": 4, "nbformat_minor": 5,
                       "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                   "language": "python"}}})


def make_book(root: Path, pages: dict[str, str]) -> Path:
    """A book under ``root`` with the real ``_config.yml`` and ``book/_ext``; ``pages`` maps
    ``book/<name>.md|.ipynb`` to its content (the first one is the root page)."""
    book = root / "mini"
    (book / "book").mkdir(parents=True)
    shutil.copy(REPO / "_config.yml", book / "_config.yml")
    shutil.copytree(REPO / "book" / "_ext", book / "book" / "_ext")
    shutil.copy(REPO / "book" / "favicon.svg", book / "book" / "favicon.svg")
    names = list(pages)
    for name, content in pages.items():
        (book / name).write_text(content, encoding="utf-8")
    entries = "".join(f"  - file: {Path(n).with_suffix('').as_posix()}\n" for n in names[1:])
    root_page = Path(names[0]).with_suffix("").as_posix()
    (book / "_toc.yml").write_text(f"format: jb-book\nroot: {root_page}\nchapters:\n{entries}")
    return book


def build(book: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(JUPYTER_BOOK), "build", str(book), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True, timeout=300)
