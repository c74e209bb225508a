"""The built site works with the network off: static checks of every HTML file (no browser).

- no script, stylesheet, preload, icon, image or frame is fetched from another host;
- every local script and stylesheet a page references exists in the site;
- plotly.js is served once from ``_static/plotly.min.js`` (never inlined into a page) and is
  referenced by every page with a plotly figure;
- MathJax is served from ``_static/mathjax/startup.js`` (loading its TeX/CHTML components from there) on every page with math;
- every page is marked as Korean (``<html lang="ko">``).

The site is read from ``DDP_SITE_DIR`` (default ``<repo>/_build/html``); build it with ``make book``.
"""

from __future__ import annotations

import re
import sys
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_server  # noqa: E402  (tests/ has no __init__.py; see site_server's docstring)

pytestmark = pytest.mark.timeout(300)

# <link rel=...> values that make the browser fetch something (unlike next/prev/search/canonical).
FETCHING_RELS = {
    "stylesheet", "preload", "modulepreload", "prefetch", "preconnect", "dns-prefetch",
    "icon", "shortcut", "apple-touch-icon", "apple-touch-icon-precomposed", "mask-icon", "manifest",
}
# Elements and attributes whose URL is fetched while the page loads.
FETCHING_ATTRS = (
    ("script", "src"), ("img", "src"), ("iframe", "src"), ("source", "src"), ("video", "src"),
    ("video", "poster"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("track", "src"),
    ("input", "src"),
)
PLOTLY_STATIC = "_static/plotly.min.js"
MATHJAX_STATIC = "_static/mathjax/startup.js"
PLOTLY_BANNER_HTML = re.compile(r"plotly\.js v\d")
PLOTLY_BANNER_JS = re.compile(r"^\s*\*\s*plotly\.js v\d+\.\d+", re.MULTILINE)
MAX_PAGE_BYTES = 1_500_000
CSS_IMPORT_URL = re.compile(r"""@import\s+(?:url\()?\s*['"]?([^'")\s;]+)""", re.IGNORECASE)


@pytest.fixture(scope="module")
def site() -> Path:
    return site_server.require_site()


@lru_cache(maxsize=None)
def _soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8", errors="replace"), "html.parser")


def _all_html(site: Path) -> list[Path]:
    files = sorted(site.rglob("*.html"))
    assert files, f"{site}에 HTML 파일이 하나도 없습니다. `make book`으로 다시 빌드하세요."
    return files


def _pages(site: Path) -> list[Path]:
    pages = [site / rel for rel in site_server.content_pages(site)]
    assert pages, f"{site}에 페이지가 하나도 없습니다. `make book`으로 다시 빌드하세요."
    return pages


def _rel(site: Path, path: Path) -> str:
    return path.relative_to(site).as_posix()


def _is_external(url: str) -> bool:
    url = url.strip()
    return url.startswith("//") or urlsplit(url).scheme.lower() in ("http", "https", "ws", "wss", "ftp")


def _link_rels(tag) -> set[str]:
    rel = tag.get("rel") or []
    if isinstance(rel, str):
        rel = rel.split()
    return {r.lower() for r in rel}


def _fetched_urls(soup: BeautifulSoup) -> list[tuple[str, str]]:
    """(description, url) for everything the page fetches from markup."""
    found = []
    for tag in soup.find_all("link", href=True):
        rels = _link_rels(tag)
        if rels & FETCHING_RELS:
            found.append((f"<link rel=\"{' '.join(sorted(rels))}\" href>", tag["href"]))
    for name, attr in FETCHING_ATTRS:
        for tag in soup.find_all(name, attrs={attr: True}):
            found.append((f"<{name} {attr}>", tag[attr]))
    for tag in soup.find_all(["img", "source"], srcset=True):
        for candidate in tag["srcset"].split(","):
            if candidate.strip():
                found.append((f"<{tag.name} srcset>", candidate.split()[0]))
    for tag in soup.find_all("style"):
        for url in CSS_IMPORT_URL.findall(tag.get_text()):
            found.append(("<style> @import", url))
    return found


def _local_target(site: Path, page: Path, url: str) -> Path | None:
    """The file a local URL on ``page`` points to, or None for data:/blob:/javascript: URLs."""
    parts = urlsplit(url.strip())
    if parts.scheme:  # data:, blob:, javascript:, about:
        return None
    page_url = "/" + _rel(site, page)
    path = unquote(urlsplit(urljoin(page_url, parts.path)).path)
    return site / path.lstrip("/")


def _is_plotly_page(soup: BeautifulSoup) -> bool:
    return soup.find(class_="plotly-graph-div") is not None


def _has_math(soup: BeautifulSoup) -> bool:
    return soup.find(class_="math") is not None or soup.find("math") is not None


def _script_targets(site: Path, page: Path, soup: BeautifulSoup) -> set[str]:
    targets = set()
    for tag in soup.find_all("script", src=True):
        target = _local_target(site, page, tag["src"])
        if target is not None:
            targets.add(_rel(site, target) if target.is_relative_to(site) else str(target))
    return targets


def test_site_has_the_required_pages(site):
    pages = set(site_server.content_pages(site))
    missing = [p for p in site_server.REQUIRED_PAGES if p not in pages]
    assert not missing, f"빌드된 사이트({site})에 꼭 있어야 할 페이지가 없습니다: {missing}"


def test_no_external_resources(site):
    problems = []
    for path in _all_html(site):
        for what, url in _fetched_urls(_soup(path)):
            if _is_external(url):
                problems.append(f"{_rel(site, path)}: {what} = {url}")
    assert not problems, (
        "오프라인에서 열리지 않는 외부 리소스를 불러오는 페이지가 있습니다 "
        "(모든 스크립트·스타일·이미지는 _static/에서 제공해야 합니다):\n" + "\n".join(problems)
    )


def test_local_scripts_and_stylesheets_exist(site):
    problems = []
    checked = 0
    for page in _pages(site):
        soup = _soup(page)
        refs = [("<script src>", t["src"]) for t in soup.find_all("script", src=True)]
        refs += [
            (f"<link rel=\"{' '.join(sorted(_link_rels(t)))}\" href>", t["href"])
            for t in soup.find_all("link", href=True)
            if _link_rels(t) & FETCHING_RELS
        ]
        for what, url in refs:
            if _is_external(url):
                continue  # reported by test_no_external_resources
            target = _local_target(site, page, url)
            if target is None:
                continue
            checked += 1
            if not target.is_relative_to(site):
                problems.append(f"{_rel(site, page)}: {what} = {url} → 사이트 밖을 가리킵니다")
            elif not target.is_file():
                problems.append(f"{_rel(site, page)}: {what} = {url} → 파일 없음 ({_rel(site, target)})")
    assert checked, "스크립트/스타일시트 참조를 하나도 찾지 못했습니다: 빌드 결과가 이상합니다."
    assert not problems, "페이지가 참조하는 로컬 파일이 사이트에 없습니다:\n" + "\n".join(problems)


def test_plotly_js_is_served_once_from_static(site):
    assert (site / PLOTLY_STATIC).is_file(), f"{PLOTLY_STATIC}가 사이트에 없습니다."
    copies = []
    for path in sorted(site.rglob("*.js")):
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
        if path.name.lower() == "plotly.min.js" or PLOTLY_BANNER_JS.search(head):
            copies.append(_rel(site, path))
    assert copies == [PLOTLY_STATIC], (
        f"plotly.js는 {PLOTLY_STATIC} 한 곳에만 있어야 합니다. 찾은 사본: {copies}"
    )
    with (site / PLOTLY_STATIC).open(encoding="utf-8", errors="replace") as f:
        assert PLOTLY_BANNER_JS.search(f.read(4096)), f"{PLOTLY_STATIC}가 plotly.js 번들이 아닙니다."


def test_plotly_js_is_not_inlined(site):
    problems = []
    for path in _all_html(site):
        size = path.stat().st_size
        if size > MAX_PAGE_BYTES:
            problems.append(f"{_rel(site, path)}: {size / 1e6:.1f} MB (plotly.js가 인라인된 것으로 보입니다)")
        elif PLOTLY_BANNER_HTML.search(path.read_text(encoding="utf-8", errors="replace")):
            problems.append(f"{_rel(site, path)}: plotly.js 번들 텍스트('plotly.js v...')가 들어 있습니다")
    assert not problems, (
        "plotly.js를 페이지마다 인라인하지 말고 _static/plotly.min.js를 참조해야 합니다 "
        "(fig.to_html(include_plotlyjs=False)):\n" + "\n".join(problems)
    )


def test_plotly_pages_reference_static_plotly(site):
    plotly_pages = [p for p in _pages(site) if _is_plotly_page(_soup(p))]
    problems = [
        _rel(site, p) for p in plotly_pages
        if PLOTLY_STATIC not in _script_targets(site, p, _soup(p))
    ]
    assert not problems, (
        f"plotly 그림(.plotly-graph-div)이 있는데 {PLOTLY_STATIC}를 불러오지 않는 페이지: {problems}"
    )
    chapter = site / "book/01_structure.html"
    if chapter.is_file():
        assert chapter in plotly_pages, "book/01_structure.html에 plotly 그림(.plotly-graph-div)이 없습니다."


def test_math_pages_use_local_mathjax(site):
    assert (site / MATHJAX_STATIC).is_file(), f"{MATHJAX_STATIC}가 사이트에 없습니다."
    math_pages = [p for p in _pages(site) if _has_math(_soup(p))]
    assert math_pages, "수식이 있는 페이지를 하나도 찾지 못했습니다 (class=\"math\" 요소가 없음)."
    problems = [
        _rel(site, p) for p in math_pages
        if MATHJAX_STATIC not in _script_targets(site, p, _soup(p))
    ]
    assert not problems, f"수식이 있는데 {MATHJAX_STATIC}를 불러오지 않는 페이지: {problems}"


def test_pages_are_korean(site):
    problems = []
    for page in _pages(site):
        html = _soup(page).find("html")
        lang = html.get("lang") if html is not None else None
        if lang != "ko":
            problems.append(f"{_rel(site, page)}: <html lang={lang!r}>")
    assert not problems, (
        "모든 페이지는 <html lang=\"ko\">여야 합니다 (Sphinx 설정 language: ko):\n" + "\n".join(problems)
    )


def test_root_redirects_to_intro(site):
    index = site / site_server.REDIRECT_PAGE
    assert index.is_file(), f"{site_server.REDIRECT_PAGE}가 없습니다."
    meta = _soup(index).find("meta", attrs={"http-equiv": re.compile("refresh", re.I)})
    target = meta.get("content", "") if meta is not None else ""
    assert "book/intro.html" in target, (
        f"{site_server.REDIRECT_PAGE}는 book/intro.html로 이동해야 합니다 (meta refresh: {target!r})"
    )
