"""Chapter 11 figures and the "오해 판별" quiz, all fed by values measured on real ranks."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..quiz import Choice, Question, to_html
from . import ANIMATE, html_table, rank_color

KINDS = (("params", "파라미터", "#4C78A8"), ("grads", "그래디언트", "#F58518"),
         ("optimizer_state", "Adam 상태", "#54A24B"))
WRAPPERS = (("ddp", "DDP (측정)"), ("fsdp", "FSDP fully_shard (측정)"))
SYNC_COLOR, UNSYNCED_COLOR = "#202124", "#6A3D9A"  # 랭크 색(RANK_COLORS)과 겹치지 않는 색


# --- 오해 1: 메모리 -------------------------------------------------------------------------------

def memory_figure(memory: dict) -> go.Figure:
    """Stacked bytes per rank (parameters, gradients, Adam state): DDP on the left, FSDP on the right."""
    n = len(memory["ddp"]["params"])
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.06,
                        subplot_titles=[label for _, label in WRAPPERS])
    for col, (wrapper, label) in enumerate(WRAPPERS, start=1):
        for kind, kind_label, color in KINDS:
            held = memory[wrapper][kind]
            fig.add_trace(go.Bar(
                x=[f"랭크 {r}" for r in range(n)], y=[h["bytes"] for h in held], name=kind_label,
                marker_color=color, legendgroup=kind, showlegend=(col == 1),
                customdata=[h["numel"] for h in held],
                hovertemplate=f"{label} · %{{x}}<br>{kind_label}: %{{customdata:,}}개, %{{y:,}}바이트<extra></extra>"),
                row=1, col=col)
    fig.update_yaxes(title_text="랭크가 가진 바이트", row=1, col=1)
    fig.update_layout(
        barmode="stack", height=400, margin={"l": 10, "r": 10, "t": 60, "b": 10}, paper_bgcolor="rgba(0,0,0,0)",
        legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": -0.12, "yanchor": "top"},
    )
    fig.update_annotations(font_size=14)
    return fig


# --- 오해 3: 매 스텝 지문 --------------------------------------------------------------------------

RUN_LABELS = (("sgd", "DDP · SGD(모멘텀)"), ("adam", "DDP · Adam"), ("no_sync", "동기화 없음 · SGD"))


def _fingerprint_grid(ranks: list[dict], run: str) -> dict:
    steps = len(ranks[0][run]["fingerprints"])
    z = [[0 if r[run]["fingerprints"][s] == ranks[0][run]["fingerprints"][s] else 1 for s in range(steps)]
         for r in ranks]
    text = [[r[run]["fingerprints"][s][:6] for s in range(steps)] for r in ranks]
    hover = [[f"랭크 {r['rank']} · 스텝 {s}<br>지문 {r[run]['fingerprints'][s]}"
              + ("" if z[i][s] == 0 else "<br>랭크 0과 다름") for s in range(steps)] for i, r in enumerate(ranks)]
    return {"z": z, "text": text, "hovertext": hover}


def fingerprint_grid_figure(ranks: list[dict]) -> go.Figure:
    """Rank × step grid of parameter fingerprints from the ``update`` lab; buttons switch the run.

    A cell is grey when it equals rank 0's fingerprint at that step and red when it differs.
    """
    grids = {run: _fingerprint_grid(ranks, run) for run, _ in RUN_LABELS}
    steps = len(ranks[0]["sgd"]["fingerprints"])
    first = RUN_LABELS[0][0]
    fig = go.Figure(go.Heatmap(
        x=[f"스텝 {s}" for s in range(steps)], y=[f"랭크 {r['rank']}" for r in ranks],
        texttemplate="%{text}", textfont={"size": 11}, hoverinfo="text", xgap=2, ygap=2,
        zmin=0, zmax=1, showscale=False, colorscale=[[0, "#E8EAED"], [1, "#E45756"]], **grids[first]))

    def title(label: str) -> str:
        return f"랭크별 파라미터 지문(앞 6자리) — {label}"

    fig.update_layout(
        height=150 + 42 * len(ranks), margin={"l": 10, "r": 10, "t": 95, "b": 10},
        title={"text": title(RUN_LABELS[0][1]), "font": {"size": 14}, "y": 0.96},
        yaxis={"autorange": "reversed", "fixedrange": True}, xaxis={"fixedrange": True},
        paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": 1.02, "xanchor": "left",
                      "yanchor": "bottom", "active": 0, "pad": {"b": 8},
                      "buttons": [{"label": label, "method": "update",
                                   "args": [{k: [v] for k, v in grids[run].items()}, {"title.text": title(label)}]}
                                  for run, label in RUN_LABELS]}],
    )
    return fig


# --- 오해 4: 동기화 없이 학습하면 ---------------------------------------------------------------------

def _drift_traces(drift: dict, upto: int) -> list[dict]:
    """x/y of every trace, cut after step ``upto`` (the animation's frames)."""
    steps = list(range(upto + 1))
    rows = [{"x": steps, "y": drift["drift"]["ddp"][:upto + 1]}, {"x": steps, "y": drift["drift"]["unsynced"][:upto + 1]},
            {"x": steps, "y": drift["full_loss"]["ddp"][0][:upto + 1]}]
    rows += [{"x": steps, "y": row[:upto + 1]} for row in drift["full_loss"]["unsynced"]]
    return rows


def drift_figure(drift: dict, frame_every: int = 5) -> go.Figure:
    """Top: the largest L2 distance between two ranks' parameters per step, with and without DDP.
    Bottom: each replica's loss on the full data set. A slider replays the training step by step."""
    n = len(drift["full_loss"]["unsynced"])
    last = len(drift["drift"]["ddp"]) - 1
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=["랭크 사이 파라미터 거리 (최대 L2)", "전체 데이터에 대한 손실"])
    style = [("거리: DDP", SYNC_COLOR, "solid", 1), ("거리: 동기화 없음", UNSYNCED_COLOR, "solid", 1),
             ("손실: DDP (모든 랭크 같음)", SYNC_COLOR, "solid", 2)]
    style += [(f"손실: 랭크 {r}의 복제본 (동기화 없음)", rank_color(r), "dash", 2) for r in range(n)]
    for (name, color, dash, row), xy in zip(style, _drift_traces(drift, last)):
        fig.add_trace(go.Scatter(mode="lines", name=name, line={"color": color, "dash": dash, "width": 3 if color == SYNC_COLOR else 2},
                                 hovertemplate=f"{name}<br>스텝 %{{x}}: %{{y:.4f}}<extra></extra>", **xy), row=row, col=1)
    marks = sorted(set(range(0, last + 1, frame_every)) | {last})
    fig.frames = [go.Frame(name=str(s), data=[go.Scatter(**xy) for xy in _drift_traces(drift, s)]) for s in marks]
    top = max(max(drift["drift"]["unsynced"]), 1e-9) * 1.08
    losses = [v for row in drift["full_loss"]["unsynced"] + drift["full_loss"]["ddp"][:1] for v in row]
    fig.update_yaxes(range=[-0.04 * top, top], row=1, col=1)  # 0에 붙은 DDP 선이 축선에 가리지 않게
    fig.update_yaxes(range=[0, max(losses) * 1.05], row=2, col=1)
    fig.update_xaxes(range=[0, last], row=1, col=1)
    fig.update_xaxes(range=[0, last], title_text="스텝 (0 = 학습 전)", row=2, col=1)
    fig.update_layout(
        height=720, margin={"l": 10, "r": 10, "t": 150, "b": 10}, paper_bgcolor="rgba(0,0,0,0)",
        legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": 1.1, "yanchor": "bottom", "font": {"size": 12}},
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": -0.12, "xanchor": "left", "yanchor": "top",
                      "showactive": False,
                      "buttons": [{"label": "▶ 재생", "method": "animate", "args": [None, ANIMATE | {"fromcurrent": True}]},
                                  {"label": "❚❚ 멈춤", "method": "animate",
                                   "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]}]}],
        sliders=[{"active": len(marks) - 1, "x": 0.22, "len": 0.78, "y": -0.1, "yanchor": "top",
                  "currentvalue": {"prefix": "스텝 "},
                  "steps": [{"label": str(s), "method": "animate",
                             "args": [[str(s)], {"mode": "immediate", "frame": {"duration": 0, "redraw": False},
                                                 "transition": {"duration": 0}}]} for s in marks]}],
    )
    fig.update_annotations(font_size=14)
    return fig


# --- 오해 판별 퀴즈: 보기마다 측정값을 보여 준다 ---------------------------------------------------------

def _statement(qid: str, claim: str, true: bool, evidence: str, explanation: str) -> Question:
    """A true/false question about ``claim``; the feedback of either answer is the measured evidence."""
    return Question(
        id=f"ch11-myth-{qid}", prompt=f"“{claim}” — 사실일까요, 오해일까요?",
        choices=(Choice("사실이다", true, f"{'측정 결과' if true else '측정 결과가 반대입니다'}: {evidence}"),
                 Choice("오해다", not true, f"{'측정 결과가 반대입니다' if true else '측정 결과'}: {evidence}")),
        explanation=explanation)


def myth_questions(e: dict) -> list[Question]:
    """The five misconceptions and four true statements beside them, with the numbers measured in this
    chapter (``e``: see the chapter). The true ones keep "always answer 오해" from winning."""
    return [
        _statement("sharding", "DDP는 모델을 GPU마다 나눈다", False,
                   f"랭크 {e['n']}개가 모두 파라미터 {e['n_params']:,}개 전부({e['ddp_param_bytes']:,}바이트)와 "
                   f"그래디언트, Adam 상태 {e['ddp_state_numel']:,}개를 가졌습니다. 진짜로 나누는 FSDP에서는 랭크 하나가 "
                   f"최대 {e['fsdp_max_params']:,}개만 가졌습니다.",
                   "DDP는 모델을 복제합니다. 나누는 것은 FSDP, 텐서·파이프라인 병렬화 같은 다른 방식입니다."),
        _statement("fsdp-shards", "FSDP에서는 랭크마다 파라미터의 일부(샤드)만 상주한다", True,
                   f"FSDP로 감싼 같은 모델에서 랭크 하나가 가진 파라미터는 최대 {e['fsdp_max_params']:,}개로, "
                   f"전체 {e['n_params']:,}개보다 적었습니다(DDP는 랭크마다 {e['n_params']:,}개 전부).",
                   "FSDP는 파라미터·그래디언트·옵티마이저 상태를 샤드로 나누고, 계산할 때만 All-Gather로 모읍니다."),
        _statement("forward", "forward 단계에서 GPU 사이에 그래디언트 통신이 일어난다", False,
                   f"일반 MLP의 순전파 {e['forward_iterations']}번 중 집합 통신이 있었던 것은 "
                   f"{e['forward_with_comm']}번(버킷을 재구성한 두 번째 순전파, int32 몇 개의 broadcast)뿐이고, "
                   f"그래디언트 all_reduce는 반복마다 {e['backward_all_reduce']}번씩 모두 역전파에서 일어났습니다.",
                   "순전파에는 그래디언트 통신이 없습니다. 다만 BatchNorm 버퍼 브로드캐스트(기본값), 한 번의 버킷 재구성 "
                   "브로드캐스트, SyncBatchNorm의 All-Gather는 순전파에서 일어납니다."),
        _statement("backward-allreduce", "DDP의 그래디언트 All-Reduce는 loss.backward() 안에서 일어난다", True,
                   f"일반 MLP에서 반복마다 all_reduce {e['backward_all_reduce']}번이 모두 역전파 구간에서 세어졌습니다.",
                   "DDP가 파라미터마다 건 훅이 그래디언트가 준비되는 대로 버킷에 모으고, 역전파가 끝나기 전에 "
                   "All-Reduce를 시작합니다."),
        _statement("different-models", "각 GPU는 서로 다른 모델을 학습한다", False,
                   f"SGD와 Adam 모두 {e['update_steps']}스텝 내내 랭크 {e['update_n']}개의 지문 종류가 매 스텝 1개였고, "
                   f"랭크 간 최대 차이는 {e['update_max_diff']:g}였습니다.",
                   "데이터는 랭크마다 다르지만 모델은 하나입니다. 모든 랭크가 같은 평균 그래디언트로 같은 업데이트를 합니다."),
        _statement("same-every-step", "DDP에서는 매 스텝 모든 랭크의 파라미터가 같다", True,
                   f"SGD와 Adam 모두 {e['update_steps']}스텝 동안 랭크 {e['update_n']}개의 파라미터 차이가 "
                   f"최대 {e['update_max_diff']:g}였습니다.",
                   "같은 시작점(생성할 때의 브로드캐스트), 같은 평균 그래디언트, 같은 옵티마이저 계산이 매 스텝 같은 "
                   "파라미터를 만듭니다."),
        _statement("no-sync", "gradient를 합치지 않아도 된다", False,
                   f"동기화하지 않으면 같은 점에서 출발한 복제본 사이의 거리가 {e['drift_steps']}스텝 뒤 "
                   f"{e['drift_final']:.3f}까지 벌어졌고(DDP는 계속 0), 전체 데이터 손실은 DDP {e['ddp_loss']:.4f}, "
                   f"동기화 없는 복제본 평균 {e['unsynced_loss']:.4f}였습니다.",
                   "그래디언트를 평균하지 않으면 N개의 서로 다른 모델을 각자 1/N의 데이터로 학습하는 셈입니다."),
        _statement("drift", "동기화를 끄면 같은 점에서 출발한 복제본도 서로 갈라진다", True,
                   f"{e['drift_steps']}스텝 뒤 복제본 사이의 거리가 {e['drift_final']:.3f}였습니다(DDP는 계속 0).",
                   "랭크마다 다른 데이터로 만든 다른 그래디언트가 매 스텝 쌓이기 때문입니다."),
        _statement("dataparallel", "DDP와 DataParallel은 같은 것이다", False,
                   f"DDP는 프로세스 {e['ddp_processes']}개(PID가 모두 다름)가 각자 메인 스레드에서 순전파했고, "
                   f"DataParallel은 프로세스 하나(PID {e['dp_pid']}) 안에서 돌았습니다. {e['dp_note']}",
                   "DataParallel은 한 프로세스가 매 스텝 모델을 복제하고 스레드로 GPU를 돌립니다. PyTorch는 한 노드에서도 "
                   "DDP를 권장합니다."),
    ]


def myth_quiz(evidence: dict) -> str:
    """The chapter's "오해 판별" quiz as static HTML (the same widget as the chapter quizzes)."""
    return to_html("11_myths_evidence", myth_questions(evidence))


def myth_evidence(myths, forward, update) -> dict:
    """The numbers the quiz quotes, taken from this chapter's three lab results."""
    mem, dp = myths.data["sharding"]["memory"], myths.data["dataparallel"]
    plain = forward.data["counts"]["plain"]
    drift = myths.data["drift"]
    spread = update.data["spread"]
    calls = dp["calls"]
    dp_note = (f"DataParallel은 스텝마다 replicate {calls['replicate']}번, gather {calls['gather']}번을 했습니다"
               f"({len(dp['device_ids'])} GPU, 스텝 {len(dp['dp_step_seconds'])}번)." if dp["dataparallel_measured"] else
               "이 기계에는 GPU가 없어 DataParallel은 감싼 모듈을 그대로 불렀습니다(replicate 0번).")
    return {
        "n": myths.world_size, "n_params": myths.data["sharding"]["n_params"],
        "ddp_param_bytes": mem["ddp"]["params"][0]["bytes"], "ddp_state_numel": mem["ddp"]["optimizer_state"][0]["numel"],
        "fsdp_max_params": max(m["numel"] for m in mem["fsdp"]["params"]),
        "forward_iterations": len(plain["forward"]),
        "forward_with_comm": sum(1 for c in plain["forward"] if c),
        "backward_all_reduce": min(c.get("all_reduce", 0) for c in plain["backward"]),
        "update_steps": len(spread["sgd"]) - 1, "update_n": update.world_size,
        "update_max_diff": max(max(spread["sgd"]), max(spread["adam"])),
        "drift_steps": len(drift["drift"]["unsynced"]) - 1, "drift_final": drift["drift"]["unsynced"][-1],
        "ddp_loss": drift["ddp_final_loss"],
        "unsynced_loss": sum(drift["unsynced_final_losses"]) / len(drift["unsynced_final_losses"]),
        "ddp_processes": len({p["pid"] for p in dp["processes"]}), "dp_pid": dp["dp_pid"], "dp_note": dp_note,
    }


def checks_table(result, names: list[str], caption: str):
    """Some of a lab's checks as a table (the whole set is asserted with ``result.assert_ok()``)."""
    rows = []
    for name in names:
        c = result.checks[name]
        rows.append(["○ 통과" if c.ok else "× 실패", name, c.value, c.criterion(), c.description])
    return html_table(["결과", "확인", "측정값", "기준", "주장"], rows, caption)


def held_table(myths):
    """Elements and bytes each rank holds after one Adam step, DDP against FSDP (both measured)."""
    sharding = myths.data["sharding"]
    mem = sharding["memory"]
    return html_table(
        ["랭크", "DDP 파라미터", "DDP 그래디언트", "DDP Adam 상태", "FSDP 파라미터", "FSDP 그래디언트", "FSDP Adam 상태"],
        [[r] + [f"{mem[w][k][r]['numel']:,}개 ({mem[w][k][r]['bytes']:,} B)"
                for w in ("ddp", "fsdp") for k in ("params", "grads", "optimizer_state")]
         for r in range(myths.world_size)],
        caption=f"Adam 한 스텝 뒤 랭크마다 가진 원소 수와 바이트 (모델 파라미터 {sharding['n_params']:,}개, "
                f"N={myths.world_size}, 둘 다 실제 측정)")


def _items_text(items: list[dict]) -> str:
    return ", ".join(f"{it['op']}({it['numel']:,}개)" for it in items) or "없음"


def sharding_collectives_table(myths):
    """The collectives of the first training step, DDP against FSDP, per phase."""
    coll = myths.data["sharding"]["collectives"]
    return html_table(
        ["방식", "순전파의 집합 통신", "역전파의 집합 통신"],
        [[label, _items_text(coll[w]["forward"]), _items_text(coll[w]["backward"])]
         for w, label in (("ddp", "DDP"), ("fsdp", "FSDP"))],
        caption=f"첫 학습 스텝에서 랭크 0의 프로세스 그룹이 실행한 집합 통신 ({myths.backend}, 원소 수는 첫 입력 텐서 기준)")


def _ops_in(phase_counts: list[dict], iterations) -> str:
    totals: dict[str, int] = {}
    for i in iterations:
        for op, k in phase_counts[i].items():
            totals[op] = totals.get(op, 0) + k
    return ", ".join(f"{op} {k}번" for op, k in sorted(totals.items())) or "없음"


def forward_table(forward):
    """Chapter 2's counts per model: steady forwards, the rebuild forward, all backwards."""
    from ..lessons.forward import VARIANT_LABELS, steady_iterations

    rows = []
    for name, counts in forward.data["counts"].items():
        steady = steady_iterations({"rebuilt": counts["rebuilt"]})
        rebuild = [i for i, flag in enumerate(counts["rebuilt"]) if flag]
        rows.append([VARIANT_LABELS[name], _ops_in(counts["forward"], steady), _ops_in(counts["forward"], rebuild),
                     _ops_in(counts["backward"], range(len(counts["backward"])))])
    return html_table(
        ["모델", f"순전파 (재구성 반복 제외, {len(steady)}번 합계)", "버킷을 재구성한 순전파", "역전파 (전체 합계)"], rows,
        caption=f"2장 실습 forward: 랭크 0의 프로세스 그룹이 실행한 집합 통신 (N={forward.world_size}, 반복 {len(counts['forward'])}번)")


def distinct_table(update):
    """Chapter 5's distinct fingerprints per step and the largest spread, per run."""
    distinct = update.data["distinct_fingerprints"]
    return html_table(
        ["실행", "스텝마다 지문 종류 수", "모든 스텝의 랭크 간 최대 차이"],
        [[label, " ".join(str(d) for d in distinct[run]), f"{max(update.data['spread'][run]):.3g}"]
         for run, label in RUN_LABELS],
        caption=f"5장 실습 update: 스텝 0(학습 전)부터 스텝마다 랭크 {update.world_size}개의 지문 종류 수")


def drift_table(myths):
    """Final loss on the whole data set, DDP against each unsynchronized replica, and the final drift."""
    drift = myths.data["drift"]
    losses = drift["unsynced_final_losses"]
    return html_table(
        ["모델", "전체 데이터의 마지막 손실", "마지막 스텝의 최대 L2 거리"],
        [["DDP (모든 랭크 같음)", f"{drift['ddp_final_loss']:.4f}", f"{drift['drift']['ddp'][-1]:.3g}"]]
        + [[f"동기화 없음 · 랭크 {r}의 복제본", f"{loss:.4f}", ""] for r, loss in enumerate(losses)]
        + [["동기화 없음 · 평균", f"{sum(losses) / len(losses):.4f}", f"{drift['drift']['unsynced'][-1]:.3g}"]],
        caption=f"{len(drift['drift']['ddp']) - 1}스텝 뒤 전체 데이터({drift['dataset_size']}개)에 대한 손실 "
                f"(N={myths.world_size})")


def process_table(myths):
    """Where the forward ran: each DDP rank's process and thread, and DataParallel's one process."""
    dp = myths.data["dataparallel"]
    return html_table(
        ["실행", "PID", "부모 PID", "파이썬 스레드 수", "순전파가 실행된 곳"],
        [[f"DDP 랭크 {p['rank']}", p["pid"], p["ppid"], p["threads"], f"이 프로세스의 메인 스레드 ({p['forward_calls']}번)"]
         for p in dp["processes"]]
        + [["DataParallel", dp["dp_pid"], "—", "—",
            f"PID {dp['dp_pid']} 안의 스레드 {dp['dp_forward_threads']}개 ({dp['dp_forward_calls']}번)"]],
        caption=f"순전파가 실행된 프로세스와 스레드 (DDP N={myths.world_size}, DataParallel device_ids={dp['device_ids']})")
