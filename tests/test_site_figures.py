"""Every plotly figure on the site, at 1280 px and at 390 px: nothing is drawn over its title or
legend, no title is cut at the edge, and an animation's title follows its frames.

The boxes are measured in Chromium on the built pages (``getBoundingClientRect``), the way a
reader sees them: the title above the plot (``.ddp-figure-title``), plotly's legend and toolbar,
and the figure's own box.
"""

from __future__ import annotations

import pytest
import site_server

WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}

# Hovering shows plotly's toolbar when it is on; the boxes are read after that.
OVERLAPS_JS = """() => {
  const box = el => { if (!el) return null; const r = el.getBoundingClientRect(); return r.width && r.height ? r : null; };
  const hit = (a, b) => a && b && a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  return [...document.querySelectorAll('.js-plotly-plot')].map(plot => {
    plot.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    const figure = plot.closest('figure') || plot;
    const title = box(figure.querySelector('.ddp-figure-title')) || box(plot.querySelector('.gtitle'));
    const legend = box(plot.querySelector('.legend')), bar = box(plot.querySelector('.modebar'));
    const frame = box(figure), problems = [];
    if (hit(title, legend)) problems.push('제목과 범례가 겹친다');
    if (hit(title, bar)) problems.push('제목과 도구 막대가 겹친다');
    if (hit(legend, bar)) problems.push('범례와 도구 막대가 겹친다');
    if (title && frame && (title.left < frame.left - 1 || title.right > frame.right + 1)) problems.push('제목이 가장자리에서 잘린다');
    return {id: plot.id, problems};
  });
}"""


def _figure_pages(site) -> list[str]:
    pages = [rel for rel in site_server.content_pages(site)
             if "plotly-graph-div" in (site / rel).read_text(encoding="utf-8")]
    assert pages, "plotly 그림이 있는 페이지가 하나도 없습니다"
    return pages


@pytest.mark.parametrize("width", sorted(WIDTHS))
def test_nothing_is_drawn_over_a_figure_title_or_legend(chromium, site_url, site_root, width):
    context = chromium.new_context(viewport=WIDTHS[width], locale="ko-KR")
    page = context.new_page()
    seen, problems = 0, []
    try:
        for rel in _figure_pages(site_root):
            page.goto(site_url + rel, wait_until="load")
            page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].every(p => p._fullLayout)")
            for fig in page.evaluate(OVERLAPS_JS):
                seen += 1
                problems += [f"{rel} #{fig['id']}: {p}" for p in fig["problems"]]
    finally:
        context.close()
    assert seen >= 10, f"잰 그림이 {seen}개뿐입니다"
    assert not problems, f"{width}({WIDTHS[width]['width']} px)에서:\n" + "\n".join(problems)


def test_animation_title_follows_its_frames(chromium, site_url, site_root):
    # 4장 링 All-Reduce: 슬라이더를 마지막 단계로 옮기면 그림 위의 제목이 그 단계의 제목이 된다
    context = chromium.new_context(viewport=WIDTHS["desktop"], locale="ko-KR")
    page = context.new_page()
    try:
        page.goto(site_url + "book/04_allreduce.html", wait_until="load")
        page.wait_for_function("() => document.getElementById('fig-ring-allreduce')._fullLayout")
        page.evaluate("() => document.querySelectorAll('.ddp-awaiting-peek').forEach(b => b.click())")  # 예측 없이 보기
        first = page.inner_text("#fig-ring-allreduce-title")
        last = page.evaluate("""async () => {
            const gd = document.getElementById('fig-ring-allreduce');
            const frames = gd._transitionData._frames, name = frames[frames.length - 1].name;
            await Plotly.animate(gd, [name], {mode: 'immediate', frame: {duration: 0, redraw: true}, transition: {duration: 0}});
            return name; }""")
        page.wait_for_function("(first) => document.getElementById('fig-ring-allreduce-title').innerText !== first", arg=first)
        assert page.inner_text("#fig-ring-allreduce-title") != first, f"프레임 {last}로 옮겨도 제목이 그대로입니다"
    finally:
        context.close()
