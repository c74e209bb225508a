"""Sphinx extension: make the built course work with the network off.

- MathJax 3 (``tex-svg``, which needs no web fonts) is served from ``_static/mathjax/``,
  taken from the pinned ``django-static-mathjax`` wheel instead of a CDN.
- plotly.js is served once from ``_static/plotly.min.js`` (taken from the pinned plotly
  package) and added only to pages that contain a plotly figure.
- sphinx-thebe (live code via a remote Binder kernel and a CDN bundle) is switched off: it
  cannot work offline, and it declares ``THEBE_JS_URL`` twice, an error on every page.
- Page weight: MathJax is loaded as components (``startup.js`` + TeX input + CHTML output, fonts
  fetched only for the glyphs a page uses, ~0.8 MB) instead of ``tex-svg.js`` (2 MB), and the
  theme's 1.5 MB ``fontawesome.js`` (every icon as JavaScript) is replaced by a few-KB stylesheet
  with only the icons the theme shows, drawn from the same Font Awesome path data.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
from pathlib import Path

from sphinx.application import Sphinx

MATHJAX_SKIP_PREFIXES = ("tex-chtml", "tex-mml", "mml-", "tex-svg", "node-main")
MATHJAX_COMPONENTS = ["input/tex", "output/chtml"]
# The Font Awesome icons the book theme puts on its pages (navbar, buttons, theme switch, prev/next).
THEME_ICONS = ("magnifying-glass", "bars", "list", "sun", "moon", "expand", "circle-half-stroke", "arrow-up",
               "file-pdf", "file", "download", "outdent", "angle-right", "angle-left")


def _mathjax_source() -> Path:
    import mathjax  # the django-static-mathjax wheel ships MathJax 3.2.2 as package data

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _plotly_source() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


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
        width, height, path = re.search(
            rf'(?:"{quoted}"|(?<![\w"-]){quoted}):\[(\d+),(\d+),\[[^\]]*\],"[0-9a-f]+","([^"]+)"', solid).groups()
        svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}'><path d='{path}'/></svg>"
        rules.append(f'.fa-{name}::before{{--icon:url("data:image/svg+xml,{urllib.parse.quote(svg)}");'
                     f"width:{int(width) / int(height):.4f}em}}")
    return "\n".join(rules) + "\n"


def _stage_vendor_files(app: Sphinx) -> None:
    """Copy MathJax and plotly.js into a folder that becomes part of ``html_static_path``."""
    staging = Path(app.outdir).parent / ".offline_static"
    mathjax_dst = staging / "mathjax"
    if not (mathjax_dst / "tex-svg.js").exists():
        src = _mathjax_source()
        shutil.copytree(
            src, mathjax_dst, dirs_exist_ok=True,
            ignore=lambda d, names: [n for n in names if Path(d) == src and n.startswith(MATHJAX_SKIP_PREFIXES)],
        )
    (staging / "theme-icons.css").write_text(_icon_css(), encoding="utf-8")
    app.add_css_file("theme-icons.css")
    plotly_dst = staging / "plotly.min.js"
    if not plotly_dst.exists():
        staging.mkdir(parents=True, exist_ok=True)
        shutil.copy2(_plotly_source(), plotly_dst)
    app.config.html_static_path.append(str(staging))


def _drop_thebe(app: Sphinx, config) -> None:
    for listeners in app.events.listeners.values():
        listeners[:] = [lst for lst in listeners if not getattr(lst.handler, "__module__", "").startswith("sphinx_thebe")]
    config.mathjax_path = "mathjax/startup.js"
    config.mathjax3_config = {**(config.mathjax3_config or {}), "loader": {"load": MATHJAX_COMPONENTS}}


def _page_assets(app: Sphinx, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe registers its stylesheet at setup time; the file is never copied once it is off.
    css = context.get("css_files")
    if css is not None:
        css[:] = [c for c in css if "thebe" not in getattr(c, "filename", str(c))]
    if "plotly-graph-div" in context.get("body", ""):
        # Plotly must exist before the figures' inline scripts run: a normal (blocking) script.
        app.add_js_file("plotly.min.js", priority=200)


_FONTAWESOME_TAG = re.compile(r'\s*<script defer src="[^"]*scripts/fontawesome\.js[^"]*"></script>')


def _drop_fontawesome_js(app: Sphinx, exception) -> None:
    """The theme's template hard-codes its fontawesome.js tag; theme-icons.css replaces it."""
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        lean = _FONTAWESOME_TAG.sub("", text)
        if lean != text:
            page.write_text(lean, encoding="utf-8")


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _drop_thebe, priority=900)
    app.connect("builder-inited", _stage_vendor_files)
    app.connect("html-page-context", _page_assets)
    app.connect("build-finished", _drop_fontawesome_js)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
