"""The built site works with the network off: static checks of every HTML file (no browser).

- no script, stylesheet, preload, icon, image or frame is fetched from another host;
- every local script and stylesheet a page references exists in the site;
- plotly.js is served once from ``_static/plotly.min.js`` (never inlined into a page) and is
  referenced by every page with a plotly figure;
- formulas are MathML written at build time: no page loads a math script, every formula is a
  ``<math>`` element, and the site's math font covers every character they use, MATH table included;
- the theme's Font Awesome font is cut down to the icons its CSS draws, and the search index is
  loaded only by ``search.html``;
- every page is marked as Korean (``<html lang="ko">``).

The site is read from ``DDP_SITE_DIR`` (default ``<repo>/_build/html``); build it with ``make book``.
"""

from __future__ import annotations

import json
import re
import sys
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from bs4 import BeautifulSoup

sys.path.insert(0, str(Path(__file__).resolve().parent))
import site_server  # noqa: E402  (tests/ has no __init__.py; see site_server's docstring)

sys.path.insert(0, str(site_server.REPO / "book" / "_ext"))  # the book's Sphinx extensions
import offline_site  # noqa: E402

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
MATH_FONT = "_static/fonts/ddp-math.woff2"
ICON_FONT = "_static/vendor/fontawesome/webfonts/fa-solid-900.woff2"
SEARCH_SCRIPTS = ("searchindex.js", "_static/searchtools.js", "_static/language_data.js")
PLOTLY_BANNER_HTML = re.compile(r"plotly\.js (?:\([^)]*\) )?v\d")
PLOTLY_BANNER_JS = re.compile(r"^\s*\*\s*plotly\.js (?:\([^)]*\) )?v\d+\.\d+", re.MULTILINE)
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
            found.append((f"<link rel=\"{' '.join(sorted(rels))}\" href>", str(tag["href"])))
    for name, attr in FETCHING_ATTRS:
        for tag in soup.find_all(name, attrs={attr: True}):
            found.append((f"<{name} {attr}>", str(tag[attr])))
    for tag in soup.find_all(["img", "source"], srcset=True):
        for candidate in str(tag["srcset"]).split(","):
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
        target = _local_target(site, page, str(tag["src"]))
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


def _math_elements(site: Path) -> dict[str, list]:
    return {_rel(site, p): _soup(p).find_all("math") for p in _pages(site)}


def test_formulas_are_mathml_without_scripts(site):
    """Every formula Sphinx marked (class="math") holds one <math> element; no page loads MathJax."""
    math_pages = 0
    problems = []
    for page in _pages(site):
        soup = _soup(page)
        if any("mathjax" in target.lower() for target in _script_targets(site, page, soup)):
            problems.append(f"{_rel(site, page)}: MathJax 스크립트를 불러옵니다")
        for holder in soup.select(".math"):
            math_pages += 1
            if len(holder.find_all("math")) != 1:
                problems.append(f"{_rel(site, page)}: <math> 없는 수식 {holder.get_text()[:60]!r}")
        problems += [f"{_rel(site, page)}: 변환 실패 {e.get_text()[:60]!r}" for e in soup.select(".math-error")]
    assert math_pages >= 100, f"수식이 {math_pages}개뿐입니다. 장들에는 수식이 수백 개 있어야 합니다."
    assert not problems, "수식은 빌드 때 MathML로 바뀌어야 합니다:\n" + "\n".join(problems[:20])


def test_math_font_covers_every_formula_character(site):
    """The subset STIX Two Math keeps its MATH table and every character the formulas use that the
    full font has (Hangul in \\text{} falls back to the page font on purpose)."""
    import mathml_math
    from fontTools.ttLib import TTFont

    assert (site / MATH_FONT).is_file(), f"{MATH_FONT}가 사이트에 없습니다."
    subset, full = TTFont(site / MATH_FONT), TTFont(mathml_math._font_source())
    assert "MATH" in subset, "수식 글꼴에서 MATH 표가 빠졌습니다: 큰 연산자와 늘어나는 괄호가 그려지지 않습니다."
    used = {ch for elements in _math_elements(site).values() for e in elements for ch in e.get_text()}
    wanted = {ch for ch in used if ord(ch) in full.getBestCmap()}
    missing = sorted(ch for ch in wanted if ord(ch) not in subset.getBestCmap())
    assert len(wanted) >= 40, f"수식에 쓰인 문자가 {len(wanted)}개뿐입니다."
    assert not missing, f"{MATH_FONT}에 없는 수식 문자: {missing}"
    assert (site / MATH_FONT).stat().st_size < 60_000, f"{MATH_FONT}가 {(site / MATH_FONT).stat().st_size} 바이트입니다."


