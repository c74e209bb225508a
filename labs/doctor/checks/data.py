"""Data split across ranks: the samples each rank's DataLoader yielded in each training pass compared across
ranks (by content, and by dataset index where every rank indexes the same dataset), the order of consecutive
passes of a shuffling ``DistributedSampler`` (``set_epoch``), and, for data that comes from no DataLoader, the
inputs of each DDP forward (the same batch on every rank)."""

from __future__ import annotations

from collections import defaultdict

from ..findings import Finding, finding, where
from .view import Event, View

SAMPLER_FIX = ("`sampler = DistributedSampler(dataset)`를 만들어 `DataLoader(dataset, batch_size=b, sampler=sampler)`로 "
               "주세요(`shuffle=True`는 빼고 섞기는 샘플러가 합니다). 그러면 랭크마다 전체의 1/N씩 겹치지 않게 받습니다.")


def _passes(view: View, rank: int) -> dict[tuple[int, int], list[Event]]:
    """The batches of each (loader, pass) of the rank that trained: an optimizer step happened while it was the
    loader being read (between its first batch and the next batch of any loader after its last)."""
    batches = view.events(rank, "batch")
    final = view.steps(rank)
    passes: dict[tuple[int, int], list[Event]] = defaultdict(list)
    last: dict[tuple[int, int], int] = {}  # the position of each pass's last batch among all the rank's batches
    for position, e in enumerate(batches):
        passes[(e["loader"], e["n"])].append(e)
        last[(e["loader"], e["n"])] = position
    trained = {}
    for key, items in passes.items():
        after = batches[last[key] + 1]["step"] if last[key] + 1 < len(batches) else final
        trained[key] = items[-1]["step"] > items[0]["step"] or after > items[-1]["step"]
    return {k: v for k, v in passes.items() if trained[k]}


def _loaders(view: View, rank: int) -> dict[int, Event]:
    return {e["loader"]: e for e in view.events(rank, "loader")}


def _ids(batches: list[Event], by_index: bool) -> list[object]:
    if by_index:
        return [i for b in batches for i in b["ids"]]
    return [h for b in batches for h in b["samples"]]


def check(view: View) -> list[Finding]:
    if view.nproc < 2:
        return []
    found = _overlap(view)
    found += _same_order(view)
    if not found:
        found += _same_batch(view)
    return found


def _overlap(view: View) -> list[Finding]:
    passes = [_passes(view, r) for r in range(view.nproc)]
    loaders = [_loaders(view, r) for r in range(view.nproc)]
    tolerance = view.nproc - 1  # DistributedSampler pads the last round with up to N-1 repeated samples
    for key in sorted(passes[0]):
        if not all(key in p for p in passes):
            continue
        loader = key[0]
        same_data = len({str(loaders[r].get(loader, {}).get("dataset")) for r in range(view.nproc)}) == 1
        by_index = same_data and all(b["ids"] is not None for p in passes for b in p[key])
        for other in range(1, view.nproc):
            for method, use_index in (("index", True), ("content", False)):
                if use_index and not by_index:
                    continue
                mine, theirs = _ids(passes[0][key], use_index), _ids(passes[other][key], use_index)
                common = set(mine) & set(theirs)
                if len(common) > tolerance:
                    return [_overlap_finding(view, loaders[0][loader], key[1], other, mine, common, method,
                                             loaders[other][loader])]
    return []


