"""Korean particles agree with the noun before them, on every built page and in the sources.

A particle (조사) after a noun depends on whether the noun's last syllable has a final consonant
(받침): 청크를 but 샤드와, 랭크 1이 (일) but 랭크 2가 (이). Term swaps (조각 → 청크) and numbers
formatted from a run leave the wrong one behind; this finds them. A code name takes the particle of how
its last word is read (`set_epoch`을: 에폭, `no_sync()`를: 싱크, `NCCL`로: 엘); a call is read by its
function's name (`labs.run(...)`을: 런). Every word read that way has its reading in READINGS, so a new
code name with a particle fails here until its reading is written down.
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


# 코드 이름의 마지막 낱말을 한국어로 읽었을 때 끝소리: V 받침 없음, L ㄹ 받침, C 그 밖의 받침
READINGS = {
    "accumulategrad": "V", "accumulation": "C", "add": "V", "allreduce": "V", "assertionerror": "V", "auto": "V",
    "autocast": "V", "available": "L", "averaged": "V", "avg": "V", "backward": "V", "barrier": "V", "base": "V",
    "batch": "V", "batchnorm": "C", "bench": "V", "broadcast": "V", "bucketedddp": "V", "buckets": "V", "buffers": "V",
    "bytes": "V", "calls": "V", "cap": "C", "checkpoint": "V", "childfailederror": "V", "class": "V", "clip": "C",
    "close": "V", "collectivecounter": "V", "command": "V", "compile": "L", "copy": "V", "count": "V", "cpp": "V",
    "cuda": "V", "dataloader": "V", "dataparallel": "L", "ddp": "V", "ddpoptimizer": "V", "dense": "V", "detail": "L",
    "device": "V", "dict": "V", "diff": "V", "dir": "V", "distributed": "V", "distributeddataparallel": "L",
    "distributedsampler": "V", "div": "V", "dump": "V", "ef": "V", "endpoint": "V", "epoch": "C", "eval": "L",
    "evaluate": "V", "exchange": "V", "factor": "V", "factors": "V", "false": "V", "faulthandler": "V", "figure": "V",
    "file": "L", "finish": "V", "fix": "V", "forward": "V", "fr": "L", "free": "V", "fsdp": "V", "fullyshardeddp": "V",
    "futurewarning": "C", "gather": "V", "getfuture": "V", "gloo": "V", "grad": "V", "grade": "V", "gradients": "V",
    "gradscaler": "V", "graph": "V", "group": "C", "head": "V", "hook": "C", "hooks": "V", "hpp": "V", "id": "V",
    "ids": "V", "inf": "V", "info": "V", "ipynb": "V", "isend": "V", "iter": "V", "iterabledataset": "C", "j": "V",
    "job": "C", "join": "C", "json": "C", "k": "V", "kb": "V", "labs": "V", "library": "V", "limits": "V", "list": "V",
    "load": "V", "loader": "V", "local": "L", "location": "C", "lr": "L", "maxsize": "V", "mb": "V", "me": "V",
    "mean": "C", "mixed": "V", "model": "L", "module": "L", "myths": "V", "nccl": "L", "nevershard": "V",
    "neverreshard": "V", "nnodes": "V", "node": "V", "norm": "C", "nullcontext": "V", "observe": "V", "of": "V",
    "once": "V", "only": "V", "open": "C", "out": "C", "p": "V", "path": "V", "pid": "V", "port": "V", "powersgd": "V",
    "powersgdstate": "V", "prctl": "L", "prefixstore": "V", "processes": "V", "processgroupgloo": "V", "pt": "V",
    "py": "V", "quizzes": "V", "rank": "V", "rankcontext": "V", "ranks": "V", "recipe": "V", "recv": "V",
    "reduce": "V", "register": "V", "replace": "V", "replicate": "V", "resharded": "V", "result": "V", "ring": "C",
    "run": "C", "runs": "V", "runtimeerror": "V", "save": "V", "sbatch": "V", "scope": "V", "script": "V", "seed": "V",
    "send": "V", "sequential": "L", "shard": "V", "shardedgradscaler": "V", "shardedoptimizer": "V", "share": "V",
    "size": "V", "split": "C", "sq": "V", "standalone": "C", "step": "C", "steps": "V", "sum": "C", "sync": "V",
    "syncbatchnorm": "C", "synchronization": "C", "synchronize": "V", "synchronizewithcurrentstreams": "V",
    "table": "L", "tcpstore": "V", "text": "V", "then": "C", "timeout": "C", "to": "V", "torchelastic": "C",
    "torchfrtrace": "V", "torchrun": "C", "train": "C", "true": "V", "typeerror": "V", "uneven": "C", "unscale": "L",
    "update": "V", "valueerror": "V", "venv": "V", "view": "V", "wait": "V", "weight": "V", "wrapper": "V",
    "write": "V", "wrongowner": "V", "x": "V", "y": "V", "zero": "V", "fn": "C", "fut": "C", "op": "C", "optimizer": "V",
}
CODE_PARTICLE = re.compile(r"(?<![}\w])`([^`\n]+)`(이|가|은|는|을|를|과|와|으로|로)(?=[\s.,)\"'])")
NEEDS = {"이": "LC", "은": "LC", "을": "LC", "과": "LC", "가": "V", "는": "V", "를": "V", "와": "V", "으로": "C", "로": "VL"}
SWAP = {"이": "가", "가": "이", "은": "는", "는": "은", "을": "를", "를": "을", "과": "와", "와": "과"}


def last_word(name: str) -> str:
    name = name.strip()
    while name.endswith(")") and "(" in name:
        depth, i = 0, len(name) - 1
        for i in range(len(name) - 1, -1, -1):
            depth += (name[i] == ")") - (name[i] == "(")
            if depth == 0:
                break
        name = name[:i]
    words = re.findall(r"[A-Za-z]+|\d+|[가-힣]+", name)
    return words[-1] if words else ""


def sound(word: str) -> str | None:
    """V, L or C (see READINGS); None for a number or a name of symbols only ("+", "..."), "?" when unknown."""
    if not word:
        return None
    if re.fullmatch(r"[가-힣]+", word):
        k = (ord(word[-1]) - 0xAC00) % 28
        return "V" if k == 0 else ("L" if k == 8 else "C")
    if word.isdigit():
        return None
    return READINGS.get(word.lower(), "?")


def right(particle: str, s: str) -> str:
    if particle in ("으로", "로"):
        return "로" if s in "VL" else "으로"
    if s in "LC":
        return particle if particle in "이은을과" else SWAP[particle]
    return particle if particle in "가는를와" else SWAP[particle]


def wrong_code_particles(text: str) -> list[str]:
    """Every `code` + particle whose particle does not fit how the code's last word is read, as
    "`code`particle → particle it needs"; a word without a reading is reported as such."""
    bad = []
    for m in CODE_PARTICLE.finditer(text):
        s = sound(last_word(m.group(1)))
        if s == "?":
            bad.append(f"{m.group(0)} → READINGS에 '{last_word(m.group(1)).lower()}'의 읽기가 없습니다")
        elif s is not None and s not in NEEDS[m.group(2)]:
            bad.append(f"{m.group(0)} → {right(m.group(2), s)}")
    return bad


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


@pytest.mark.parametrize("text, wrong", [
    ("`set_epoch`를 부르고 `no_sync()`을 쓴다", ["`set_epoch`를 → 을", "`no_sync()`을 → 를"]),
    ("`NCCL`으로 보내고 `labs.run(\"x\", nproc=4)`를 부른다", ["`NCCL`으로 → 로", "`labs.run(\"x\", nproc=4)`를 → 을"]),
    ("`torchrun`으로 띄우고 `DDP`로 감싸며 `step`이 끝나고 {glue:text}`key`가 나온다", []),
    ("`frobnicate`를 부른다", ["`frobnicate`를 → READINGS에 'frobnicate'의 읽기가 없습니다"]),
])
def test_the_code_rule_finds_exactly_the_wrong_particles(text, wrong):
    assert wrong_code_particles(text) == wrong


def test_sources_have_no_wrong_particle_after_a_code_name():
    found = {place: wrong_code_particles(text) for place, text in sources().items()}
    assert sum(len(CODE_PARTICLE.findall(t)) for t in sources().values()) > 100  # 규칙이 실제로 무언가를 본다
    assert {p: w for p, w in found.items() if w} == {}


def test_sources_have_no_wrong_particle():
    found = {place: wrong_particles(text) for place, text in sources().items()}
    assert {p: w for p, w in found.items() if w} == {}


def test_built_pages_have_no_wrong_particle(site_root):
    pages = sorted((site_root / "book").glob("*.html"))
    assert len(pages) >= 12
    found = {p.name: wrong_particles(html_text(p)) for p in pages}
    assert {p: w for p, w in found.items() if w} == {}