def test_icon_font_is_cut_to_the_theme_icons(site):
    from fontTools.ttLib import TTFont

    wanted = set(offline_site._theme_icon_codepoints(site / "_static"))
    assert {0xF05A, 0xF071, 0xF0EB} <= wanted, "테마 CSS의 알림 상자 아이콘(info, warning, lightbulb)을 찾지 못했습니다."
    have = set(TTFont(site / ICON_FONT).getBestCmap())
    solid = set(TTFont(site / ICON_FONT.replace(".woff2", ".ttf")).getBestCmap())
    assert wanted & solid <= have, f"아이콘 글꼴에 빠진 코드: {sorted(hex(c) for c in (wanted & solid) - have)}"
    assert len(have) <= 40, f"아이콘 글꼴에 글리프가 {len(have)}개 있습니다. 테마가 쓰는 것만 남겨야 합니다."


def test_search_index_is_loaded_only_by_the_search_page(site):
    problems = []
    for page in _pages(site):
        targets = _script_targets(site, page, _soup(page))
        loaded = [s for s in SEARCH_SCRIPTS if s in targets]
        if _rel(site, page) == "search.html":
            if len(loaded) != len(SEARCH_SCRIPTS):
                problems.append(f"search.html이 {set(SEARCH_SCRIPTS) - set(loaded)}를 불러오지 않습니다")
        elif loaded:
            problems.append(f"{_rel(site, page)}: {loaded}")
    assert not problems, "검색 색인은 search.html에서만 불러야 합니다:\n" + "\n".join(problems)


def test_sphinx_design_assets_only_where_a_component_is_drawn(site):
    """sphinx-design's stylesheet and tab script (~60 KB) load only on pages that draw one of its
    components: on the others they were dead weight (chapter 7 went over 2.5 MB with them)."""
    checked, problems = 0, []
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        body = _soup(page).find(attrs={"role": "main"})
        linked = bool(re.search(r'(?:sphinx-design\.min\.css|design-tabs\.js)', text))
        if body is None:
            continue
        checked += 1
        if linked != offline_site.uses_sphinx_design(str(body)):
            problems.append(f"{_rel(site, page)}: 연결 {linked}, 컴포넌트 {not linked}")
    assert checked >= 12 and not problems, "sphinx-design 자원은 그 컴포넌트를 그리는 페이지에만 둡니다:\n" + "\n".join(problems)


def test_the_component_rule_sees_a_card():
    assert offline_site.uses_sphinx_design('<div class="sd-card sd-sphinx-override">카드</div>')
    assert offline_site.uses_sphinx_design('<div class="docutils sd-tab-set">탭</div>')
    assert not offline_site.uses_sphinx_design('<div class="cell" data-sd-tabs="x">sd- 낱말</div>')


def test_plotly_does_not_hold_up_the_first_paint(site):
    """plotly.min.js (1.5 MB) is deferred and every figure's script waits for DOMContentLoaded (offline_site)."""
    problems, figures = [], 0
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        tags = re.findall(r"<script[^>]*plotly\.min\.js[^>]*>", text)
        scripts = offline_site.FIGURE_SCRIPT.findall(text)
        figures += len(scripts)
        if scripts and not (tags and all("defer" in tag for tag in tags)):
            problems.append(f"{_rel(site, page)}: plotly.min.js가 defer가 아닙니다 {tags}")
        problems += [f"{_rel(site, page)}: 그림 스크립트가 DOMContentLoaded를 기다리지 않습니다"
                     for _, body, _ in scripts if not body.lstrip().startswith(offline_site.WAIT_FOR_PAGE)]
    assert figures >= 20 and not problems, "\n".join(problems[:10]) or f"그림이 {figures}개뿐입니다"


# a cell magic writing to a path the build made, and the build's own temp folders
BUILD_LEFTOVERS = re.compile(r"%%writefile \{|/tmp/(?:miniddp|ddp-|labs-|tmp)[\w.-]*")


def test_pages_show_no_build_leftovers(site):
    found = [f"{_rel(site, page)}: {m[0]}" for page in _pages(site)
             for m in BUILD_LEFTOVERS.finditer(page.read_text(encoding="utf-8"))]
    assert not found, "페이지에 빌드의 흔적(셀 매직, 임시 폴더 경로)이 보입니다:\n" + "\n".join(found[:10])
    assert BUILD_LEFTOVERS.search("%%writefile {my_file}") and BUILD_LEFTOVERS.search("Writing /tmp/miniddp-x1/my_ddp.py")
    assert not BUILD_LEFTOVERS.search("%%writefile my_ddp.py")  # what 9.4 shows now: the reader's own command


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


