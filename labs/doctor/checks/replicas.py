"""Replicas that stop being identical: every parameter's fingerprint compared across ranks before and after
each optimizer step, and the first step where they differ explained by what differed first (the parameters
before the step, the gradients, the hyperparameters, or only the update)."""

from __future__ import annotations

from dataclasses import dataclass

from ..findings import Finding, Site, finding, where
from .view import Event, View

RANK_EDIT_FIX = ("파라미터를 바꾸는 코드(가중치 불러오기, 초기화, 값 고치기)는 DDP로 감싸기 전에 모든 랭크에서 똑같이 하거나, "
                 "모든 랭크에서 같은 값으로 하세요. `if rank == 0:` 안에서 파라미터를 바꾸면 그 랭크만 달라집니다.")


def _keyed(events: list[Event]) -> dict[tuple[int, int], Event]:
    return {(e["opt"], e["n"]): e for e in events}


def _first_difference(values: list[list[object]]) -> int | None:
    for i in range(min(len(v) for v in values)):
        if len({str(v[i]) for v in values}) > 1:
            return i
    return None


def _names(view: View, opt: int) -> list[str]:
    for e in view.events(0, "optimizer"):
        if e["opt"] == opt:
            names: list[str] = e["names"]
            return names
    return []


@dataclass
class Drift:
    """The first step where the replicas differ: ``cause`` is what differed first at that step."""

    opt: int
    step: int
    cause: str      # "before" (the parameters before the step) | "gradients" | "hyper" | "update"
    index: int      # the first parameter (in the optimizer's order) that differs
    pre: list[Event]
    post: list[Event]


def first_drift(view: View) -> Drift | None:
    """The first step, cause and parameter where the ranks' replicas differ, or None."""
    pres = [_keyed(view.events(r, "pre")) for r in range(view.nproc)]
    posts = [_keyed(view.events(r, "post")) for r in range(view.nproc)]
    order = [(e["opt"], e["n"]) for e in view.events(0, "post")]
    for key in order:
        if not all(key in p for p in posts) or not all(key in p for p in pres):
            return None
        pre = [p[key] for p in pres]
        if any(e.get("sharded") for e in pre):
            return None
        for cause, values in (("before", [e["params"] for e in pre]), ("gradients", [e["grads"] for e in pre]),
                              ("hyper", [e["hyper"] for e in pre]), ("update", [p[key]["params"] for p in posts])):
            index = _first_difference(values)
            if index is not None:
                return Drift(key[0], key[1], cause, index, pre, [p[key] for p in posts])
    return None


def _rank_only_load(view: View, step: int, owner: str) -> Site | None:
    """A ``load_state_dict`` between steps ``step - 1`` and ``step`` that not every rank made."""
    counts: dict[tuple[str, int], list[int]] = {}
    sites: dict[tuple[str, int], Site] = {}
    for rank in range(view.nproc):
        for e in view.events(rank, "load"):
            if e["owner"] == owner and e["step"] == step - 1:
                key = (e["site"]["file"], e["site"]["line"])
                counts.setdefault(key, [0] * view.nproc)[rank] += 1
                sites[key] = e["site"]
    for key, per_rank in counts.items():
        if len(set(per_rank)) > 1:
            return sites[key]
    return None


def _created(view: View) -> Site | None:
    """Where the (only) optimizer was created."""
    created = view.events(0, "optimizer_created")
    return created[0]["site"] if len(created) == 1 else None


