"""Sphinx extension: a Korean search language, so that 그래디언트 finds 그래디언트를.

Sphinx ships no Korean search language; with ``language: ko`` it indexes with the English
splitter, which keeps particles (조사) glued to words. This one:

- indexes each 어절 (space-separated word) by its stem from the Kiwi morphological analyzer
  (the part before the first particle, ending or 하다/되다 suffix), by its content morphemes,
  and by the word itself;
- applies the same particle-stripping rule (:func:`strip_particle`) to every indexed word in
  Python and to every query word in the browser (the JavaScript ``Stemmer`` below is generated
  from the same particle list), so both sides agree;
- leaves English words to Sphinx's usual Porter stemmer (all_reduce, NCCL, DistributedDataParallel).
"""

from __future__ import annotations

import functools
import html
import json
import re
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.search.en import SearchEnglish, js_porter_stemmer

# 긴 것부터: 가장 긴 조사를 먼저 뗀다.
PARTICLES = tuple(sorted({
    "에서는", "에게서", "으로는", "으로써", "으로서", "이라는", "이라고", "에서도", "까지는", "부터는",
    "에서", "에게", "한테", "으로", "로는", "로써", "로서", "까지", "부터", "처럼", "보다", "마다",
    "조차", "이나", "라는", "라고", "이고", "이며", "와의", "과의", "에는", "에도", "에만", "만큼",
    "은", "는", "이", "가", "을", "를", "의", "에", "도", "만", "와", "과", "로", "나",
}, key=lambda p: (-len(p), p)))
MIN_STEM = 2  # 조사를 떼고 남는 부분이 두 글자 이상일 때만 뗀다 (길이 → 길 같은 오류 방지)
_HANGUL = re.compile(r"[\uac00-\ud7a3]")
_HANGUL_RUN = re.compile(r"[\uac00-\ud7a3]+")
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")
# 어간이 끝나는 곳: 조사(J), 어미(E), 용언을 만드는 접미사(하다/되다), 서술격 조사(이다), 보조 용언
_STEM_END = ("J", "E", "XSV", "XSA", "VCP", "VX")
_CONTENT = ("NNG", "NNP", "NR", "NP", "XR", "SL", "SH")


def strip_particle(word: str) -> str:
    """Remove one trailing particle from a Hangul word (the same rule runs in the browser)."""
    for particle in PARTICLES:
        if word.endswith(particle) and len(word) - len(particle) >= MIN_STEM:
            return word[: -len(particle)]
    return word


@functools.lru_cache(maxsize=1)
def _kiwi():
    from kiwipiepy import Kiwi

    # 오타 교정 사전과 여러 어절 사전은 쓰지 않는다: 색인은 쓰인 그대로의 어절에서 만들고, 두 사전을 읽는 데
    # 빌드마다 몇 초가 든다. 이 책 전체 본문에서 두 설정의 색인 낱말이 똑같음을 확인했다(kiwipiepy 0.24).
    return Kiwi(load_typo_dict=False, load_multi_dict=False)


def korean_terms(text: str) -> list[str]:
    """Index terms of a text: Kiwi stems and content morphemes of each 어절, and the 어절 itself."""
    terms: list[str] = []
    tokens = _kiwi().tokenize(text)
    for match in re.finditer(r"\S+", text):
        chunk, start, end = match.group(), match.start(), match.end()
        terms += _ASCII_WORD.findall(chunk)
        if not _HANGUL.search(chunk):
            continue
        terms += [run for run in _HANGUL_RUN.findall(chunk) if run not in PARTICLES]
        inside = [t for t in tokens if start <= t.start < end]
        stem_end = next((t.start for t in inside if t.tag.startswith(_STEM_END)), end)
        stem = "".join(_HANGUL_RUN.findall(text[start:stem_end]))
        if stem:
            terms.append(stem)
        terms += [t.form for t in inside if t.tag in _CONTENT and _HANGUL.search(t.form)]
    return terms


