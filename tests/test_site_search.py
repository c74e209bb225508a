"""Korean search: 그래디언트 finds pages that only say 그래디언트를, in a real browser."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))
from minibook import REPO, build, make_book  # noqa: E402
from site_server import serve  # noqa: E402

sys.path.insert(0, str(REPO / "book" / "_ext"))
from korean_search import SearchKorean, korean_terms, strip_particle  # noqa: E402

# (검색어, 그 검색어로 찾아져야 하는 페이지): 여러 페이지는 그 낱말을 조사가 붙은 꼴로만 쓴다.
REAL_SITE_PAIRS = [
    ("그래디언트", "book/intro.html"),        # 이 페이지에는 '그래디언트를'만 있다
    ("복제본", "book/intro.html"),            # '복제본은'만 있다
    ("백엔드", "book/intro.html"),            # '백엔드로'만 있다
    ("그래디언트", "book/01_structure.html"),
    ("복제본", "book/01_structure.html"),
    ("동기화", "book/01_structure.html"),
    ("브로드캐스트", "book/01_structure.html"),
    ("패딩", "book/01_structure.html"),
    ("평균", "book/01_structure.html"),
    ("미니배치", "book/glossary.html"),
    ("랭크", "book/intro.html"),
    ("DistributedDataParallel", "book/01_structure.html"),
    ("DistributedSampler", "book/01_structure.html"),
    ("NCCL", "book/intro.html"),
    ("gloo", "book/01_structure.html"),
    ("all_reduce", "book/04_allreduce.html"),
    ("버킷", "book/07_internals.html"),
    ("옵티마이저", "book/05_update.html"),
    ("버퍼", "book/02_forward.html"),
    ("훅", "book/03_backward.html"),
]


@pytest.mark.parametrize("word, stem", [
    ("그래디언트를", "그래디언트"), ("복제본은", "복제본"), ("랭크마다", "랭크"), ("버킷에서는", "버킷"),
    ("동기화가", "동기화"), ("길이", "길이"), ("평가", "평가"), ("그래디언트", "그래디언트"),
])
def test_strip_particle(word, stem):
    assert strip_particle(word) == stem


def test_index_terms_separate_particles_and_endings():
    terms = korean_terms("복제본은 그래디언트를 평균내고 동기화한다. DDP가 all_reduce로 버킷에서 보낸다")
    for expected in ("복제본", "그래디언트", "평균", "동기화", "DDP", "all_reduce", "버킷"):
        assert expected in terms, f"{expected} not in {terms}"


def _search(page, base_url: str, query: str) -> list[str]:
    """The result pages of ``query`` on the site's own search page, as a reader gets them."""
    page.goto(f"{base_url}search.html?q={query}")
    page.wait_for_selector("#search-results p.search-summary", timeout=15000)
    hrefs = page.eval_on_selector_all("#search-results ul.search li a",
                                      "els => els.map(e => e.getAttribute('href'))")
    return sorted({h.split("#")[0].split("?")[0] for h in hrefs})


@contextlib.contextmanager
def _search_page(browser, base_url: str):
    """One tab (its cache kept between queries) whose network is limited to ``base_url``."""
    context = browser.new_context()
    try:
        context.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base_url)
                      else route.abort())
        yield context.new_page()
    finally:
        context.close()


def test_browser_stemmer_matches_python(chromium):
    """The query side (JavaScript) strips particles exactly like the index side (Python)."""
    words = ["그래디언트를", "복제본은", "랭크마다", "길이", "평가", "버킷에서는", "DistributedDataParallel",
             "all_reduce", "gradients", "동기화가", "NCCL로"]
    page = chromium.new_page()
    try:
        js = SearchKorean.js_stemmer_code + "\nconst s = new Stemmer(); return WORDS.map(w => s.stemWord(w.toLowerCase()));"
        got = page.evaluate(f"(WORDS) => {{ {js} }}", words)
    finally:
        page.close()
    lang = SearchKorean({})
    assert got == [lang.stem(w.lower()) for w in words]