def check(view: View) -> list[Finding]:
    if view.nproc < 2:
        return []
    drift = first_drift(view)
    if drift is None:
        return []
    opt, step, cause, index, pre, post = drift.opt, drift.step, drift.cause, drift.index, drift.pre, drift.post
    names = _names(view, opt)
    name = names[index] if index < len(names) else f"{index}번째 파라미터"
    base = pre[0]["params"][index] if cause == "before" else (pre[0]["grads"][index] if cause == "gradients" else None)
    if cause == "gradients":
        differing = [r for r in range(view.nproc) if pre[r]["grads"][index] != base]
    elif cause == "before":
        differing = [r for r in range(view.nproc) if pre[r]["params"][index] != base]
    else:
        differing = [r for r in range(1, view.nproc) if post[r]["params"] != post[0]["params"]]
    ranks = sorted({0, *differing})
    sums = ", ".join(f"랭크 {r} {post[r]['sums'][index]:.9g}" for r in ranks)
    step_site = pre[0]["site"]
    data = {"step": step, "cause": cause, "parameter": name, "sums": [post[r]["sums"][index] for r in ranks]}
    title = "복제본이 달라집니다: 랭크마다 파라미터가 다릅니다"
    after = f"스텝 {step} 직후 `{name}`의 합: {sums}."
    load = _rank_only_load(view, step, "Optimizer" if cause == "update" else "Module") if cause in ("before", "update") else None
    if load is not None:
        measured = (f"{where(load)}의 `load_state_dict`를 일부 랭크만 불러, 스텝 {step} 전에 그 랭크의 "
                    f"{'옵티마이저 상태' if cause == 'update' else f'`{name}`'}만 바뀌었습니다. {after}")
        fix = ("체크포인트는 모든 랭크에서 불러오세요(`torch.load(path, map_location=device)`는 모든 랭크가 읽을 수 있습니다), "
               "또는 DDP로 감싸기 *전에* 불러오세요(DDP가 만들 때 랭크 0의 값을 모든 랭크에 복사합니다).")
        return [finding("replicas_differ", "복제본이 달라집니다: 일부 랭크만 체크포인트를 불러옵니다", ranks, load, measured,
                        fix, data=data)]
    if cause == "before" and step == 1:
        ddp = view.ddp_site()
        measured = (f"첫 스텝 전에 이미 `{name}`의 지문이 랭크마다 다릅니다(랭크 {', '.join(map(str, ranks))}). {after}")
        fix = (("DDP는 만들 때 랭크 0의 파라미터를 모든 랭크에 복사합니다. 그 뒤에 파라미터를 바꾸지 마세요: "
                + RANK_EDIT_FIX) if ddp else
               "모델을 DistributedDataParallel로 감싸세요(만들 때 랭크 0의 파라미터를 복사합니다). " + RANK_EDIT_FIX)
        return [finding("replicas_differ", title, ranks, ddp or step_site, measured, fix, data=data)]
    if cause == "before":
        measured = (f"스텝 {step - 1} 뒤에는 같았던 `{name}`이(가) 스텝 {step} 전에는 랭크마다 다릅니다: 두 스텝 사이에 "
                    f"파라미터를 랭크마다 다르게 바꾸는 코드가 있습니다. {after}")
        return [finding("replicas_differ", title, ranks, step_site, measured, RANK_EDIT_FIX, data=data)]
    if cause == "hyper":
        group = _first_difference([e["hyper"] for e in pre]) or 0
        keys = [k for k in pre[0]["hyper"][group] if any(e["hyper"][group].get(k) != pre[0]["hyper"][group].get(k) for e in pre)]
        values = ", ".join(f"랭크 {r} {k}={pre[r]['hyper'][group].get(k)}" for r in ranks for k in keys)
        measured = f"스텝 {step}에서 파라미터 그룹 {group}의 하이퍼파라미터가 랭크마다 다릅니다: {values}. {after}"
        fix = ("학습률 같은 하이퍼파라미터(와 스케줄러)는 모든 랭크에서 같아야 합니다: 랭크 번호로 값을 바꾸거나 "
               "스케줄러를 한 랭크에서만 step()하지 마세요.")
        site = _created(view) if step == 1 else step_site
        return [finding("replicas_differ", title, ranks, site or step_site, measured, fix, keys=keys, data=data)]
    if cause == "update":
        measured = (f"스텝 {step} 전의 파라미터·그래디언트·하이퍼파라미터는 같았는데 스텝 뒤 `{name}`이(가) 다릅니다: "
                    f"옵티마이저의 상태(모멘텀 등)가 랭크마다 다릅니다. {after}")
        fix = "옵티마이저 상태를 불러올 때는 모든 랭크에서 불러오세요(`optimizer.load_state_dict`를 랭크 0에서만 하지 않기)."
        return [finding("replicas_differ", title, ranks, step_site, measured, fix, data=data)]
    return [_gradients(view, step, name, ranks, step_site, pre, after, data)]


