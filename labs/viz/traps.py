"""Chapter 10 tables and figures: what each trap really did, from the recorded runs."""

from __future__ import annotations

import html
import re
from typing import Any

import plotly.graph_objects as go
from IPython.display import HTML

from . import html_table, rank_color


def measured(result) -> dict[str, Any]:
    """What a ``traps`` run measured (its data keeps it under ``measured``, the same for every trap)."""
    return result.data["measured"]


KIND_WORDS = {"hang": "멈춤(제한 시간 초과)", "error": "예외", "crash": "프로세스가 죽음", "ok": "정상 종료"}


def outcome_panel(result) -> HTML:
    """What the launcher saw for a bug that did not finish: kind, time, each rank's position, the real text."""
    d = measured(result)
    rows = [f"<tr><th scope='row'>결과</th><td>{html.escape(KIND_WORDS.get(d['kind'], d['kind']))}</td></tr>",
            f"<tr><th scope='row'>걸린 시간</th><td>{d.get('elapsed', 0):.1f}초 (실행을 시작해 런처가 끝낼 때까지)</td></tr>"]
    for rank, where in sorted(d.get("where", {}).items()):
        rows.append(f"<tr><th scope='row'>랭크 {rank}</th><td>{html.escape(where)}</td></tr>")
    text = d.get("message", "")
    return HTML(f'<table class="lab-table"><caption>런처가 본 것 (실제 실행에서 잡은 그대로)</caption>'
                f"<tbody>{''.join(rows)}</tbody></table>"
                f'<pre class="trap-message">{html.escape(text)}</pre>')


def micro_step_table(bug, fix):
    counts = zip(measured(bug)["all_reduce_per_micro_step"], measured(fix)["all_reduce_per_micro_step"])
    rows = [[i + 1, b, f] for i, (b, f) in enumerate(counts)]
    rows.append(["합계", measured(bug)["total_all_reduce"], measured(fix)["total_all_reduce"]])
    return html_table(["마이크로 스텝", "버그: 순전파가 no_sync() 밖", "고침: 순전파도 no_sync() 안"], rows,
                      caption="마이크로 스텝마다 실제로 일어난 All-Reduce 수 (프로파일러로 셈, 랭크 0)")


def unused_cost_table(fix):
    rows = []
    for name, row in measured(fix)["rows"].items():
        for step, (count, items) in enumerate(zip(row["all_reduce_per_step"], row["items_per_step"])):
            what = ", ".join(f"{op} {numel}칸 {dtype}" for op, numel, dtype in items)
            rows.append([f"{name}=True", step + 1, count, what])
    return html_table(["설정", "반복", "All-Reduce 수", "그 반복의 집합 통신 전부 (종류, 원소 수, dtype)"], rows,
                      caption="쓰지 않는 파라미터를 허용하는 두 방법의 통신 (랭크 0, 프로파일러로 셈). "
                              "broadcast는 버킷을 다시 만들 때 랭크 0의 버킷 배정을 나눠 주는 통신이다")


def epoch_order_table(bug, fix, first: int = 8):
    rows = []
    for name, result in (("set_epoch 없음", bug), ("set_epoch(epoch)", fix)):
        for epoch, order in enumerate(measured(result)["orders_rank0"]):
            rows.append([name, epoch, " ".join(str(i) for i in order[:first]) + " …"])
    return html_table(["코드", "에폭", f"랭크 0이 받는 샘플 번호 (앞 {first}개)"], rows,
                      caption="DistributedSampler가 에폭마다 랭크 0에 주는 순서 (실제 DataLoader에서 읽은 값)")


DETAIL_PARTS = (
    (r"^(Detected mismatch between collectives on ranks\.)", "짝이 안 맞는 집합 통신을 찾았다는 선언. "
     "DETAIL 모드의 래퍼가 집합 통신마다 먼저 모든 랭크의 CollectiveFingerPrint를 모아 비교한다."),
    (r"(Rank \d+ is running collective: CollectiveFingerPrint\(.*?\)\)?)(?=, but Rank)",
     "이 예외를 낸 랭크가 지금 부르는 집합 통신: 순번(SequenceNumber), 종류(OpType), 텐서 모양(TensorShape)과 dtype."),
    (r"(but Rank \d+ is running collective: CollectiveFingerPrint\(.*?\)\)?)(?=\.Collectives differ)",
     "상대 랭크의 지문. 래퍼는 먼저 직렬화한 지문의 길이만 모아 비교하므로, 길이가 다르면 여기 찍힌 것은 그 길이를 "
     "지문처럼 읽은 값이다(OpType = 길이 번호의 연산, SequenceNumber=0, 텐서 모양 없음). 믿을 것은 예외를 낸 랭크 자기 지문뿐."),
    (r"(Collectives differ in the following aspects:.*)$", "무엇이 다른지 항목별로: 순번, 연산 종류, 텐서 모양 등."),
)


def _shorten(text: str) -> str:
    # TensorOptions(...)는 길기만 하고 읽을 것이 없다: 장치만 남긴다.
    return re.sub(r"TensorOptions\(dtype=[^)]*?device=(\w+)[^)]*\)\)?", r"\1", text)


