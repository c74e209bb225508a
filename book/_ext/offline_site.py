"""Sphinx extension: make the built course work with the network off.

- Formulas need no typesetting script: ``mathml_math`` turns them into MathML during the build.
- plotly.js is served once from ``_static/plotly.min.js`` and added only to pages that contain a
  plotly figure: the cartesian bundle of the same plotly.js version as the pinned plotly package
  (``vendor/plotly-cartesian``, 1.5 MB instead of the full 4.8 MB; the book draws no other trace).
- sphinx-thebe (live code via a remote Binder kernel and a CDN bundle) is switched off: it
  cannot work offline, and it declares ``THEBE_JS_URL`` twice, an error on every page.
- Page weight: the theme's 1.5 MB ``fontawesome.js`` (every icon as JavaScript) is replaced by a
  few-KB stylesheet with only the icons the theme shows, drawn from the same Font Awesome path
  data; the Font Awesome web font its CSS still uses (admonition and link icons) is cut down to
  the glyphs that CSS names (152 KB -> a few KB); and Sphinx's search index (~200 KB), which the
  theme loads on every page for a search-as-you-type box this book does not turn on, is loaded
  only by ``search.html``. sphinx-design's stylesheet and tab script (~60 KB) are linked only on a
  page that draws one of its components; the book draws none today.
"""

from __future__ import annotations

import filecmp
import re
import shutil
import urllib.parse
from pathlib import Path

import font_subset
import page_rewrite
from sphinx.application import Sphinx

# The Font Awesome icons the book theme puts on its pages (navbar, buttons, theme switch, prev/next).
THEME_ICONS = ("magnifying-glass", "bars", "list", "sun", "moon", "expand", "circle-half-stroke", "arrow-up",
               "file-pdf", "file", "download", "outdent", "angle-right", "angle-left")


PLOTLY_BUNDLE = Path(__file__).resolve().parent / "vendor" / "plotly-cartesian" / "plotly-cartesian.min.js"


def _icon_css() -> str:
    """CSS masks for the theme's icons, from the solid set inside the theme's own fontawesome.js."""
    import pydata_sphinx_theme

    source = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "scripts"
    text = (source / "fontawesome.js").read_text(encoding="utf-8")
    end = text.index('d("fas",p)')
    solid = text[text.rindex('d("far",p)', 0, end):end]
    rules = ['.fa-solid::before,.fas::before{content:"";display:inline-block;height:1em;vertical-align:-.125em;'
             "background-color:currentColor;-webkit-mask:var(--icon) no-repeat center/contain;"
             "mask:var(--icon) no-repeat center/contain}"]
    for name in THEME_ICONS:
        quoted = re.escape(name)
        found = re.search(
            rf'(?:"{quoted}"|(?<![\w"-]){quoted}):\[(\d+),(\d+),\[[^\]]*\],"[0-9a-f]+","([^"]+)"', solid)
        assert found is not None, f"the theme's icon {name!r} is in its solid icon set"
        width, height, path = found.groups()
        svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}'><path d='{path}'/></svg>"
        rules.append(f'.fa-{name}::before{{--icon:url("data:image/svg+xml,{urllib.parse.quote(svg)}");'
                     f"width:{int(width) / int(height):.4f}em}}")
    return "\n".join(rules) + "\n"


def _stage_vendor_files(app: Sphinx) -> None:
    """Put plotly.js and the icon sheet into a folder that becomes part of ``html_static_path``."""
    staging = Path(app.outdir).parent / ".offline_static"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "theme-icons.css").write_text(_icon_css(), encoding="utf-8")
    app.add_css_file("theme-icons.css")
    plotly_dst = staging / "plotly.min.js"
    if not plotly_dst.exists() or not filecmp.cmp(PLOTLY_BUNDLE, plotly_dst, shallow=False):
        shutil.copy2(PLOTLY_BUNDLE, plotly_dst)
    app.config.html_static_path.append(str(staging))


def _drop_thebe(app: Sphinx, config) -> None:
    for listeners in app.events.listeners.values():
        listeners[:] = [lst for lst in listeners if not getattr(lst.handler, "__module__", "").startswith("sphinx_thebe")]


_SPHINX_DESIGN = re.compile(r"sphinx-design|design-tabs")


def uses_sphinx_design(body: str) -> bool:
    """Whether a page body draws a sphinx-design component (its elements carry ``sd-`` classes)."""
    return re.search(r'class="(?:[^"]* )?sd-', body) is not None