_JS_KOREAN = """
var PorterStemmer = %(porter)s;
var KO_PARTICLES = %(particles)s;
var KO_MIN_STEM = %(min_stem)d;
var Stemmer = function() {
  var porter = new PorterStemmer();
  this.stemWord = function(word) {
    if (/[\\uac00-\\ud7a3]/.test(word)) {
      for (var i = 0; i < KO_PARTICLES.length; i++) {
        var p = KO_PARTICLES[i];
        if (word.length - p.length >= KO_MIN_STEM && word.slice(-p.length) === p) {
          return word.slice(0, -p.length);
        }
      }
      return word;
    }
    return porter.stemWord(word);
  };
};
"""


def _porter_constructor() -> str:
    # Sphinx's English stemmer is written as `var Stemmer = function() {...}`; reuse its body.
    body = js_porter_stemmer.split("var Stemmer = ", 1)[1].rstrip().rstrip(";")
    return body


class SearchKorean(SearchEnglish):
    lang = "ko"
    language_name = "Korean"
    js_stemmer_code = _JS_KOREAN % {
        "porter": _porter_constructor(),
        "particles": json.dumps(PARTICLES, ensure_ascii=False),
        "min_stem": MIN_STEM,
    }

    def split(self, input: str) -> list[str]:
        return korean_terms(input)

    def stem(self, word: str) -> str:
        if _HANGUL.search(word):
            return strip_particle(word)
        return super().stem(word)

    def word_filter(self, word: str) -> bool:
        return bool(word) and word not in self.stopwords and word not in PARTICLES


# 검색 결과를 페이지가 아니라 대목으로: 결과마다 검색어가 처음 나오는 본문 블록(문단, 목록 항목, 표 칸)을 찾아
# 그 블록의 문장을 요약으로 보이고, 링크를 그 블록이 든 절(section)의 앵커로 바꾼다. 코드·접힌 확인 표·목차와
# 장 첫머리의 "이 장의 핵심" 상자(절 밖이라 앵커가 없고, 같은 말을 본문의 절이 풀어 쓴다)는 뺀다.
# search.html은 searchtools.js를 이 스크립트 뒤에 싣는다: 덮어쓰기는 문서를 다 읽은 뒤(그때는 Search가 있다).
# What a search passage is never taken from (both in the browser and in the file:// store below).
SKIP = (".headerlink, script, style, .toctree-wrapper, nav, .cell_input, .cell_output, .ddp-quiz, .chapter-key, "
        "details.lab-checks-box, .lab-table, .prediction-body, svg, .plotly-graph-div")
