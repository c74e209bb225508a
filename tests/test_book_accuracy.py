"""The expert reviews' findings (issue #25, and issue #36's second round) never come back.

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
    # 2차 검토 (issue #36)
    "R-H1 GradScaler 옆의 클리핑에 unscale_가 없다": [
        r"그래디언트를 만지는 일\(클리핑, GradScaler의 inf 검사와 step\)은 모두 동기화된 역전파 뒤에 합니다",
        r"DDP에서는 동기화된 역전파 뒤, 즉 평균 그래디언트에 합니다"],
    "R-H2 랭크 0만 저장(DDP의 조건 없이)": [r"랭크 0만 씁니다\. 복제본이 모두 같으므로",
                                        r"체크포인트[는를] 랭크 0 하나만 저장하면 충분", r"DDP에서는 랭크 0만 저장합니다"],
    "R-M2 같은 줄이면 짝이 맞다": [r"같은 줄의 같은 집합 통신에서 기다린다면 (?:코드의 )?짝은 맞",
                               r"네트워크를 의심하는 것은 모든 랭크가 같은 줄"],
    "R-M3 backward가 통신 뒤에 돌아온다(백엔드 없이)": [r"loss\.backward\(\)는 모든 버킷의 통신이 끝난 뒤에 돌아옵니다"],
    "R-M5 DDP 버킷 사본을 뺀 16바이트": [r"파라미터 4바이트와 그래디언트 4바이트를 더하면 파라미터 하나에 16바이트",
                                     r"약 16 GB: 파라미터 하나에 16바이트가 든다"],
    "R-M6 ZeRO-1의 추가 통신을 ZeRO의 것으로": [r"ZeRO-1의 대가는 통신입니다",
                                          r"결과는 DDP와 비트 단위로 같고, 스텝마다 파라미터 바이트만큼 더 보냅니다"],
    "R-M7 B를 고정하면 같은 학습(BatchNorm 조건 없이)": [r"같은 \$\\eta\$로 (?:한 프로세스와 )?같은 학습이 됩니다"],
    "R-M8 워밍업은 한계를 옮기지 않는다": [r"워밍업은 초기의 불안정을 줄일 뿐 그 한계를 옮기지 않습니다"],
    "R-M9 bf16 훅의 거절을 gloo 탓으로": [r"bf16_compress_hook은 torch 2\.13의 gloo에 등록하는 순간",
                                     r"bf16 압축은 GPU\(NCCL\)에서만", r"gloo에서는 register_comm_hook이 바로 TypeError"],
    "R-L7 FSDP2 샤드는 한 행씩만 다르다": [r"랭크마다 최대 한 행씩 차이가 날 수"],
    "R-L9 모양 확인은 All-Gather 하나": [r"파라미터 모양이 랭크끼리 같은지 확인하고\(All-Gather\)"],
    "R-FSDP 층의 클래스로 나눈다": [r"Linear와 Embedding의 가중치를 평평하게 펴고"],
    "R-M1 DETAIL의 상대 지문을 상대의 연산으로 읽기": [r"상대가 GATHER처럼 내 코드에 없는 연산으로 보이면",
                                            r"상대 랭크가 같은 순간 부르는 집합 통신"],
    "R-M4 build-nanogpt#30을 결과가 맞는 변형에": [r"build-nanogpt#30\(순전파도 동기화 플래그를 켜야 한다는 수정\)과"],
}


# A finding's sentence is fine with its condition stated just before it (the same global batch B), or (AFTER) with
# what it lacked said right after it (unscale_ next to clipping, BatchNorm next to "the same training").
CONDITIONS = {"H1 같은 학습률(전역 배치 조건 없이)": r"(?:전역 배치 )?\$?\s*B\s*\$?\s*가 (?:같|그대로)|B\s*가 같은 동안",
              "R-H2 랭크 0만 저장(DDP의 조건 없이)": r"복제본이 같을 때",
              "R-M3 backward가 통신 뒤에 돌아온다(백엔드 없이)": r"gloo"}
CONDITION_WINDOW = 60
AFTER = {"R-H1 GradScaler 옆의 클리핑에 unscale_가 없다": r"unscale_",
         "R-M7 B를 고정하면 같은 학습(BatchNorm 조건 없이)": r"BatchNorm"}
AFTER_WINDOW = 200


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
                    after = flat[match.end():match.end() + AFTER_WINDOW]
                    if finding in AFTER and re.search(AFTER[finding], after):
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
        "R-H1 GradScaler 옆의 클리핑에 unscale_가 없다": "DDP에서 그래디언트를 만지는 일(클리핑, `GradScaler`의 inf 검사와 "
                                                   "`step`)은 모두 동기화된 역전파 뒤에 합니다. 그 전의 `.grad`는 로컬 값입니다.",
        "R-H2 랭크 0만 저장(DDP의 조건 없이)": "- **랭크 0만 씁니다.** 복제본이 모두 같으므로 한 번이면 충분합니다.",
        "R-M2 같은 줄이면 짝이 맞다": "모든 랭크가 같은 줄의 같은 집합 통신에서 기다린다면 코드의 짝은 맞습니다.",
        "R-M3 backward가 통신 뒤에 돌아온다(백엔드 없이)": "첫 버킷은 역전파가 끝나기 **전에** 시작하고, `loss.backward()`는 "
                                                    "모든 버킷의 통신이 **끝난 뒤에** 돌아옵니다.",
        "R-M5 DDP 버킷 사본을 뺀 16바이트": "파라미터 4바이트와 그래디언트 4바이트를 더하면 파라미터 하나에 16바이트입니다.",
        "R-M6 ZeRO-1의 추가 통신을 ZeRO의 것으로": "ZeRO-1의 대가는 통신입니다. 스텝마다 주인이 업데이트한 파라미터를 보냅니다.",
        "R-M7 B를 고정하면 같은 학습(BatchNorm 조건 없이)": "**$B$를 고정하면**($b = B/(NK)$) 평균 그래디언트가 한 프로세스의 "
                                                       "배치 $B$ 그래디언트와 같으므로, 같은 $\\eta$로 같은 학습이 됩니다.",
        "R-M8 워밍업은 한계를 옮기지 않는다": "워밍업은 초기의 불안정을 줄일 뿐 그 한계를 옮기지 않습니다.",
        "R-M9 bf16 훅의 거절을 gloo 탓으로": "`bf16_compress_hook`은 torch 2.13의 gloo에 등록하는 순간 오류를 냅니다.",
        "R-L7 FSDP2 샤드는 한 행씩만 다르다": "정확히 $1/N$이 아니라 랭크마다 최대 한 행씩 차이가 날 수 있고",
        "R-L9 모양 확인은 All-Gather 하나": "파라미터 모양이 랭크끼리 같은지 확인하고(All-Gather), 랭크 0의 파라미터를",
        "R-FSDP 층의 클래스로 나눈다": "`FullyShardedDP`가 이것을 한 클래스로 합니다. Linear와 Embedding의 가중치를 평평하게 펴고",
        "R-M1 DETAIL의 상대 지문을 상대의 연산으로 읽기": "상대가 `GATHER`처럼 내 코드에 없는 연산으로 보이면, 상대는 이미 래퍼가 "
                                                  "지문을 주고받는 자기 쪽 단계(gloo 도우미 그룹의 모으기)에 들어가 있다는 뜻이고",
        "R-M4 build-nanogpt#30을 결과가 맞는 변형에": "결과도 맞고 오류도 없습니다. karpathy/build-nanogpt#30(순전파도 동기화 플래그를 "
                                               "켜야 한다는 수정)과 huggingface/accelerate#1153(…)에서 다룬 문제입니다.",
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
    "R-H1 GradScaler 옆의 클리핑에 unscale_가 없다": [
        "(gradient clipping) 노름이 정한 값을 넘으면 줄이는 일. DDP에서는 동기화된 역전파 뒤, 즉 평균 그래디언트에 합니다."],
    "R-H2 랭크 0만 저장(DDP의 조건 없이)": [
        "그래서 체크포인트는 랭크 0 하나만 저장하면 충분합니다(6장).",
        "(checkpoint) 학습을 이어 가려고 저장한 상태. DDP에서는 랭크 0만 저장합니다."],
    "R-M2 같은 줄이면 짝이 맞다": [
        "4. 모든 랭크가 같은 줄의 같은 집합 통신에서 기다린다면 짝은 맞은 것입니다.",
        "네트워크를 의심하는 것은 모든 랭크가 같은 줄의 같은 집합 통신에서 기다릴 때입니다."],
    "R-M3 backward가 통신 뒤에 돌아온다(백엔드 없이)": [
        "- 버킷이 차면 통신이 역전파와 겹치고, `loss.backward()`는 모든 버킷의 통신이 끝난 뒤에 돌아옵니다."],
    "R-M6 ZeRO-1의 추가 통신을 ZeRO의 것으로": [
        "- ZeRO-1은 옵티마이저 상태만 나눕니다. 결과는 DDP와 비트 단위로 같고, 스텝마다 파라미터 바이트만큼 더 보냅니다."],
    "R-M7 B를 고정하면 같은 학습(BatchNorm 조건 없이)": [
        "- 전역 배치는 $B = b \\cdot N \\cdot K$입니다. $B$를 고정하면 같은 $\\eta$로 한 프로세스와 같은 학습이 됩니다."],
    "R-M1 DETAIL의 상대 지문을 상대의 연산으로 읽기": [
        "상대 랭크가 같은 순간 부르는 집합 통신. 두 기록이 달라서 짝이 맞지 않는다."],
    "R-M9 bf16 훅의 거절을 gloo 탓으로": [
        "즉 bf16 압축은 GPU(`NCCL`)에서만 쓸 수 있고, 이 책은 그것을 재지 않았습니다.",
        "gloo에서는 ``register_comm_hook``이 바로 TypeError를 낸다(훅을 부르기 전, 통신 없이)."],
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


def test_what_a_finding_lacked_said_right_after_it_clears_it():
    """The fixed sentences keep their first half and add what was missing (unscale_, BatchNorm) right after it."""
    fixed = {"glossary.md": "DDP에서는 동기화된 역전파 뒤, 즉 평균 그래디언트에 합니다. `GradScaler`를 쓰면 먼저 "
                            "`scaler.unscale_(optimizer)`로 배율을 되돌린 뒤 자릅니다.",
             "04.ipynb": "$B$를 고정하면 같은 $\\eta$로 한 프로세스와 같은 학습이 됩니다(파라미터까지 같았습니다). 손실이 "
                         "샘플별 평균이고 BatchNorm처럼 배치 안의 샘플끼리 얽히는 층이 없을 때의 이야기입니다.",
             "06.ipynb": "- **DDP에서는 (복제본이 같을 때) 랭크 0만 씁니다.** 복제본이 모두 같으므로 한 번이면 충분합니다.",
             "07.ipynb": "첫 버킷은 역전파가 끝나기 전에 시작하고, `gloo`에서 `loss.backward()`는 모든 버킷의 통신이 끝난 뒤에 "
                         "돌아옵니다."}
    assert findings_in(fixed) == []
    assert findings_in({"bad.md": fixed["glossary.md"].split(" `GradScaler`")[0]})


def test_scan_refuses_no_input():
    with pytest.raises(ValueError):
        findings_in({})