# The theme's interface strings, translated by book/_locale/ko (the theme has no Korean catalog) and,
# where its templates hard-code them, by book/_ext/korean_ui.py.
THEME_UI_KO = {"Skip to main content": "본문으로 건너뛰기", "Back to top": "맨 위로", "Color mode": "색 모드",
               "On this page": "이 페이지의 내용", "Search...": "이 책에서 검색...",
               'title="Toggle primary sidebar"': 'title="책 목차 열고 닫기"', 'aria-label="Main"': 'aria-label="책 목차"',
               'title="Link to this heading"': 'title="이 제목의 링크"',
               'aria-label="Toggle hidden content"': 'aria-label="코드 보기"'}


def test_theme_interface_is_korean(site):
    problems = []
    for page in _pages(site):
        text = page.read_text(encoding="utf-8")
        problems += [f"{_rel(site, page)}: {english!r}" for english in THEME_UI_KO if english in text]
    chapter = (site / "book/04_allreduce.html").read_text(encoding="utf-8")
    problems += [f"book/04_allreduce.html에 {korean!r}가 없습니다" for korean in THEME_UI_KO.values() if korean not in chapter]
    assert not problems, "테마 화면 문구가 한국어가 아닙니다 (book/_locale/ko/LC_MESSAGES/sphinx.po):\n" + "\n".join(problems[:20])


def test_helper_scripts_speak_korean(site):
    """sphinx-copybutton's tooltips and sphinx-togglebutton's label (book/_ext/korean_ui.py)."""
    copy = (site / "_static/copybutton.js").read_text(encoding="utf-8")
    toggle = (site / "_static/togglebutton.js").read_text(encoding="utf-8")
    assert "'ko': {" in copy and "'copy_success': '복사했습니다'" in copy, "copybutton.js에 한국어(ko) 문구가 없습니다"
    assert "Toggle hidden content" not in toggle and "숨긴 내용 펼치기" in toggle, "togglebutton.js의 단추 이름이 영어입니다"


def test_a_hidden_cell_says_what_it_opens(site):
    chapter = (site / "book/10_traps.html").read_text(encoding="utf-8")
    assert "코드 보기" in chapter and "펼쳐 보기" not in chapter, "숨긴 코드 셀의 단추가 무엇을 여는지 말하지 않습니다"
    recipe = (site / "book/14_recipe.html").read_text(encoding="utf-8")
    assert "출력 보기" in recipe, "숨긴 출력 셀(14.6의 보고서)의 단추가 '출력 보기'가 아닙니다"


def test_root_redirects_to_intro(site):
    index = site / site_server.REDIRECT_PAGE
    assert index.is_file(), f"{site_server.REDIRECT_PAGE}가 없습니다."
    meta = _soup(index).find("meta", attrs={"http-equiv": re.compile("refresh", re.I)})
    target = meta.get("content", "") if meta is not None else ""
    assert "book/intro.html" in target, (
        f"{site_server.REDIRECT_PAGE}는 book/intro.html로 이동해야 합니다 (meta refresh: {target!r})"
    )


# --- the cartesian plotly.js bundle ----------------------------------------------------------------

VENDORED_PLOTLY = Path(__file__).resolve().parent.parent / "book" / "_ext" / "vendor" / "plotly-cartesian" / "plotly-cartesian.min.js"
_VERSION = re.compile(r"plotly\.js[^\n]*? v(\d+\.\d+\.\d+)")


def _bundle_version(path: Path) -> str:
    with path.open(encoding="utf-8", errors="replace") as f:
        found = _VERSION.search(f.read(600))
    assert found, f"{path}의 첫 줄에서 plotly.js 버전을 읽지 못했습니다"
    return found.group(1)


def test_vendored_bundle_is_the_plotly_js_version_of_the_pinned_plotly():
    import plotly

    full = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    assert _bundle_version(VENDORED_PLOTLY) == _bundle_version(full), (
        "plotly 고정 버전이 바뀌었습니다: 같은 버전의 plotly.js-cartesian-dist-min을 다시 받아 "
        "book/_ext/vendor/plotly-cartesian/에 넣으세요(README.md)")


def test_bundle_traces_are_the_trace_modules_inside_the_bundle():
    from labs import viz

    registered = set(re.findall(r'name:"([a-z0-9]+)",basePlotModule', VENDORED_PLOTLY.read_text(encoding="utf-8")))
    assert registered and registered == set(viz.BUNDLE_TRACES)


def test_site_serves_the_cartesian_bundle(site):
    served = (site / PLOTLY_STATIC).read_bytes()
    assert served == VENDORED_PLOTLY.read_bytes(), f"{PLOTLY_STATIC}가 book/_ext/vendor의 cartesian 묶음이 아닙니다"