def detail_lines(result):
    """The DETAIL message cut into its parts, each with what it says."""
    message = measured(result).get("message", "")
    rows = []
    for pattern, meaning in DETAIL_PARTS:
        found = re.search(pattern, message, flags=re.S)
        if found:
            rows.append([_shorten(found.group(1)).strip(), meaning])
    return html_table(["예외 문장의 부분 (실제 출력, TensorOptions는 장치만 남김)", "뜻"], rows,
                      caption=f"TORCH_DISTRIBUTED_DEBUG=DETAIL에서 예외를 낸 랭크({measured(result).get('rank')})의 문장, 한 부분씩")


_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\((.*?)\)(?=, but Rank|\.Collectives differ|$)",
                          flags=re.S)


def fingerprints(result) -> list[dict]:
    """Each rank's fingerprint as the DETAIL message states it: rank, sequence number, op type, tensor shapes."""
    found = []
    for rank, body in _FINGERPRINT.findall(measured(result).get("message", "")):
        seq = re.search(r"SequenceNumber=(\d+)", body)
        op = re.search(r"OpType=(\w+)", body)
        shapes = re.findall(r"TensorShape=\[([^\]]*)\]", body)
        found.append({"rank": int(rank), "seq": int(seq.group(1)) if seq else None,
                      "op": op.group(1) if op else None, "shapes": [f"[{s}]" for s in shapes]})
    return found


# c10d's OpType numbers (torch/csrc/distributed/c10d/Work.hpp, torch 2.13): a fingerprint of another length is
# printed as OpType(length), so the number is what the peer line really says.
OP_TYPES = ("BROADCAST", "ALLREDUCE", "ALLREDUCE_COALESCED", "REDUCE", "ALLGATHER", "_ALLGATHER_BASE",
            "ALLGATHER_COALESCED", "GATHER", "SCATTER", "REDUCE_SCATTER", "ALLTOALL_BASE", "ALLTOALL", "SEND", "RECV")


def length_artifact(fp: dict) -> bool:
    """A peer fingerprint that is only the length check's tensor read as a fingerprint (ProcessGroupWrapper.cpp:
    ``verify`` all-gathers the serialized length first; ``deserialize_fingerprint`` of that one element leaves
    seq 0 and no tensors)."""
    return fp["seq"] == 0 and not fp["shapes"] and fp["op"] in OP_TYPES


def detail_reading(result) -> str:
    """One Korean sentence per rank, read off this run's DETAIL message (so the text is the output shown)."""
    parts = []
    for i, fp in enumerate(fingerprints(result)):
        if i > 0 and length_artifact(fp):
            parts.append(f"랭크 {fp['rank']}: 지문의 길이가 {OP_TYPES.index(fp['op'])}(으)로 다름 "
                         f"(찍힌 {fp['op']}은 그 길이를 연산 번호로 읽은 것이고, 상대의 연산도 순번도 아님)")
            continue
        shape = f", 텐서 모양 {', '.join(fp['shapes'])}" if fp["shapes"] else ", 텐서 모양 없음"
        parts.append(f"랭크 {fp['rank']}: 순번 {fp['seq']}의 {fp['op']}{shape}")
    if not parts:  # 예외가 아니라 다른 끝(프로세스가 죽음 등): 읽을 지문이 없다. 확인 항목 outcome이 그것을 잡는다
        kind = KIND_WORDS.get(str(measured(result).get("kind")), "?")
        return f"이번 실행에서는 랭크별 지문을 적은 예외 문장이 나오지 않았습니다(결과: {kind})."
    return "이번 실행의 예외가 말하는 것 — " + "; ".join(parts) + "."


def lr_scaling_figure(bug, fix) -> go.Figure:
    n = bug.world_size
    epochs = list(range(len(measured(bug)["curve"])))
    fig = go.Figure()
    fig.add_scatter(x=epochs, y=measured(bug)["baseline"], name="한 프로세스, 배치 b, η", mode="lines+markers",
                    line={"color": "#222", "dash": "dot"})
    fig.add_scatter(x=epochs, y=measured(bug)["curve"], name=f"N={n}, η 그대로", mode="lines+markers",
                    line={"color": rank_color(3)})
    fig.add_scatter(x=epochs, y=measured(fix)["curve"], name=f"N={n}, {n}η + 워밍업", mode="lines+markers",
                    line={"color": rank_color(2)})
    fig.update_layout(xaxis_title="에폭 (본 데이터 양)", yaxis_title="전체 데이터 손실 (MSE)", height=380,
                      margin={"l": 60, "r": 20, "t": 30, "b": 50}, legend={"orientation": "h", "y": -0.25})
    return fig


def mask_table(bug, fix):
    rows = [[step + 1, b, f, measured(bug)["global_batch"]]
            for step, (b, f) in enumerate(zip(measured(bug)["distinct_masks"], measured(fix)["distinct_masks"]))]
    return html_table(["스텝", "버그: 모든 랭크 같은 시드", "고침: 데이터 난수는 랭크마다", "전역 배치 샘플 수"], rows,
                      caption="전역 배치 안에서 서로 다른 드롭아웃 마스크의 수 (모든 랭크의 마스크를 모아 셈)")


def checkpointing_table(fix):
    rows = [[name, f"{row['from_single']:.3g}"] for name, row in measured(fix)["rows"].items()]
    return html_table(["고침", "한 프로세스(DDP 없이, 전역 배치 B개)와의 최대 파라미터 차이"], rows,
                      caption=f"활성값 체크포인팅을 DDP로 감싼 두 방법, 랭크 {fix.world_size}개에서 학습한 뒤 (모든 랭크의 최댓값)")