def _overlap_finding(view: View, loader: Event, number: int, other: int, mine: list[object], common: set[object],
                     method: str, theirs: Event) -> Finding:
    sampler = loader["sampler"]
    examples = ", ".join(str(i) for i in sorted(common, key=lambda v: (str(type(v)), v))[:5]) if method == "index" else ""
    seen = len(set(mine))
    measured = (f"에폭(패스) {number + 1}에서 랭크 0이 본 샘플 {seen}개 중 {len(common)}개를 랭크 {other}도 봤습니다"
                + (f"(데이터셋 번호 예: {examples})" if examples else "(샘플 내용의 지문으로 비교)") + ". "
                f"샘플러: {sampler['type']}.")
    if sampler["type"] != "DistributedSampler":
        fix = SAMPLER_FIX
    elif sampler.get("num_replicas") != view.nproc or sampler.get("rank") == theirs["sampler"].get("rank"):
        fix = ("`DistributedSampler(dataset)`에 `num_replicas`·`rank`를 직접 주지 마세요(주려면 `dist.get_world_size()`·"
               "`dist.get_rank()`): 지금은 "
               f"num_replicas={sampler.get('num_replicas')}, rank={sampler.get('rank')}/{theirs['sampler'].get('rank')}입니다.")
    elif sampler.get("seed") != theirs["sampler"].get("seed"):
        fix = (f"`DistributedSampler`의 seed가 랭크마다 다릅니다({sampler.get('seed')}, {theirs['sampler'].get('seed')}): "
               "모든 랭크가 같은 순열을 나눠 가지려면 seed가 같아야 합니다.")
    else:
        fix = SAMPLER_FIX
    return finding("data_overlap", "랭크들이 같은 샘플을 봅니다: 데이터가 나뉘지 않았습니다", [0, other], loader["site"],
                   measured, fix, epoch=number + 1, overlap=len(common), seen=seen, method=method,
                   sampler=sampler["type"])


def _same_order(view: View) -> list[Finding]:
    loaders = _loaders(view, 0)
    passes = _passes(view, 0)
    pass_events = {(e["loader"], e["n"]): e for e in view.events(0, "pass")}
    for (loader, number), batches in sorted(passes.items()):
        info = loaders.get(loader)
        following = passes.get((loader, number + 1))
        if info is None or following is None or info["sampler"]["type"] != "DistributedSampler" \
                or not info["sampler"].get("shuffle"):
            continue
        by_index = all(b["ids"] is not None for b in batches + following)
        first, second = _ids(batches, by_index), _ids(following, by_index)
        length = min(len(first), len(second))
        if length >= 2 and first[:length] == second[:length]:
            epochs = (pass_events[(loader, number)]["epoch"], pass_events[(loader, number + 1)]["epoch"])
            site = pass_events[(loader, number + 1)]["site"]
            measured = (f"에폭 {number + 1}과 {number + 2}에서 랭크 0이 받은 샘플 {length}개의 순서가 같습니다: "
                        f"DistributedSampler의 epoch 값은 두 번 다 {epochs[1]}입니다(`set_epoch`을 부르지 않음).")
            fix = (f"에폭 루프에서 `{where(site)}` 앞에 `sampler.set_epoch(epoch)`을 부르세요: 샘플러는 seed + epoch로 "
                   "섞으므로 epoch 값이 그대로면 매 에폭 같은 순서로 같은 샘플을 같은 랭크에 줍니다.")
            return [finding("same_order", "매 에폭 같은 순서: set_epoch이 없습니다", [0], site, measured, fix,
                            epoch=number + 2, sampler_epoch=epochs[1], compared=length)]
    return []


def _same_batch(view: View) -> list[Finding]:
    """Training forwards whose inputs were identical on every rank (data drawn without a DataLoader)."""
    forwards = [[e for e in view.events(r, "forward") if e["grad"]] for r in range(view.nproc)]
    count = min(len(f) for f in forwards)
    if count == 0:
        return []
    same = [i for i in range(count) if len({f[i]["input"] for f in forwards}) == 1]
    if len(same) * 2 <= count:
        return []
    site = forwards[0][same[0]]["site"]
    measured = (f"학습 순전파 {count}번 중 {len(same)}번에서 모든 랭크의 입력이 비트 단위로 같았습니다"
                f"(첫 번째: {same[0] + 1}번째 순전파, {where(site)}).")
    fix = ("랭크마다 다른 데이터를 주세요: DataLoader라면 `DistributedSampler`, 직접 뽑는다면 랭크마다 다른 난수 "
           "(`torch.manual_seed(seed + rank)`처럼 데이터용 시드에 rank를 더하기; 모델 초기화는 DDP가 맞춥니다).")
    return [finding("same_batch", "모든 랭크가 같은 배치로 학습합니다", list(range(view.nproc)), site, measured, fix,
                    forwards=count, identical=len(same))]