def test_show_refuses_a_trace_type_the_bundle_lacks():
    import plotly.graph_objects as go

    from labs import viz

    flat = go.Figure(go.Scatter(x=[0, 1], y=[1, 2]))
    assert viz.trace_types(flat) == {"scatter"}
    solid = go.Figure(go.Scatter3d(x=[0], y=[0], z=[0]))
    with pytest.raises(ValueError, match="scatter3d"):
        viz.show(solid, "fig-3d", alt="3차원 산점도")
    framed = go.Figure(go.Scatter(x=[0], y=[0]), frames=[go.Frame(data=[go.Scattergl(x=[0], y=[0])])])
    with pytest.raises(ValueError, match="scattergl"):
        viz.show(framed, "fig-frames", alt="프레임 안의 scattergl")


def test_every_figure_on_the_site_draws_bundle_traces_only(site):
    from labs import viz

    drawn: set[str] = set()
    for path in _pages(site):
        for script in _soup(path).find_all("script"):
            text = script.string or ""
            # newPlot("id", [traces...], layout): layout의 template에 적힌 trace 종류는 그림이 그리지 않는다
            for call in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", text):
                traces, _ = json.JSONDecoder().raw_decode(text, call.end())
                drawn |= {t.get("type", "scatter") for t in traces}
            for call in re.finditer(r"Plotly\.addFrames\(\s*['\"][^'\"]+['\"],\s*", text):
                frames, _ = json.JSONDecoder().raw_decode(text, call.end())
                drawn |= {t.get("type", "scatter") for frame in frames for t in frame.get("data", [])}
    assert drawn, "사이트에서 plotly 그림을 하나도 찾지 못했습니다"
    assert drawn <= set(viz.BUNDLE_TRACES), f"묶음에 없는 trace 종류: {sorted(drawn - set(viz.BUNDLE_TRACES))}"


def test_page_figures_are_compact_but_keep_what_they_draw():
    import plotly.graph_objects as go

    from labs import viz

    fig = go.Figure(go.Heatmap(z=[[0.1234567891234, 2]], x=[6000016, 6000020]),
                    frames=[go.Frame(name="f", data=[go.Heatmap(z=[[1.0000000001, 3]])])])
    spec = viz._compact(fig)
    assert spec["data"][0]["z"] == [[0.12345679, 2]] and spec["data"][0]["x"] == [6000016, 6000020]
    assert spec["frames"][0]["data"][0]["z"] == [[1.0, 3]]
    kept = set(spec["layout"]["template"]["data"])
    assert kept == {"heatmap"}, kept  # 그리지 않는 종류의 기본값은 빠지고, 그리는 종류의 기본값(색 척도)은 남는다
    scale = spec["layout"]["template"]["data"]["heatmap"][0]["colorscale"]
    assert [color for _, color in scale] == [color for _, color in fig.layout.template.data.heatmap[0].colorscale]


def test_figure_text_is_written_as_utf8_hangul_not_escapes():
    import plotly.graph_objects as go
    from IPython.core.interactiveshell import InteractiveShell

    from labs import viz

    shell = InteractiveShell.instance()
    with shell.builtin_trap, __import__("IPython.utils.capture", fromlist=["capture_output"]).capture_output() as out:
        viz.show(go.Figure(go.Scatter(x=[0], y=[0], name="랭크 0 <b>", hovertext=["합계"])), "fig-utf8", alt="시험")
    html = out.outputs[0].data["text/html"]
    assert '"name":"랭크 0 \\u003cb\\u003e"' in html and "합계" in html and "\\uB7AD" not in html.upper().replace("\\U", "\\u")


def test_figure_html_drops_the_template_indentation_but_keeps_spaces_in_strings():
    import plotly.graph_objects as go
    from IPython.core.interactiveshell import InteractiveShell

    from labs import viz

    shell = InteractiveShell.instance()
    fig = go.Figure(go.Bar(x=[0, 1], y=[1, 2], text=["a  b", 'c "  d'], name="랭크  0"))
    with shell.builtin_trap, __import__("IPython.utils.capture", fromlist=["capture_output"]).capture_output() as out:
        viz.show(fig, "fig-spaces", alt="시험")
    html = out.outputs[0].data["text/html"]
    call = re.search(r'Plotly\.newPlot\(\s*"fig-spaces",\s*', html)
    data, _ = json.JSONDecoder().raw_decode(html, call.end())
    assert data[0]["text"] == ["a  b", 'c "  d'] and data[0]["name"] == "랭크  0"  # 문자열 안의 공백은 그대로
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', html)
    assert "  " not in outside, outside[:300]  # 문자열 밖(plotly 틀의 들여쓰기)에는 두 칸 공백이 없다