def test_bare_word_finds_page_with_only_inflected_forms(tmp_path, chromium):
    page = ("# 조사 시험\n\n복제본은 서로 같다. 그래디언트를 평균낸다. 랭크마다 동기화한다. "
            "버킷에서 보낸다. DDP가 all_reduce로 합친다.\n")
    book = make_book(tmp_path, {"book/intro.md": "# 소개\n\n다른 내용.\n", "book/josa.md": page})
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with serve(book / "_build" / "html") as base, _search_page(chromium, base) as page:
        for query in ("복제본", "그래디언트", "랭크", "동기화", "버킷", "DDP", "all_reduce", "그래디언트를"):
            assert "book/josa.html" in _search(page, base, query), query


def test_real_site_search_pairs(chromium, site_url):
    with _search_page(chromium, site_url) as page:
        found = {q: _search(page, site_url, q) for q in dict.fromkeys(q for q, _ in REAL_SITE_PAIRS)}
    misses = [(q, page) for q, page in REAL_SITE_PAIRS if page not in found[q]]
    assert not misses, f"검색 결과에 없는 (검색어, 페이지): {misses}"


def _passages(page, base_url: str, query: str) -> list[tuple[str, str]]:
    """(link, summary text) of every result of ``query``, once each result's summary has arrived."""
    page.goto(f"{base_url}search.html?q={query}")
    page.wait_for_selector("#search-results p.search-summary", timeout=15000)
    page.wait_for_function("() => [...document.querySelectorAll('#search-results ul.search li')]"
                           ".every(li => li.querySelector('p.context'))", timeout=15000)
    return page.eval_on_selector_all(
        "#search-results ul.search li",
        "items => items.map(li => [li.querySelector('a').getAttribute('href'), li.querySelector('p.context').textContent])")


def test_results_link_to_the_section_and_show_its_sentence(tmp_path, chromium):
    page = ("# 대목 시험\n\n첫 문단은 다른 이야기입니다.\n\n## 첫째 절\n\n여기에는 관계없는 문장만 있습니다.\n\n"
            "## 둘째 절\n\n앞 문장입니다. 버킷은 그래디언트를 묶어 한 번에 보냅니다. 뒤 문장입니다.\n")
    book = make_book(tmp_path, {"book/intro.md": "# 소개\n\n다른 내용.\n", "book/passage.md": page})
    proc = build(book)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with serve(book / "_build" / "html") as base, _search_page(chromium, base) as tab:
        results = dict(_passages(tab, base, "버킷을"))
    link = next((h for h in results if h.startswith("book/passage.html")), None)
    assert link, results
    assert "#" in link, f"절 앵커가 없는 링크: {link}"
    assert "버킷은 그래디언트를 묶어 한 번에 보냅니다." in results[link]
    assert "둘째 절" in results[link] and "앞 문장" not in results[link]


def test_real_site_results_are_passages_not_tables_of_contents(chromium, site_url):
    with _search_page(chromium, site_url) as tab:
        results = _passages(tab, site_url, "no_sync")
    chapters = [(h, s) for h, s in results if h.startswith("book/0") or h.startswith("book/1")]
    assert len(chapters) >= 3, results
    assert all("no_sync" in s.lower() for _, s in chapters), [s for _, s in chapters if "no_sync" not in s.lower()]
    assert sum("#" in h for h, _ in chapters) >= len(chapters) - 1, [h for h, _ in chapters]


@pytest.mark.parametrize("query, section", [("버킷", "7.3"), ("랭크", ""), ("멈춘 잡", "")])
def test_search_opened_from_a_file_shows_passages(chromium, site_root, query, section):
    """From file:// the browser cannot fetch the result pages; the build's passage store answers instead, and a
    section whose heading holds the word is the passage (버킷 → 7.3)."""
    page = chromium.new_page()
    try:
        results = _passages(page, site_root.as_uri() + "/", query)
    finally:
        page.close()
    assert results and all(text.strip() for _, text in results), results
    if section:
        chapter = [text for href, text in results if href.startswith("book/07_internals.html")]
        assert chapter and chapter[0].startswith(section), chapter