def _page_assets(app: Sphinx, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe registers its stylesheet at setup time; the file is never copied once it is off.
    css = context.get("css_files")
    if css is not None:
        css[:] = [c for c in css if "thebe" not in getattr(c, "filename", str(c))]
    if not uses_sphinx_design(context.get("body", "")):
        # sphinx-design (tabs, cards, grids) ships 53 KiB of CSS and a tab script to every page; only a page
        # that draws one of its components (class "sd-…") needs them
        for key in ("css_files", "script_files"):
            if context.get(key) is not None:
                context[key][:] = [f for f in context[key] if not _SPHINX_DESIGN.search(getattr(f, "filename", None) or "")]
    if "plotly-graph-div" in context.get("body", ""):
        # 1.5 MB that must not hold up the first paint: deferred, and every figure's inline script waits for it
        # (:func:`defer_figures` runs them at DOMContentLoaded, which comes after deferred scripts have run).
        app.add_js_file("plotly.min.js", priority=200, loading_method="defer")


# plotly's figure HTML: the figure's div, then an inline script that calls Plotly.newPlot at once.
FIGURE_SCRIPT = re.compile(r'(<div id="[^"]+" class="plotly-graph-div"[^>]*></div>\s*<script[^>]*>)(.*?)(</script>)',
                            flags=re.S)
WAIT_FOR_PAGE = 'document.addEventListener("DOMContentLoaded", function () {'


def defer_figures(text: str) -> str:
    """Each figure's inline script run at DOMContentLoaded, after the deferred plotly.min.js (idempotent)."""
    def wait(match: re.Match) -> str:
        body = match[2]
        return match[0] if body.lstrip().startswith(WAIT_FOR_PAGE) else f"{match[1]}{WAIT_FOR_PAGE}{body}}});{match[3]}"

    return FIGURE_SCRIPT.sub(wait, text)


_FONTAWESOME_TAG = re.compile(r'\s*<script defer src="[^"]*scripts/fontawesome\.js[^"]*"></script>')
# pydata-sphinx-theme's layout.html loads these on every page for its search-as-you-type box.
_SEARCH_TAGS = re.compile(r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>')
_FONT_AWESOME_SOLID = "vendor/fontawesome/webfonts/fa-solid-900"
_CSS_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_PRIVATE_USE = re.compile(r"([\ue000-\uf8ff])|\\(f[0-9a-fA-F]{3})")


def _lighten_pages(app: Sphinx) -> None:
    """The theme's template hard-codes its fontawesome.js tag (theme-icons.css replaces it) and the
    search scripts (only search.html needs them while search-as-you-type is off); plotly figures wait for
    the deferred plotly.min.js."""
    keep_search = bool(app.config.html_theme_options.get("search_as_you_type"))
    search_page = Path(app.outdir) / "search.html"

    def lighten(page: Path, text: str) -> str:
        lean = defer_figures(_FONTAWESOME_TAG.sub("", text))
        return lean if keep_search or page == search_page else _SEARCH_TAGS.sub("", lean)

    page_rewrite.rewrite_pages(Path(app.outdir), lighten)


def _theme_icon_codepoints(static: Path) -> tuple[int, ...]:
    """The Font Awesome code points the theme stylesheets draw with (private use area characters in
    ``--pst-icon-*`` variables and ``content:``), leaving out Font Awesome's own ``.fa-*`` class list,
    whose icons theme-icons.css draws as masks."""
    codes: set[int] = set()
    for css in static.glob("**/*.css"):
        for selectors, body in _CSS_RULE.findall(css.read_text(encoding="utf-8")):
            if all(s.strip().startswith(".fa-") for s in selectors.split(",")):
                continue
            for char, escaped in _PRIVATE_USE.findall(body):
                codes.add(ord(char) if char else int(escaped, 16))
    return tuple(sorted(codes))


def _subset_icon_font(app: Sphinx) -> None:
    static = Path(app.outdir) / "_static"
    original = static / f"{_FONT_AWESOME_SOLID}.ttf"  # the theme ships the same glyphs as .ttf and .woff2
    if original.is_file():
        font_subset.subset_to_woff2(original, static / f"{_FONT_AWESOME_SOLID}.woff2",
                                    unicodes=_theme_icon_codepoints(static))


def _finish_site(app: Sphinx, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    _lighten_pages(app)
    _subset_icon_font(app)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _drop_thebe, priority=900)
    app.connect("builder-inited", _stage_vendor_files)
    app.connect("html-page-context", _page_assets)
    app.connect("build-finished", _finish_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
