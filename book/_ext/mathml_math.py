"""Sphinx extension: formulas rendered to MathML while the book is built: no typesetting script.

Every ``$...$`` / ``$$...$$`` becomes a ``<math>`` element (converted by the pinned
``latex2mathml``), which every current browser lays out natively (MathML Core) and screen readers
read as math. Its glyphs come from STIX Two Math (shipped inside the pinned ``ziamath`` wheel),
cut down after the build to the characters the site's formulas use: about 25 KB for the whole book,
instead of ~0.8 MB of MathJax on every page. Formulas wider than the column scroll sideways and
are made keyboard-focusable by a few lines of script.

What Chromium's MathML does differently from LaTeX is fixed here: fences that LaTeX does not
stretch (``\\lVert``, ...) are marked ``stretchy="false"``, ``a/b`` gets no space around the slash,
operator names (``\\log``, ``\\max``) get TeX's spacing, and constructs that do not render correctly
(``\\underbrace``/``\\overbrace``: Chromium misplaces
stretched horizontal braces; ``mathvariant`` styles such as ``\\boldsymbol``: ignored by MathML
Core) are build warnings, so ``-W`` stops the build instead of shipping a wrong formula.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

import font_subset
from docutils import nodes
from sphinx.application import Sphinx
from sphinx.locale import _  # noqa: PLC2701  (Sphinx's documented translation function)
from sphinx.util import logging
from sphinx.util.math import get_node_equation_number

logger = logging.getLogger(__name__)

FONT_FILE = "fonts/ddp-math.woff2"
MATH_CSS = "math.css"
MATH_JS = "math-scroll.js"
# A formula wider than the column (common at phone width) scrolls sideways; like the theme does for
# code blocks, such a formula gets tabindex=0 so keyboard users can scroll it too (WCAG 2.1.1).
_SCROLL_JS = """document.addEventListener("DOMContentLoaded", () => {
  const mark = () => document.querySelectorAll("div.math > math").forEach(m => {
    if (m.scrollWidth > m.clientWidth + 1) m.tabIndex = 0;
    else m.removeAttribute("tabindex");
  });
  mark();
  document.fonts.ready.then(mark);
  let timer = null;
  window.addEventListener("resize", () => { clearTimeout(timer); timer = setTimeout(mark, 200); });
});
"""
# Fences LaTeX draws at their normal size unless \left/\right or \big ask otherwise.
_FIXED_FENCE = re.compile(r"<mo>(&#x02016;|&#x02308;|&#x02309;|&#x0230A;|&#x0230B;|&#x027E8;|&#x027E9;"
                          r"|&#x0005B;|&#x0005D;|&#x0007B;|&#x0007D;|\[|\]|\{|\}|\|)</mo>")
# TeX sets a/b with no space around the slash; MathML's operator dictionary would add some.
_SLASH = re.compile(r"<mo>(?:/|&#x0002F;)</mo>")
# TeX's operator names (\\log, \\max, ...) are followed by no space before an opening parenthesis
# and by a thin space otherwise (MathML would give max a wide operator space and log none).
_NAMED_OPERATOR = re.compile(r"<(mi|mo)>(log|ln|exp|max|min|lim|sup|inf|sin|cos|tan|det|dim)</\1>"
                             r"(?=(<mo[^>]*>(?:\(|&#x00028;|\[|&#x0005B;)</mo>)?)")
_UNSUPPORTED = {
    r"\underbrace": "Chromium이 늘어난 가로 중괄호를 잘못 그립니다. 항의 이름은 수식 아래 문장으로 설명하세요.",
    r"\overbrace": "Chromium이 늘어난 가로 중괄호를 잘못 그립니다. 항의 이름은 수식 아래 문장으로 설명하세요.",
}
_MATH_ELEMENT = re.compile(r"<math\b.*?</math>", re.S)
_TEXT = re.compile(r">([^<]+)<")


class MathConversionError(ValueError):
    """A formula that cannot be shown correctly as MathML."""


def tex_to_mathml(tex: str, display: str) -> str:
    """One TeX formula as a ``<math>`` element; ``display`` is ``"inline"`` or ``"block"``."""
    import latex2mathml.converter

    for command, why in _UNSUPPORTED.items():
        if command in tex:
            raise MathConversionError(f"{command}는 쓸 수 없습니다: {why}")
    try:
        mathml = latex2mathml.converter.convert(tex, display=display)
    except Exception as error:  # latex2mathml raises its own exception types for each kind of bad TeX
        raise MathConversionError(f"TeX를 해석하지 못했습니다 ({type(error).__name__}: {error}).") from error
    unknown = [t for t in _TEXT.findall(mathml) if "\\" in html.unescape(t)]
    if unknown:
        raise MathConversionError(f"latex2mathml이 모르는 명령이 있습니다: {', '.join(unknown)}")
    styled = re.findall(r'mathvariant="(?!normal")([^"]+)"', mathml)
    if styled:
        raise MathConversionError(
            f"mathvariant={styled[0]!r}는 MathML Core(Chromium)에서 무시됩니다. \\boldsymbol 같은 글꼴 명령 대신 "
            "\\mathbf처럼 유니코드 수학 문자로 바뀌는 명령을 쓰거나 그 문자(예: 𝒙)를 직접 쓰세요.")
    mathml = _SLASH.sub('<mo lspace="0" rspace="0">/</mo>', mathml)
    mathml = _NAMED_OPERATOR.sub(
        lambda m: f'<mo lspace="0" rspace="{"0" if m.group(3) else "0.167em"}">{m.group(2)}</mo>', mathml)
    return _FIXED_FENCE.sub(r'<mo stretchy="false">\1</mo>', mathml)


def _render(self, node: nodes.Element, display: str) -> str:
    try:
        return tex_to_mathml(node.astext().strip(), display)
    except MathConversionError as error:
        logger.warning("수식을 MathML로 바꿀 수 없습니다: %s\n수식: %s", error, node.astext().strip(),
                       location=node, type="ddp", subtype="math")
        return f'<code class="math-error">{self.encode(node.astext())}</code>'


def _visit_inline(self, node: nodes.Element) -> None:
    self.body.append(self.starttag(node, "span", "", CLASS="math notranslate nohighlight"))
    self.body.append(_render(self, node, "inline") + "</span>")
    raise nodes.SkipNode


def _visit_block(self, node: nodes.Element) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math notranslate nohighlight"))
    if node.get("number"):
        self.body.append(f'<span class="eqno">({get_node_equation_number(self, node)})')
        self.add_permalink_ref(node, _("Link to this equation"))
        self.body.append("</span>")
    self.body.append(_render(self, node, "block") + "</div>\n")
    raise nodes.SkipNode


def _select_renderer(app: Sphinx, config) -> None:
    config.html_math_renderer = "mathml"


def _font_source() -> Path:
    """STIX Two Math (SIL Open Font License), package data of ``ziamath``; found without importing
    ziamath, whose import does work (and warns) that is not needed here."""
    spec = importlib.util.find_spec("ziamath")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("ziamath 패키지가 없습니다. `make book`이 requirements.txt로 설치합니다.")
    return Path(spec.submodule_search_locations[0]) / "fonts" / "STIXTwoMath-Regular.ttf"


def _stage_css(app: Sphinx) -> None:
    staging = Path(app.outdir).parent / ".mathml_static"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / MATH_CSS).write_text(
        '@font-face{font-family:"DDP Math";src:url("%s") format("woff2");font-display:swap}\n'
        'math{font-family:"DDP Math",math;font-size:1.08em}\n'
        # The theme lays div.math out as a row (number, formula) for MathJax's container; same here.
        "div.math>math{flex-grow:1;overflow-x:auto;overflow-y:hidden;padding:.25em 0}\n" % FONT_FILE,
        encoding="utf-8")
    (staging / MATH_JS).write_text(_SCROLL_JS, encoding="utf-8")
    app.config.html_static_path.append(str(staging))
    app.add_css_file(MATH_CSS)
    app.add_js_file(MATH_JS, loading_method="defer")


def _math_characters(outdir: Path) -> str:
    chars: set[str] = set()
    for page in outdir.rglob("*.html"):
        for element in _MATH_ELEMENT.findall(page.read_text(encoding="utf-8")):
            for text in _TEXT.findall(element):
                chars.update(html.unescape(text))
    return "".join(sorted(chars))


def _write_font(app: Sphinx, exception) -> None:
    """After every build (full or incremental) the font holds exactly what the pages need."""
    if exception is not None or app.builder.format != "html":
        return
    outdir = Path(app.outdir)
    font_subset.subset_to_woff2(_font_source(), outdir / "_static" / FONT_FILE, text=_math_characters(outdir))


def setup(app: Sphinx) -> dict:
    app.add_html_math_renderer("mathml", (_visit_inline, None), (_visit_block, None))
    app.connect("config-inited", _select_renderer, priority=900)
    app.connect("builder-inited", _stage_css)
    app.connect("build-finished", _write_font)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
