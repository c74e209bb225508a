"""Sphinx extension: make the built course work with the network off.

- MathJax 3 (``tex-svg``, which needs no web fonts) is served from ``_static/mathjax/``,
  taken from the pinned ``django-static-mathjax`` wheel instead of a CDN.
- plotly.js is served once from ``_static/plotly.min.js`` (taken from the pinned plotly
  package) and added only to pages that contain a plotly figure.
- sphinx-thebe (live code via a remote Binder kernel and a CDN bundle) is switched off: it
  cannot work offline, and it declares ``THEBE_JS_URL`` twice, an error on every page.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.application import Sphinx

MATHJAX_SKIP_PREFIXES = ("tex-chtml", "tex-mml", "mml-", "tex-svg-full", "node-main")


def _mathjax_source() -> Path:
    import mathjax  # the django-static-mathjax wheel ships MathJax 3.2.2 as package data

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _plotly_source() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


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
    plotly_dst = staging / "plotly.min.js"
    if not plotly_dst.exists():
        staging.mkdir(parents=True, exist_ok=True)
        shutil.copy2(_plotly_source(), plotly_dst)
    app.config.html_static_path.append(str(staging))


def _drop_thebe(app: Sphinx, config) -> None:
    for listeners in app.events.listeners.values():
        listeners[:] = [lst for lst in listeners if not getattr(lst.handler, "__module__", "").startswith("sphinx_thebe")]
    config.mathjax_path = "mathjax/tex-svg.js"


def _page_assets(app: Sphinx, pagename, templatename, context, doctree) -> None:
    # sphinx-thebe registers its stylesheet at setup time; the file is never copied once it is off.
    css = context.get("css_files")
    if css is not None:
        css[:] = [c for c in css if "thebe" not in getattr(c, "filename", str(c))]
    if "plotly-graph-div" in context.get("body", ""):
        # Plotly must exist before the figures' inline scripts run: a normal (blocking) script.
        app.add_js_file("plotly.min.js", priority=200)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _drop_thebe, priority=900)
    app.connect("builder-inited", _stage_vendor_files)
    app.connect("html-page-context", _page_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