_JS_PASSAGES = """
// file://에서는 브라우저가 fetch로 다른 페이지를 읽지 못한다: 빌드가 쓴 본문(search_passages.js)을 대신 준다
if (location.protocol === "file:" && window.DDP_SEARCH_PAGES) {
  var fetchOverNetwork = window.fetch;
  window.fetch = function (url, options) {
    var path = decodeURI(new URL(url, location.href).pathname);
    for (var page in window.DDP_SEARCH_PAGES) {
      if (path.endsWith("/" + page)) return Promise.resolve(new Response(window.DDP_SEARCH_PAGES[page]));
    }
    return fetchOverNetwork(url, options);
  };
}
document.addEventListener("DOMContentLoaded", function () {
  var SKIP = "__SKIP__";
  var BLOCKS = "p, li, dd, td, th, .admonition-title";
  function sentenceWith(text, term) {
    var parts = text.split(/(?<=[.!?])\\s+/), i;
    for (i = 0; i < parts.length; i++) { if (parts[i].toLowerCase().indexOf(term) >= 0) return parts[i]; }
    return text;
  }
  function clip(text, term) {
    var at = text.toLowerCase().indexOf(term), start = Math.max(0, at - 90);
    var out = text.slice(start, start + 220).trim();
    return (start > 0 ? "…" : "") + out + (start + 220 < text.length ? "…" : "");
  }
  Search.makeSearchSummary = function (htmlText, keywords, anchor) {
    var summary = document.createElement("p");
    summary.classList.add("context");
    var doc = new DOMParser().parseFromString(htmlText, "text/html");
    var main = doc.querySelector('[role="main"]');
    if (!main) return summary;
    main.querySelectorAll(SKIP).forEach(function (el) { el.remove(); });
    var terms = [...keywords].map(function (k) { return k.toLowerCase(); }).filter(Boolean);
    var blocks = main.querySelectorAll(BLOCKS), found = null, term = null, i, j;
    // 제목에 검색어가 있는 절이 있으면 그 절의 문장부터 (버킷 → 7.3 버킷 절)
    main.querySelectorAll("section[id] > h2, section[id] > h3").forEach(function (h) {
      var title = h.textContent.toLowerCase(), inner;
      for (j = 0; j < terms.length && !found; j++) {
        if (title.indexOf(terms[j]) < 0) continue;
        inner = [...h.parentElement.querySelectorAll(BLOCKS)].find(function (b) {
          return b.textContent.toLowerCase().indexOf(terms[j]) >= 0; });
        if (inner) { found = inner; term = terms[j]; }
      }
    });
    for (i = 0; i < blocks.length && !found; i++) {
      var text = blocks[i].textContent.replace(/\\s+/g, " ").trim(), lower = text.toLowerCase();
      for (j = 0; j < terms.length; j++) { if (lower.indexOf(terms[j]) >= 0) { found = blocks[i]; term = terms[j]; break; } }
    }
    if (!found) return summary;
    var text = found.textContent.replace(/\\s+/g, " ").trim();
    summary.textContent = clip(sentenceWith(text, term), term);
    var section = found.closest("section[id]");
    var heading = section && section.querySelector("h1, h2, h3, h4");
    if (section && heading && heading.tagName !== "H1") {
      summary.dataset.anchor = section.id;
      var label = document.createElement("span");
      label.className = "search-passage-section";
      label.textContent = heading.textContent.replace(/#$/, "").trim() + " — ";
      summary.prepend(label);
    }
    // 요약이 결과 항목에 붙은 뒤, 결과 링크를 그 절로 보낸다
    setTimeout(function () {
      var item = summary.parentElement, link = item && item.querySelector("a");
      var href = link && link.getAttribute("href");
      if (href && summary.dataset.anchor && href.indexOf("#") < 0) link.setAttribute("href", href + "#" + summary.dataset.anchor);
    }, 0);
    return summary;
  };
});
"""


PASSAGES_JS = "search_passages.js"
_KEPT = ("h1", "h2", "h3", "h4", "p", "li", "dd", "td", "th")


def page_passages(html_text: str) -> str:
    """The part of a page the search summary reads: its main column's sections, headings and text blocks
    (no scripts, figures, code or outputs), as small HTML."""
    from bs4 import BeautifulSoup

    main = BeautifulSoup(html_text, "html.parser").select_one('[role="main"]')
    if main is None:
        return ""
    for el in main.select(SKIP):
        el.decompose()

    def block(tag) -> str:
        text = re.sub(r"\s+", " ", tag.get_text()).strip()
        return f"<{tag.name}>{html.escape(text)}</{tag.name}>" if text else ""

    def walk(node) -> str:
        out = []
        for child in node.find_all(True, recursive=False):
            if child.name == "section":
                out.append(f'<section id="{html.escape(child.get("id", ""))}">{walk(child)}</section>')
            elif child.name in _KEPT:
                out.append(block(child))
            else:  # containers: admonitions, tables, figures' captions, cells
                out.append(walk(child))
        return "".join(out)

    return f'<div role="main">{walk(main)}</div>'


def _write_passages(app: Sphinx, exception) -> None:
    """``_static/search_passages.js``: every page's passages, for the search page opened from file://."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    pages = {}
    for page in sorted(out.rglob("*.html")):
        rel = page.relative_to(out).as_posix()
        if rel.startswith("_") or rel in ("search.html", "genindex.html"):
            continue
        passages = page_passages(page.read_text(encoding="utf-8"))
        if passages:
            pages[rel] = passages
    (out / "_static" / PASSAGES_JS).write_text(
        "window.DDP_SEARCH_PAGES = " + json.dumps(pages, ensure_ascii=False) + ";\n", encoding="utf-8")


def _search_page_script(app: Sphinx, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file(PASSAGES_JS, priority=890)
        app.add_js_file(None, body=_JS_PASSAGES.replace("__SKIP__", SKIP), priority=900)


def setup(app: Sphinx) -> dict:
    app.add_search_language(SearchKorean)
    app.connect("html-page-context", _search_page_script)
    app.connect("build-finished", _write_passages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
