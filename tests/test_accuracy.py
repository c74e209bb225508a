"""The expert review's HIGH and MEDIUM findings (issue #25) never come back.

Each pattern is a sentence the review showed wrong against torch 2.13's source, in a form that
survives small rewording (markdown emphasis, code ticks and line breaks are ignored). The scan reads
the built site (prose, executed outputs, alt text) and the sources the site is built from (notebooks,
pages, the quiz bank, the strings of ``labs``), so a sentence typed anew anywhere fails here.
"""

from __future__ import annotations

import html.parser
import json
import re
from pathlib import Path

import pytest

from conftest import QUIZ_BANK

REPO = Path(__file__).resolve().parent.parent

# finding → what must not be said again (regular expressions over normalized text)
FINDINGS = {
    "H1 같은 학습률(전역 배치 조건 없이)": [r"GPU 수를 바꿔도 같은 학습률", r"GPU 수와 상관없이 같은 학습률",
                                     r"GPU 수를 바꿀 때마다 (?:\{term\})?학습률", r"학습률[^.]{0,40}그대로 쓸 수 있"],
    "M1 버퍼 브로드캐스트가 no_grad와 상관없다": [r"no_grad\(\)와 상관없이 일어납니다", r"no_grad\(\)와 상관없습니다",
                                          r"broadcast_buffers=True(?:\(기본값\))?이고"],
    "M2 페이지에 없는 DETAIL 출력을 읽기": [r"TensorShape가 \[2\]\(손실과 개수\)", r"TensorShape=\[2\]와 \[8, 4\]가 나란히",
                                     r"SequenceNumber가 같은 자리에서"],
    "M3 GPU에서 겹침이 공짜": [r"겹친 만큼 실제로 숨습니다", r"계산은 SM이, 통신은 NCCL이"],
    "M4 CPU 측정으로 언어 차이를 일반화": [r"코드의 언어가 아니라 호출 수와 겹침"],
    "M5 DataLoader 작업자 시드 조언": [r"worker_init_fn이나 generator로 작업자마다도"],
    "M6 NCCL은 짝이 안 맞으면 멈출 뿐": [r"NCCL에서는 같은 버그가 멈춤으로 나타나고"],
}


# A finding's sentence is fine with its condition stated just before it (the same global batch B).
CONDITIONS = {"H1 같은 학습률(전역 배치 조건 없이)": r"(?:전역 배치 )?\$?\s*B\s*\$?\s*가 (?:같|그대로)|B\s*가 같은 동안"}
CONDITION_WINDOW = 60


def normalize(text: str) -> str:
    """Text without markdown emphasis, code ticks and line breaks, so rewording of form does not hide a finding."""
    return re.sub(r"\s+", " ", re.sub(r"[*`]", "", text))


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)

    def handle_starttag(self, tag, attrs):
        self.parts += [value for name, value in attrs if name in ("alt", "title", "aria-label") and value]


def html_text(path: Path) -> str:
    parser = _Text()
    parser.feed(path.read_text(encoding="utf-8"))
    return " ".join(parser.parts)


def notebook_text(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells)


def sources() -> dict[str, str]:
    found = {p.relative_to(REPO).as_posix(): notebook_text(p) for p in sorted((REPO / "book").glob("*.ipynb"))}
    for pattern in ("book/*.md", "labs/**/*.py"):
        found.update({p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in sorted(REPO.glob(pattern))})
    found.update({p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in sorted(QUIZ_BANK.glob("*.yml"))})
    return found


def findings_in(texts: dict[str, str]) -> list[str]:
    """``place: finding — matched text`` for every pattern found; refuses an empty input."""
    if not texts:
        raise ValueError("검사할 글이 없습니다")
    hits = []
    for place, text in texts.items():
        flat = normalize(text)
        for finding, patterns in FINDINGS.items():
            for pattern in patterns:
                for match in re.finditer(pattern, flat):
                    before = flat[max(0, match.start() - CONDITION_WINDOW):match.start()]
                    if finding in CONDITIONS and re.search(CONDITIONS[finding], before):
                        continue
                    hits.append(f"{place}: {finding} — …{flat[max(0, match.start() - 30):match.end() + 30]}…")
    return hits


def test_sources_say_none_of_the_findings():
    texts = sources()
    assert any(k.startswith("book/quizzes/") for k in texts) and any(k.endswith(".ipynb") for k in texts)
    assert findings_in(texts) == []


