"""Sphinx extension: re-execute the chapters when the lab code they call changes.

Jupyter Book's execution cache keys on the notebook's own cells. The chapters' results come
from ``labs/`` (and the quizzes from ``book/quizzes/``), so a change there must invalidate the
cache, or the site would show measurements made by code that no longer exists.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
WATCHED = ("labs/**/*.py", "labs/**/*.js", "labs/**/*.css", "book/quizzes/*.yml", "requirements.txt")


def source_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for pattern in WATCHED:
        for path in sorted(root.glob(pattern)):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _invalidate_if_changed(app: Sphinx, config) -> None:
    app.labs_changed = False  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
    cache = config.nb_execution_cache_path
    if not cache:
        return
    # A relative cache path is taken relative to the book, not to wherever the build was started
    # (myst-nb would use the current directory, so two books could share one cache).
    cache = Path(app.srcdir, cache) if not Path(cache).is_absolute() else Path(cache)
    config.nb_execution_cache_path = str(cache)
    stamp = cache.with_name(cache.name + ".labs_digest")  # beside the cache, one per cache
    digest = source_digest(Path(app.srcdir))
    if stamp.exists() and stamp.read_text() == digest:
        return
    if cache.exists():
        logger.info("labs/ 또는 퀴즈가 바뀌어 실행 캐시를 비웁니다: 모든 장을 다시 실행합니다.")
        shutil.rmtree(cache)
    app.labs_changed = True  # type: ignore[attr-defined]  # extension state kept on Sphinx's object
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)


def _notebooks_outdated(app: Sphinx, env, added, changed, removed) -> list[str]:
    """Emptying the cache is not enough: Sphinx would keep the old outputs of unchanged chapters.
    When the lab code changed, every notebook is read (and so executed) again."""
    if not getattr(app, "labs_changed", False):
        return []
    return sorted(doc for doc in env.found_docs if str(env.doc2path(doc)).endswith(".ipynb"))


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _invalidate_if_changed, priority=100)  # before myst-nb reads the path
    app.connect("env-get-outdated", _notebooks_outdated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
