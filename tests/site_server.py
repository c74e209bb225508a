"""Helpers shared by the built-site tests (``test_site_offline.py``, ``test_site_pages.py``, ``test_site_browser.py``, …).

Not a test module and not a conftest: the test files put ``tests/`` on ``sys.path`` and import
it. Everything reads the built site from ``DDP_SITE_DIR`` (default ``<repo>/_build/html``) and
the browser from ``DDP_CHROMIUM`` (default ``/usr/bin/chromium``).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent

# Pages that must exist in every build (paths relative to the site root).
REQUIRED_PAGES = ("book/intro.html", "book/01_structure.html", "book/glossary.html")
# The only page that is allowed to be a bare redirect (jupyter-book writes it for the root).
REDIRECT_PAGE = "index.html"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


def site_dir() -> Path:
    return Path(os.environ.get("DDP_SITE_DIR") or REPO / "_build" / "html").resolve()


def require_site() -> Path:
    """The built site folder; the test fails (never skips) when it has not been built."""
    site = site_dir()
    if not (site / "index.html").is_file() and not any(site.glob("**/*.html")):
        pytest.fail(
            f"빌드된 사이트가 없습니다: {site}\n"
            "먼저 저장소 루트에서 `make book`을 실행해 사이트를 빌드하세요. "
            "다른 곳에 빌드한 사이트는 환경 변수 DDP_SITE_DIR로 지정할 수 있습니다.",
            pytrace=False,
        )
    return site


def content_pages(site: Path) -> list[str]:
    """Every HTML page of the site (relative posix paths), without ``_static`` template
    fragments and without the root redirect page."""
    pages = []
    for path in sorted(site.rglob("*.html")):
        rel = path.relative_to(site).as_posix()
        if rel.startswith("_static/") or rel == REDIRECT_PAGE:
            continue
        pages.append(rel)
    return pages


def pages_to_check() -> list[str]:
    """Pages to parametrize tests with, computed at collection time. The required pages are
    always in the list, so a page missing from the build fails instead of silently vanishing;
    with no build at all the fixtures fail with the `make book` message."""
    site = site_dir()
    found = content_pages(site) if site.is_dir() else []
    return sorted(set(found) | set(REQUIRED_PAGES))


def screenshot_dir() -> Path:
    path = Path(os.environ.get("DDP_SCREENSHOT_DIR") or REPO / "_build" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot_name(page: str, suffix: str = "desktop", ext: str = "png") -> str:
    """``book/01_structure.html`` -> ``01_structure-desktop.png`` (``ext``); other folders keep their path."""
    stem = page[: -len(".html")] if page.endswith(".html") else page
    if stem.startswith("book/"):
        stem = stem[len("book/"):]
    return f"{stem.replace('/', '_')}-{suffix}.{ext}"


# A whole page as JPEG where it fits: a long chapter is some 26,000 px tall at desktop width, and
# Chromium encodes that as PNG in ~3.3 s, as JPEG in ~2.1 s (book/07_internals.html, 1280 px wide).
# JPEG cannot be taller than 65,535 px (Chromium then writes an empty file), so taller pages, e.g.
# chapters at phone width, stay PNG.
JPEG_MAX_PX = 65_535


def full_page_screenshot(page, folder: Path, rel: str, suffix: str) -> Path:
    """The whole of ``page`` (the site's ``rel``) to ``folder/<name>-<suffix>.jpg`` (``.png`` if too tall)."""
    height = page.evaluate("document.documentElement.scrollHeight * window.devicePixelRatio")
    jpeg = height <= JPEG_MAX_PX
    path = folder / screenshot_name(rel, suffix, "jpg" if jpeg else "png")
    page.screenshot(path=str(path), full_page=True, **({"type": "jpeg", "quality": 80} if jpeg else {}))
    assert path.stat().st_size > 0, f"{path}: 빈 스크린샷 (높이 {height}px)"
    return path


def chromium_path() -> str:
    """Path of the Chromium/Chrome binary; skips (fails under CI) when it is missing."""
    path = os.environ.get("DDP_CHROMIUM") or "/usr/bin/chromium"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        reason = (
            f"크로미움 실행 파일이 없습니다: {path}. "
            "`sudo apt-get install chromium fonts-noto-cjk`(또는 `make browser`)로 설치하거나, "
            "다른 위치의 Chrome/Chromium을 환경 변수 DDP_CHROMIUM으로 지정하세요."
        )
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI에서는 브라우저 테스트를 건너뛸 수 없습니다)", pytrace=False)
        pytest.skip(reason)
    return path


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".css": "text/css",
        ".svg": "image/svg+xml",
        ".json": "application/json",
        ".woff": "font/woff",
        ".woff2": "font/woff2",
        ".wasm": "application/wasm",
    }

    def log_message(self, format, *args):  # noqa: A002 - signature from the stdlib
        pass


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` over HTTP on 127.0.0.1 (port chosen by the OS) in a background thread;
    yields the base URL ending in ``/``."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="ddp-site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def poll(get, ok=bool, timeout_s: float = 10.0):
    """``get()`` until ``ok(value)`` or ``timeout_s``; returns the last value (short messages,
    unlike Playwright's ``expect``, which dumps the whole page on failure)."""
    deadline = time.monotonic() + timeout_s
    value = get()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = get()
    return value