def _gradients(view: View, step: int, name: str, ranks: list[int], step_site: Site | None, pre: list[Event], after: str,
               data: dict[str, object]) -> Finding:
    """Gradients that differ at ``step``: no DDP, a parameter outside it, or a last micro-step without sync."""
    forwards = [e for e in view.events(0, "forward") if e["grad"] and e["step"] == step - 1]
    base = f"스텝 {step}의 `{name}` 그래디언트가 랭크마다 다릅니다(All-Reduce로 평균되지 않음). {after}"
    if forwards and not forwards[-1]["grad_sync"]:
        flags = [e for e in view.events(0, "flag") if e["t"] <= forwards[-1]["t"]]
        flag = flags[-1] if flags else None
        site = flag["site"] if flag else forwards[-1]["site"]
        how = ("`no_sync()` 안에서" if flag and flag["via"] == "no_sync" else
               f"`require_backward_grad_sync`가 False인 채로({where(site)}에서 바꿈)")
        measured = (f"스텝 {step} 전의 마지막 순전파({where(forwards[-1]['site'])})가 {how} 실행되어 그 역전파가 그래디언트를 "
                    f"All-Reduce하지 않았습니다. 마이크로 스텝 {len(forwards)}개 중 동기화한 것: "
                    f"{sum(e['grad_sync'] for e in forwards)}개. {base}")
        fix = ("DDP는 순전파가 끝날 때 이번 역전파에서 동기화할지 정합니다. 마지막 마이크로 스텝의 순전파는 `no_sync()` 밖에서 "
               "하세요. 플래그를 직접 바꾼다면 순전파 *앞에서*: `model.require_backward_grad_sync = (micro_step == K - 1)` "
               "다음 줄에서 `loss = model(x)`(역전파 직전에 바꾸면 이미 늦습니다).")
        return finding("unsynced_step", "동기화 없이 스텝: 마지막 마이크로 스텝이 그래디언트를 All-Reduce하지 않았습니다",
                       ranks, site, measured, fix, microsteps=len(forwards),
                       synced=sum(bool(e["grad_sync"]) for e in forwards), data=data)
    if not any(e["op"] == "DDP" for e in view.events(0, "sync")):
        measured = f"모델이 DistributedDataParallel로 감싸여 있지 않습니다(DDP 생성 없음). {base}"
        fix = ("`model = DDP(model)`(GPU에서는 `device_ids=[local_rank]`)로 감싸고 그 `model`로 순전파하세요: 역전파가 "
               "그래디언트를 All-Reduce로 평균합니다.")
        return finding("replicas_differ", "복제본이 달라집니다: 그래디언트가 평균되지 않습니다(DDP 없음)", ranks, step_site,
                       measured, fix, data=data)
    in_ddp = pre[0].get("in_ddp") or []
    names = _names(view, pre[0]["opt"])
    outside = [names[i] for i, inside in enumerate(in_ddp) if not inside and i < len(names)]
    if name in outside:
        measured = (f"`{name}`은(는) 옵티마이저에는 있지만 DDP가 감싼 모듈에는 없어 그래디언트가 동기화되지 않습니다. {base}")
        fix = "그 파라미터를 가진 모듈도 DDP가 감싼 모델 안에 넣으세요(예: 헤드를 모델의 속성으로)."
        return finding("replicas_differ", "복제본이 달라집니다: DDP 밖의 파라미터", ranks, step_site, measured, fix,
                       outside=outside, data=data)
    measured = f"{base} 순전파는 동기화를 켠 채였습니다: 그래디언트를 스텝 전에 랭크마다 다르게 바꾸는 코드가 있는지 보세요."
    fix = "역전파 뒤, step() 전에 그래디언트를 랭크마다 다르게 바꾸지 마세요(랭크 번호에 따른 스케일, 한 랭크에서만 자르기 등)."
    return finding("replicas_differ", "복제본이 달라집니다: 그래디언트가 랭크마다 다릅니다", ranks, step_site, measured, fix,
                   data=data)
