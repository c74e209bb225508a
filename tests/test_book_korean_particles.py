"""Korean particles agree with the noun before them, on every built page and in the sources.

A particle (조사) after a noun depends on whether the noun's last syllable has a final consonant
(받침): 청크를 but 샤드와, 랭크 1이 (일) but 랭크 2가 (이). Term swaps (조각 → 청크) and numbers
formatted from a run leave the wrong one behind; this finds them.
"""

from __future__ import annotations

import re

import pytest
from test_book_accuracy import html_text, sources

PAIRS = {"이": "가", "은": "는", "을": "를", "과": "와"}
WITH_BATCHIM = set(PAIRS)  # 받침 뒤에 오는 꼴
# 숫자를 읽을 때 마지막 자리의 받침: 0 영, 1 일, 3 삼, 6 육, 7 칠, 8 팔은 있고 2 이, 4 사, 5 오, 9 구는 없다
DIGIT_BATCHIM = set("013678")
NOUNS = ("청크", "샤드", "버킷", "랭크", "노드", "스텝", "모델", "파라미터", "텐서", "프로세스", "그래디언트", "복제본")
_NOUN_PARTICLE = re.compile(rf"({'|'.join(NOUNS)})(이|가|은|는|을|를|과|와)(?=[\s.,)\"'])")
_RANK_NUMBER = re.compile(r"랭크 (\d+)(이|가|은|는|을|를|과|와)(?=[\s.,)\"'])")
# A number read in Korean (6,000,018 → …팔): not a model name's (ZeRO-3, 제로 쓰리) nor a fraction's (1/4, 사분의 일)
_NUMBER = re.compile(r"(?<![\w.\-/])(\d[\d,]*)(이|가|은|는|을|를|과|와)(?=[\s.,)\"'])")


def has_batchim(syllable: str) -> bool:
    return (ord(syllable) - 0xAC00) % 28 != 0


def wrong_particles(text: str) -> list[str]:
    """Every noun + particle whose particle does not fit the noun's last sound."""
    bad = [m.group(0) for m in _NOUN_PARTICLE.finditer(text)
           if has_batchim(m.group(1)[-1]) != (m.group(2) in WITH_BATCHIM)]
    numbers = {m.start(1): m.group(0) for pattern in (_NUMBER, _RANK_NUMBER) for m in pattern.finditer(text)
               if (m.group(1)[-1] in DIGIT_BATCHIM) != (m.group(2) in WITH_BATCHIM)}  # 랭크 N은 한 번만
    bad += [numbers[at] for at in sorted(numbers)]
    return bad


@pytest.mark.parametrize("text, wrong", [
    ("완성된 청크을 돌립니다. 보내는 청크은 작다.", ["청크을", "청크은"]),
    ("파라미터 샤드과 같다. 샤드을 더하면", ["샤드과", "샤드을"]),
    ("랭크 1가 먼저, 랭크 2이 나중에", ["랭크 1가", "랭크 2이"]),
    ("청크를 보내고 샤드와 같으며 랭크 1이 먼저, 랭크 2가 나중, 랭크 10은 끝", []),
    ("원소 6,000,018와 합친다. 4,224가 남고 12,672을 보낸다", ["6,000,018와", "12,672을"]),
    ("ZeRO-3는 나누고 손실에 1/4을 곱하며 스텝 3은 끝", []),
])
def test_the_rule_finds_exactly_the_wrong_particles(text, wrong):
    assert wrong_particles(text) == wrong


def test_sources_have_no_wrong_particle():
    found = {place: wrong_particles(text) for place, text in sources().items()}
    assert {p: w for p, w in found.items() if w} == {}


def test_built_pages_have_no_wrong_particle(site_root):
    pages = sorted((site_root / "book").glob("*.html"))
    assert len(pages) >= 12
    found = {p.name: wrong_particles(html_text(p)) for p in pages}
    assert {p: w for p, w in found.items() if w} == {}
