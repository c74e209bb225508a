"""Cut a font down to the characters a site uses and write it as WOFF2 (fontTools + brotli).

Shared by ``mathml_math`` (STIX Two Math for the formulas) and ``offline_site`` (the Font Awesome
glyphs the theme's CSS draws). OpenType layout and the MATH table are kept, so script-size
variants and stretchy glyphs (big sums, fences) of the kept characters stay available.
"""

from __future__ import annotations

from pathlib import Path


def subset_to_woff2(source: Path, target: Path, *, text: str = "", unicodes: tuple[int, ...] = ()) -> int:
    """Write ``source`` reduced to ``text``/``unicodes`` as WOFF2 at ``target``; returns its size."""
    from fontTools import subset
    from fontTools.ttLib import TTFont

    options = subset.Options()
    options.layout_features = ["*"]
    options.flavor = "woff2"
    options.notdef_outline = True
    font = TTFont(source)
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=text, unicodes=list(unicodes))
    subsetter.subset(font)
    target.parent.mkdir(parents=True, exist_ok=True)
    font.flavor = "woff2"
    font.save(target)
    return target.stat().st_size
