"""Every page of the built site, visited once at desktop width in headless Chromium (network
blocked): the visit (``page_visit.desktop_report``) measures everything these tests check, so each
page is opened once for all of them. For every page: no console error, uncaught exception, blocked
external or failed request; every visible formula laid out and every plotly figure drawn; no serious
axe-core violation (light theme); the theme follows the reader's dark colour scheme with readable
text; and what a first visit downloads stays under the weight limit. Screenshots (desktop, dark) go
to ``_build/screenshots/``.

To check something more on every page, add the measurement to ``page_visit.PageReport`` and the
assertion here. Under ``make test`` (pytest-xdist) this file is one unit on one worker, scheduled
first (tests/parallel.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import page_visit  # noqa: E402
import site_server  # noqa: E402  (tests/ has no __init__.py; see site_server's docstring)
from site_server import pages_to_check, screenshot_dir  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PAGES = pages_to_check()


@pytest.fixture(scope="module")
def page_report(chromium, site_url, site_root):
    """``page_report(rel)``: the one desktop visit of page ``rel`` (``page_visit.desktop_report``),
    made when a test first asks for it and shared by every test of this file."""
    reports: dict[str, object] = {}

    def get(rel: str):
        if rel not in reports:
            try:
                reports[rel] = page_visit.desktop_report(chromium, site_url, site_root, rel, site_server.screenshot_dir())
            except Exception as exc:  # noqa: BLE001 - every test of this page reports the same failure
                reports[rel] = exc
        report = reports[rel]
        if isinstance(report, Exception):
            raise report
        return report

    return get


@pytest.mark.parametrize("rel", PAGES)
def test_page_loads_offline_without_errors(page_report, site_root, rel):
    """The page's one desktop visit (``page_report``): no browser problem, every visible
    formula laid out, every plotly figure drawn; its screenshot is in ``_build/screenshots/``."""
    assert (site_root / rel).is_file(), f"빌드된 사이트에 {rel}가 없습니다 ({site_root})."
    report = page_report(rel)
    assert not report.problems, f"{rel}: 브라우저에서 문제가 발생했습니다:\n" + "\n".join(report.problems)
    assert not report.empty_formulas, (
        f"{rel}: 그려지지 않은(크기 0) 수식 {len(report.empty_formulas)}개: {report.empty_formulas[:5]}")
    assert not report.figures, f"{rel}: " + " ".join(report.figures)


@pytest.mark.parametrize("page_path", PAGES)
def test_no_serious_accessibility_violations(page_report, page_path):
    """axe-core on the page's one desktop visit (light theme)."""
    serious = [v for v in page_report(page_path).axe_violations if v["impact"] in ("serious", "critical")]
    assert not serious, f"{page_path}: 접근성 위반(serious/critical) {serious}"


@pytest.mark.parametrize("page_path", PAGES)
def test_dark_mode_text_is_readable(page_report, page_path):
    """The reader's system switches to dark during the page's desktop visit: the theme follows and
    its text keeps a WCAG contrast of at least 4.5 (screenshot ``*-dark.png``)."""
    report = page_report(page_path)
    assert report.dark_theme, f"{page_path}: prefers-color-scheme가 dark인데 테마가 어두운 테마로 바뀌지 않았습니다"
    ratios = report.dark_contrast
    assert ratios, f"{page_path}: 대비를 잴 글자가 없습니다"
    assert min(ratios) >= 4.5, f"{page_path}: 어두운 테마에서 명도 대비가 낮음 (최소 {min(ratios):.2f})"


PAGE_WEIGHT_LIMIT = 1_500_000


def test_every_page_weighs_under_limit_without_plotly(page_report):
    """Everything a first visit downloads (HTML, CSS, JS, fonts), plotly.js aside, stays under
    1.5 MB on every page; the table goes to ``_build/screenshots/page-weight.txt``. Measured
    0.76–1.01 MB: formulas are build-time MathML with a ~25 KB font subset, the search index loads
    only on search.html, the icon font is cut to the theme's icons (it was ~4.5 MB with MathJax's
    tex-svg.js and fontawesome.js, 1.9–2.2 MB with MathJax components)."""
    rows, problems = [], []
    for page_path in PAGES:
        sizes = page_report(page_path).received  # 빈 캐시로 처음 방문한 그 방문에서 받은 응답들
        total = sum(size for url, size in sizes.items() if not url.endswith("plotly.min.js"))
        largest = ", ".join(f"{u.rsplit('/', 1)[-1]} {s // 1024} KiB"
                            for u, s in sorted(sizes.items(), key=lambda x: -x[1]) if not u.endswith("plotly.min.js"))
        rows.append((total, page_path, largest))
        if total >= PAGE_WEIGHT_LIMIT:
            problems.append(f"{page_path}: {total / 1e6:.2f} MB — {largest[:300]}")
    rows.sort(reverse=True)
    report = "\n".join(f"{total / 1e6:.2f} MB  {path}  ({largest[:200]})" for total, path, largest in rows)
    (screenshot_dir() / "page-weight.txt").write_text(report + "\n", encoding="utf-8")
    print(f"가장 무거운 페이지: {rows[0][1]} {rows[0][0] / 1e6:.2f} MB (plotly.js 제외)")
    assert len(rows) >= 12, f"무게를 잰 페이지가 {len(rows)}개뿐입니다."
    assert not problems, f"plotly.js를 빼고 {PAGE_WEIGHT_LIMIT / 1e6} MB를 넘는 페이지:\n" + "\n".join(problems)


FIRST_VISIT_LIMIT = 2_600_000


def test_heaviest_first_visit_with_plotly_stays_under_limit(page_report):
    """Everything a first visit downloads, plotly.js included (the cartesian bundle), stays under
    2.6 MB on every page (the full plotly.js alone was 4.8 MB). Of the heaviest page (chapter 7, 2.50 MB on
    2026-12-07) 2.18 MB are the same on every page: plotly 1.50 MB, the theme's CSS and scripts 0.68 MB."""
    totals = {page_path: sum(page_report(page_path).received.values()) for page_path in PAGES}
    assert len(totals) >= 12, f"무게를 잰 페이지가 {len(totals)}개뿐입니다."
    heavy = {p: t for p, t in totals.items() if t >= FIRST_VISIT_LIMIT}
    print(f"가장 무거운 첫 방문: {max(totals, key=totals.get)} {max(totals.values()) / 1e6:.2f} MB (plotly.js 포함)")
    assert not heavy, f"plotly.js를 포함해 {FIRST_VISIT_LIMIT / 1e6} MB를 넘는 페이지: " + ", ".join(
        f"{p} {t / 1e6:.2f} MB" for p, t in sorted(heavy.items()))
