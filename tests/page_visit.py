"""One browser visit of a built page, and what the page-by-page tests assert on.

``open_visit`` opens a fresh context (empty cache and localStorage) with the network limited to
the local server, recording console errors, uncaught exceptions, blocked external requests,
failed requests and the bytes of every response. ``desktop_report`` visits a page once and
measures everything the per-page tests of test_site_pages.py check (loads offline without errors,
accessibility, dark-mode contrast, page weight), so each page is loaded once for all of them
instead of once per test.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import site_server
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

LOCAL_HOSTS = {"127.0.0.1", "localhost"}
VIEWPORT = {"width": 1280, "height": 900}
NAV_TIMEOUT_MS = 60_000
RENDER_TIMEOUT_MS = 30_000
QUIET_S = 0.5

# Resolves once the page's web fonts (the math font among them) have loaded or failed.
WAIT_FOR_FONTS_JS = "async () => { await document.fonts.ready; return document.fonts.status; }"

# 글자색과 (투명하지 않은 조상까지 올라가 찾은) 배경색의 명도 대비 (WCAG 공식)
CONTRAST_JS = """(selector) => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
    .reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
  const background = el => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length === 3 || (c.length === 4 && c[3] > 0.5)) return c.slice(0, 3); } return [255, 255, 255]; };
  // 선택자마다 앞의 다섯 개씩: 본문 문단만 스무 개 재고 표 제목·접힌 줄은 못 보는 일이 없게
  return selector.split(',').flatMap(sel => Array.from(document.querySelectorAll(sel.trim())).slice(0, 5)).map(el => {
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(background(el));
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  });
}"""
CONTRAST_SELECTOR = (".bd-content p, .bd-content li, .bd-content h1, .ddp-quiz-prompt, .ddp-quiz-choice, .lab-table td, "
                     ".bd-content table caption, details.lab-checks-box > summary, .ddp-figure-title")

# 보이는 수식 중 크기 0으로 그려진 것 (닫힌 드롭다운·숨은 탭 안의 수식은 그려지지 않으므로 뺀다)
EMPTY_FORMULAS_JS = """() => [...document.querySelectorAll('.math')].filter(el => el.checkVisibility()).filter(el => {
    const m = el.querySelector('math'); const r = m && m.getBoundingClientRect();
    return !r || r.width === 0 || r.height === 0; }).map(el => el.textContent.slice(0, 80))"""

AXE_JS = ("async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
          ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}))")


@dataclass(repr=False)
class Visit:
    """A browser tab with the network blocked and every problem recorded."""

    page: Any  # a playwright Page
    base_url: str
    site: Path
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    blocked_urls: set[str] = field(default_factory=set)
    in_flight: dict[object, str] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)  # URL -> bytes of every successful response
    last_activity: float = field(default_factory=time.monotonic)

    def __repr__(self) -> str:
        return f"<Visit {self.page.url}: 문제 {len(self.problems())}개>"

    def open(self, rel: str) -> None:
        response = self.page.goto(self.base_url + rel, wait_until="load", timeout=NAV_TIMEOUT_MS)
        assert response is not None and response.ok, (
            f"{rel}를 열 수 없습니다: HTTP {response.status if response else '응답 없음'}"
        )
        self.settle()

    def wait_network_quiet(self) -> None:
        """No request in flight for QUIET_S seconds. (Playwright's "networkidle" never fires on
        pages with plotly figures, so the requests are counted here.)"""
        deadline = time.monotonic() + NAV_TIMEOUT_MS / 1000
        while self.in_flight or time.monotonic() - self.last_activity < QUIET_S:
            assert time.monotonic() < deadline, (
                f"{self.page.url}: 요청이 끝나지 않습니다: {sorted(self.in_flight.values())}"
            )
            self.page.wait_for_timeout(100)

    def settle(self) -> None:
        """Wait until the page stops loading things and its fonts are ready."""
        self.wait_network_quiet()
        self.page.evaluate(WAIT_FOR_FONTS_JS)
        self.wait_network_quiet()
        self.check_favicon()

    def check_favicon(self) -> None:
        """Without <link rel="icon"> the browser fetches /favicon.ico from the server root on its
        own (outside the page's request events, sometimes after the test is done); check that
        deterministically instead of depending on when its console error arrives."""
        if self.page.locator('link[rel~="icon"]').count() == 0 and not (self.site / "favicon.ico").is_file():
            problem = (
                f"GET {self.base_url}favicon.ico: HTTP 404 (페이지: {self.page.url}) — "
                '페이지에 <link rel="icon">이 없어 브라우저가 서버 루트의 /favicon.ico를 스스로 요청합니다. '
                "Sphinx 설정 html_favicon으로 _static/ 안의 아이콘을 지정하세요."
            )
            if problem not in self.failed:
                self.failed.append(problem)

    def problems(self) -> list[str]:
        return (
            [f"콘솔 오류: {m}" for m in self.console_errors]
            + [f"페이지 오류(잡히지 않은 예외): {m}" for m in self.page_errors]
            + [f"차단된 외부 요청: {m}" for m in self.blocked]
            + [f"실패한 요청: {m}" for m in self.failed]
        )

    def assert_clean(self, what: str) -> None:
        problems = self.problems()
        assert not problems, f"{what}: 브라우저에서 문제가 발생했습니다:\n" + "\n".join(problems)


@contextlib.contextmanager
def open_visit(browser, base_url: str, site: Path, **context_options) -> Iterator[Visit]:
    """A fresh context (empty cache and localStorage), network limited to the local server."""
    context = browser.new_context(**{"viewport": VIEWPORT, "locale": "ko-KR", "service_workers": "block", **context_options})
    page = context.new_page()
    v = Visit(page=page, base_url=base_url, site=site)
    favicon = base_url + "favicon.ico"

    def route(route):
        url = route.request.url
        parts = urlsplit(url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOCAL_HOSTS:
            v.blocked.append(f"{route.request.method} {url} (페이지: {page.url})")
            v.blocked_urls.add(url)
            route.abort("blockedbyclient")
        else:
            route.continue_()

    def on_console(msg):
        if msg.type != "error":
            return
        loc = msg.location or {}
        if loc.get("url") == favicon:
            return  # reported deterministically by Visit.check_favicon
        where = f" [{loc.get('url')}:{loc.get('lineNumber')}:{loc.get('columnNumber')}]" if loc.get("url") else ""
        v.console_errors.append(f"{msg.text}{where} (페이지: {page.url})")

    def on_request(request):
        v.in_flight[request] = request.url
        v.last_activity = time.monotonic()

    def on_request_done(request):
        v.in_flight.pop(request, None)
        v.last_activity = time.monotonic()

    def on_request_failed(request):
        on_request_done(request)
        if request.url in v.blocked_urls:
            return  # already reported as a blocked external request
        v.failed.append(f"{request.method} {request.url}: {request.failure} (페이지: {page.url})")

    def on_response(response):
        if response.ok:
            v.received[response.url.split("?")[0]] = len(response.body())
        if response.status >= 400:
            v.failed.append(f"{response.request.method} {response.url}: HTTP {response.status} (페이지: {page.url})")

    context.route("**/*", route)
    page.on("console", on_console)
    page.on("pageerror", lambda exc: v.page_errors.append(f"{exc} (페이지: {page.url})"))
    context.on("request", on_request)
    context.on("requestfinished", on_request_done)
    context.on("requestfailed", on_request_failed)
    context.on("response", on_response)
    page.set_default_timeout(RENDER_TIMEOUT_MS)
    try:
        yield v
    finally:
        context.close()


def rendered(locator) -> bool:
    """True once ``locator`` matches an element (waits up to RENDER_TIMEOUT_MS)."""
    try:
        locator.first.wait_for(state="attached", timeout=RENDER_TIMEOUT_MS)
    except PlaywrightTimeoutError:
        return False
    return True


@dataclass
class PageReport:
    """What one desktop visit of a page measured."""

    problems: list[str]  # 콘솔 오류, 잡히지 않은 예외, 차단된 외부 요청, 실패한 요청
    empty_formulas: list[str]  # 보이는데 크기 0으로 그려진 수식
    figures: list[str]  # 그려지지 않은 plotly 그림마다 한 줄
    received: dict[str, int]  # 처음 방문(빈 캐시)에서 받은 응답마다 바이트 수
    axe_violations: list[dict]  # axe-core의 위반 (밝은 테마)
    dark_theme: bool  # prefers-color-scheme: dark에서 테마가 어두운 테마로 바뀌었는가
    dark_contrast: list[float]  # 어두운 테마에서 글자와 배경의 명도 대비


def desktop_report(browser, base_url: str, site: Path, rel: str, shots: Path) -> PageReport:
    """Visit ``rel`` once at desktop width and measure what every per-page test needs.

    Order: load offline and settle; full-page screenshot; formulas and plotly figures; axe-core on
    the light theme; then the reader's system switches to dark (``prefers-color-scheme``), the
    theme must follow, and the contrast of the text is measured with a dark screenshot.
    """
    import axe_playwright_python

    axe = Path(axe_playwright_python.__file__).parent / "axe.min.js"
    with open_visit(browser, base_url, site) as visit:
        visit.open(rel)
        page = visit.page
        site_server.full_page_screenshot(page, shots, rel, "desktop")
        empty = page.evaluate(EMPTY_FORMULAS_JS)
        figures = []
        plots = page.locator(".plotly-graph-div")
        for i in range(plots.count()):
            fig = plots.nth(i)
            if not rendered(fig.locator(".main-svg")):
                figures.append(f"{i + 1}번째 plotly 그림이 그려지지 않았습니다 (.main-svg 없음).")
                continue
            box = fig.bounding_box()
            if not box or box["height"] <= 0:
                figures.append(f"{i + 1}번째 plotly 그림의 높이가 0입니다 ({box}).")
        visit.wait_network_quiet()
        problems = visit.problems()
        received = dict(visit.received)
        page.add_script_tag(path=str(axe))
        violations = page.evaluate(AXE_JS)
        page.emulate_media(color_scheme="dark")
        try:
            page.wait_for_function("document.documentElement.dataset.theme === 'dark'", timeout=10000)
            dark = True
        except PlaywrightTimeoutError:
            dark = False
        contrast = page.evaluate(CONTRAST_JS, CONTRAST_SELECTOR) if dark else []
        page.screenshot(path=str(shots / site_server.screenshot_name(rel, "dark")))
    return PageReport(problems, empty, figures, received, violations, dark, contrast)


@contextlib.contextmanager
def watched_page(browser, site_url: str, site_root: Path, required: tuple[str, ...],
                 viewport: dict | None = None) -> Iterator[object]:
    """A tab (desktop unless ``viewport`` says otherwise) on the built site that records console errors, page errors and any request off
    this machine in ``page.problems`` (the browser tests of quizzes and predictions assert it stays
    empty); ``page.open(rel)`` loads a page of the site."""
    for rel in required:
        assert (site_root / rel).is_file(), f"빌드된 사이트에 {rel}가 없습니다 ({site_root}). 목차를 확인하세요."
    context = browser.new_context(viewport=viewport or VIEWPORT, locale="ko-KR", service_workers="block")
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.problems = []
    page.on("console", lambda m: page.problems.append(f"콘솔 오류: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: page.problems.append(f"페이지 오류: {e}"))

    def route(r):
        if urlsplit(r.request.url).hostname not in LOCAL_HOSTS:
            page.problems.append(f"외부 요청: {r.request.url}")
            return r.abort()
        return r.continue_()

    context.route("**/*", route)
    page.open = lambda rel: page.goto(site_url + rel, wait_until="load")
    try:
        yield page
    finally:
        context.close()