def test_built_site_says_none_of_the_findings(site_root):
    pages = {p.relative_to(site_root).as_posix(): html_text(p) for p in sorted((site_root / "book").glob("*.html"))}
    assert len(pages) >= 12, f"빌드된 장이 너무 적습니다: {sorted(pages)}"
    assert findings_in(pages) == []


@pytest.mark.parametrize("finding", sorted(FINDINGS))
def test_each_finding_is_caught_in_the_form_the_review_quoted(finding):
    # 검토가 인용한 문장을 서식(굵게, 코드 따옴표, 줄바꿈)을 입혀 다시 넣으면 잡힌다
    quoted = {
        "H1 같은 학습률(전역 배치 조건 없이)": "그래서 **GPU 수를 바꿔도 같은 학습률**을 쓸 수 있습니다.",
        "M1 버퍼 브로드캐스트가 no_grad와 상관없다": "바로 그 통신이고, `no_grad()`와 상관없이\n일어납니다.",
        "M2 페이지에 없는 DETAIL 출력을 읽기": "`TensorShape`가 `[2]`(손실과 개수)와 `[8, 4]`로 다릅니다.",
        "M3 GPU에서 겹침이 공짜": "별도의 CUDA 스트림에서 통신하므로 겹친 만큼 실제로 숨습니다.",
        "M4 CPU 측정으로 언어 차이를 일반화": "코드의 언어가 아니라 **호출 수와 겹침**이기 때문입니다.",
        "M5 DataLoader 작업자 시드 조언": "`worker_init_fn`이나 `generator`로 작업자마다도 달라지게 합니다.",
        "M6 NCCL은 짝이 안 맞으면 멈출 뿐": "`NCCL`에서는 같은 버그가 멈춤으로 나타나고 watchdog이 끝낼 수 있습니다",
    }[finding]
    hits = findings_in({"quoted.md": quoted})
    assert hits and all(finding in h for h in hits)


# 검토가 인용한 다른 자리의 문장들(3.1·12.4의 합 문장, 4.2와 4장 정리, 10장 퀴즈, 10.5, 8.6)도 돌아오면 잡힌다
OTHER_FORMS = {
    "H1 같은 학습률(전역 배치 조건 없이)": [
        "합 $\\sum_i g_i$를 쓰면 그래디언트가 $N$배가 되어, GPU 수를 바꿀 때마다 {term}`학습률`(learning rate)을 다시 맞춰야 합니다.",
        "그래서 단일 GPU에서 배치 $B$에 맞춰 둔 {term}`학습률`(learning rate) $\\eta$를 그대로 쓸 수 있습니다.",
        "그래서 단일 GPU의 학습률을 그대로 쓸 수 있고, 합을 쓰면 스텝이 $N$배 커집니다."],
    "M1 버퍼 브로드캐스트가 no_grad와 상관없다": [
        "`DDP.forward`는 `broadcast_buffers=True`(기본값)이고 버퍼가 있으면 순전파 앞에서 broadcast합니다.",
        "`broadcast_buffers=True`이고 버퍼가 있으면 `DDP.forward`가 순전파 앞에서 `_sync_buffers`를 부릅니다."],
    "M2 페이지에 없는 DETAIL 출력을 읽기": [
        "두 랭크의 `SequenceNumber`가 같은 자리에서 `TensorShape`가 다릅니다."],
    "M3 GPU에서 겹침이 공짜": [
        "GPU에서는 계산은 SM이, 통신은 `NCCL`이 별도의 CUDA 스트림과 NVLink로 처리하므로 실제로 동시에 진행됩니다."],
}


@pytest.mark.parametrize("finding,sentence", [(f, s) for f, forms in OTHER_FORMS.items() for s in forms])
def test_other_quoted_forms_are_caught(finding, sentence):
    hits = findings_in({"quoted.md": sentence})
    assert hits and all(finding in h for h in hits)


def test_the_condition_clears_the_learning_rate_sentence():
    stated = "그래서 전역 배치 $B$가 그대로이면 GPU 수를 바꿔도 같은 학습률을 쓸 수 있습니다."
    assert findings_in({"ok.md": stated}) == []
    kept = ("그래서 전역 배치 $B$가 그대로인 한, 단일 GPU에서 배치 $B$에 맞춰 둔 {term}`학습률`(learning rate) $\\eta$를 "
            "GPU 수와 상관없이 그대로 쓸 수 있습니다.")
    assert findings_in({"ok.md": kept}) == []
    assert findings_in({"bad.md": "그래서 GPU 수를 바꿔도 같은 학습률을 쓸 수 있습니다."})


def test_scan_refuses_no_input():
    with pytest.raises(ValueError):
        findings_in({})
