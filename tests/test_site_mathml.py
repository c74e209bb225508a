"""Formulas become MathML at build time (``book/_ext/mathml_math.py``): what the converter fixes,
what it refuses, and that a refused formula stops a ``-W`` build with a Korean message."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import minibook  # noqa: E402

sys.path.insert(0, str(minibook.REPO / "book" / "_ext"))
from mathml_math import MathConversionError, tex_to_mathml  # noqa: E402


def test_inline_and_block_display():
    assert 'display="inline"' in tex_to_mathml(r"g_i", "inline")
    block = tex_to_mathml(r"g = \frac{1}{N}\sum_{i=0}^{N-1} g_i", "block")
    assert 'display="block"' in block and "<mfrac>" in block and "&#x02211;" in block


def test_norm_and_ceiling_bars_do_not_stretch_like_latex():
    mathml = tex_to_mathml(r"\lVert\sum_i g_i\rVert / \lceil S/N \rceil", "inline")
    assert mathml.count('<mo stretchy="false">&#x02016;</mo>') == 2
    for fence in ("&#x02016;", "&#x02308;", "&#x02309;"):
        assert f"<mo>{fence}</mo>" not in mathml, f"{fence}가 늘어나는 연산자로 남았습니다"


def test_slash_has_no_operator_space():
    mathml = tex_to_mathml(r"B/N", "inline")
    assert '<mo lspace="0" rspace="0">/</mo>' in mathml


def test_operator_names_are_spaced_like_tex():
    mathml = tex_to_mathml(r"\max\big(0, x\big) + \log N", "inline")
    assert '<mo lspace="0" rspace="0">max</mo>' in mathml, "max( 사이에 공간이 들어갑니다"
    assert '<mo lspace="0" rspace="0.167em">log</mo><mi>N</mi>' in mathml, "log N 사이에 얇은 공간이 없습니다"


def test_korean_text_is_kept():
    assert "<mtext>계산</mtext>" in tex_to_mathml(r"t_{\text{계산}}", "inline")


@pytest.mark.parametrize("tex, says", [
    (r"\underbrace{a+b}_{\text{합}}", "가로 중괄호"),
    (r"\boldsymbol{x}", "mathvariant"),
    (r"\nosuchcommand x", "모르는 명령"),
    (r"\frac{1}{", "해석하지 못했습니다"),
])
def test_formulas_that_would_render_wrong_are_refused(tex, says):
    with pytest.raises(MathConversionError, match=says):
        tex_to_mathml(tex, "inline")


def test_refused_formula_fails_the_build(tmp_path):
    book = minibook.make_book(tmp_path, {
        "book/intro.md": "# 시작\n\n평균은 $\\frac{1}{N}\\sum_i g_i$입니다.\n",
        "book/bad.md": "# 잘못된 수식\n\n$$\n\\underbrace{a+b}_{\\text{합}}\n$$\n",
    })
    result = minibook.build(book)
    out = result.stdout + result.stderr
    assert result.returncode != 0, "\\underbrace가 있는데 빌드가 성공했습니다."
    assert "수식을 MathML로 바꿀 수 없습니다" in out and "bad.md" in out, out[-2000:]
    intro = (book / "_build" / "html" / "book" / "intro.html").read_text(encoding="utf-8")
    assert "<math" in intro and not re.search(r"<script[^>]*mathjax", intro, re.IGNORECASE)
