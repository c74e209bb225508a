"""Sphinx extension: the course itself, downloadable from every page of the site.

At the end of every HTML build the book's source folder is packed into :data:`ARCHIVE` at the site's root (one
folder, :data:`TOP`, inside): the files git tracks there plus the new ones it does not ignore
(``git ls-files --cached --others --exclude-standard``), or, when the book is built outside a git checkout (from
this very archive, say), every file under the folder except what ``.gitignore`` names (the virtual environment,
the build, caches). What ``make book`` and the notebooks need is there: the Makefile, the pins, the configuration,
``book/``, ``labs/``, ``recipe/``, the tests.

Every page's download menu (the theme's ↓ button) gets a first entry, "코스 전체 (.zip)", pointing at the archive;
pages without that menu (the index, the search page) get the menu with that one entry. When
``html_theme_options.repository_url`` is set in ``_config.yml``, an entry "저장소" pointing at it follows. The
archive is a file of the site, so the link works offline.
"""

from __future__ import annotations

import fnmatch
import os
import subprocess
import zipfile
from pathlib import Path, PurePosixPath

from sphinx.application import Sphinx
from sphinx.util import logging

ARCHIVE = "ddp-course.zip"
TOP = "ddp-course"  # the folder the archive unpacks to
ALWAYS_SKIPPED = (".git", ".venv", "_build", "__pycache__")  # even without a .gitignore
BUTTON_LABEL = "download-course-button"

logger = logging.getLogger(__name__)


def _ignore_patterns(root: Path) -> list[str]:
    path = root / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return [*ALWAYS_SKIPPED, *(line.strip() for line in lines if line.strip() and not line.startswith(("#", "!")))]


def _ignored(rel: PurePosixPath, patterns: list[str]) -> bool:
    """``rel`` matches a .gitignore-style pattern: ``name``/``*.ext`` anywhere, ``/name`` at the top only."""
    for pattern in patterns:
        anchored, pattern = pattern.startswith("/"), pattern.strip("/")
        parts = rel.parts[:1] if anchored else rel.parts
        if any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def course_files(root: Path) -> list[str]:
    """The files of the course under ``root`` (POSIX paths relative to it, sorted)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
        names = {name for name in listed if name}
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout: walk the folder
        names = None
    patterns = _ignore_patterns(root)
    if names is None:
        names = set()
        for folder, dirs, files in os.walk(root):
            here = PurePosixPath(Path(folder).relative_to(root).as_posix())
            dirs[:] = [d for d in dirs if not _ignored(here / d, patterns)]
            names.update(str(here / f) for f in files if not _ignored(here / f, patterns))
    names = {str(PurePosixPath(n)) for n in names}
    # git이 아는 파일이라도 지금 없는 것(지운 파일)과 빌드·가상환경 안의 것은 넣지 않는다
    return sorted(n for n in names if (root / n).is_file() and not _ignored(PurePosixPath(n), list(ALWAYS_SKIPPED)))


def write_archive(root: Path, target: Path) -> int:
    """Pack the course under ``root`` into the zip ``target`` (file modes kept); returns the number of files."""
    names = course_files(root)
    tmp = target.with_name(target.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name in names:
            path = root / name
            info = zipfile.ZipInfo.from_file(path, f"{TOP}/{name}", strict_timestamps=False)
            info.compress_type = zipfile.ZIP_DEFLATED
            with path.open("rb") as source, archive.open(info, "w") as sink:
                while chunk := source.read(1 << 20):
                    sink.write(chunk)
    os.replace(tmp, target)
    return len(names)


def _add_button(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    buttons = context.get("header_buttons")
    if buttons is None:
        return
    entries = [{"type": "link", "url": context["pathto"](ARCHIVE, 1), "text": "코스 전체 (.zip)",
                "tooltip": "이 코스의 저장소 전체를 내려받기 (노트북, 실습, 테스트)", "icon": "fas fa-download",
                "label": BUTTON_LABEL}]
    repository = (app.config.html_theme_options or {}).get("repository_url", "")
    if repository:
        entries.append({"type": "link", "url": repository, "text": "저장소", "tooltip": "이 코스의 저장소",
                        "icon": "fas fa-file", "label": "course-repository-button"})
    group = next((b for b in buttons if b.get("label") == "download-buttons"), None)
    if group is None:
        buttons.insert(0, {"type": "group", "tooltip": "내려받기", "icon": "fas fa-download", "buttons": entries,
                           "label": "download-buttons"})
    else:
        group["buttons"][:0] = entries


def _pack(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    count = write_archive(Path(app.srcdir), Path(app.outdir) / ARCHIVE)
    logger.info(f"코스 전체: {ARCHIVE} (파일 {count}개)")


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", _add_button, priority=600)  # after the theme fills its download menu (501)
    app.connect("build-finished", _pack)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
