"""One real DDP training program: classify 8×8 handwritten digits with a small MLP.

    torchrun --nproc_per_node=2 labs/ddp/train_script.py --epochs 5 --ckpt-dir /tmp/x
    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --standalone --nproc_per_node=2 --max-restarts=1 \
        labs/ddp/train_script.py --ckpt-dir /tmp/x --fail-at-epoch 3     # chapter 6.8
    python -m labs.ddp.train_script --epochs 5          # one process: a process group of one

It follows the six steps of DDP training: (1) replicate the model, (2) give every rank its own
mini-batches, (3) forward, (4) backward, (5) gradient All-Reduce (inside backward), (6) update.
Rank 0 logs, shows the progress bar and writes checkpoints; a restarted job resumes from the last
checkpoint and ends with the same parameters as an uninterrupted one, because the data order
depends only on (seed, epoch). The folder records the configuration its checkpoint was trained with
(``run_config.json``): another configuration is refused (exit 2) unless ``--fresh``, and while a run
holds the folder a second run is refused.

The functions are importable: the ``train`` lab of chapter 6 runs this same code on spawned ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable

if __package__ in (None, ""):  # run as a file (torchrun labs/ddp/train_script.py): import `labs` from the repo root
    sys.path[0] = str(Path(__file__).resolve().parents[2])

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from tqdm import tqdm

from labs.context import RankContext, device_for
from labs.tools.checkpoint_folder import CheckpointFolderError, checkpoint_folder
from labs.tools.models import fingerprint, flat_parameters, tiny_mlp
from labs.tools.primitives import device_ids, make_optimizer

# The settings that decide every step (with the world size): a checkpoint resumes only under the same ones.
RUN_SETTINGS = ("epochs", "global_batch", "lr", "momentum", "seed")
TEST_SIZE = 357  # 1,797 digits → 1,440 for training (divisible by 1, 2, 3, 4, 5, 6, 8, …) and 357 for testing
SPLIT_SEED = 0   # the train/test split never changes


class InjectedFault(RuntimeError):
    """The failure ``--fail-at-epoch`` injects on purpose (to show checkpoint and resume)."""


@dataclass
class TrainConfig:
    epochs: int = 6
    global_batch: int = 96     # B: samples per step over all ranks; each rank takes B // N
    lr: float = 0.1            # η
    momentum: float = 0.9      # SGD momentum: optimizer state that a checkpoint must keep
    seed: int = 0              # model init and data order: (seed, epoch) fixes every batch
    ckpt_dir: str = ""         # "" = no checkpoints
    fail_at_epoch: int = 0     # fault injection: the last rank raises midway through this epoch (1-based)
    progress: bool = False     # rank 0's tqdm bar and log lines
    fresh: bool = False        # drop the folder's old checkpoint and start from epoch 0


def run_config(cfg: TrainConfig, world_size: int) -> dict:
    """What a checkpoint folder records next to its checkpoint (:data:`labs.tools.checkpoint_folder.CONFIG_NAME`)."""
    settings = asdict(cfg)
    return {**{name: settings[name] for name in RUN_SETTINGS}, "world_size": world_size}


def init_distributed() -> RankContext:
    """Join the process group torchrun describes in the environment (or a group of one)."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # GPU 노드: 랭크마다 GPU 하나. 번호는 노드 안의 번호(LOCAL_RANK)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = device_for(backend, local_rank)  # cuda:LOCAL_RANK (set_device까지) 또는 CPU
    if "MASTER_ADDR" in os.environ:
        # torchrun이 RANK, WORLD_SIZE, MASTER_ADDR/PORT를 넣어 주었다
        bound = device if device.type == "cuda" else None
        dist.init_process_group(backend, device_id=bound)
    else:
        # python -m labs.ddp.train_script: 프로세스 하나짜리 그룹 (랑데부 필요 없음)
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return RankContext(rank, world_size, local_rank, backend, device)


def load_digits_split() -> tuple[TensorDataset, TensorDataset]:
    """scikit-learn's bundled digits (no download), a fixed stratified split, standardized pixels."""
    # scikit-learn은 데이터를 읽을 때만 불러온다: import에 몇 초가 걸리는데, `python -m labs`의 다른 명령은 쓰지 않는다
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_SIZE, random_state=SPLIT_SEED,
                                                        stratify=y)
    scaler = StandardScaler().fit(x_train)  # 평균과 표준편차는 학습 데이터에서만 잰다

    def tensors(x, y) -> TensorDataset:
        return TensorDataset(torch.tensor(scaler.transform(x), dtype=torch.float32), torch.tensor(y))

    return tensors(x_train, y_train), tensors(x_test, y_test)


def make_model(cfg: TrainConfig, device: torch.device) -> nn.Module:
    torch.manual_seed(cfg.seed)
    return tiny_mlp(64, 64, 10).to(device)  # 64픽셀 → 은닉 64 → 숫자 10개


def make_ddp_model(cfg: TrainConfig, ctx: RankContext) -> DDP:
    model = make_model(cfg, ctx.device)
    # 1단계 복제: DDP 생성자가 랭크 0의 파라미터를 모든 랭크에 브로드캐스트한다
    return DDP(model, device_ids=device_ids(ctx.device))


def sgd(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Momentum SGD: the momentum buffer is optimizer state that a checkpoint must keep."""
    return make_optimizer("sgd", model.parameters(), cfg.lr, momentum=cfg.momentum)


def per_rank_batch(cfg: TrainConfig, world_size: int) -> int:
    return max(1, cfg.global_batch // world_size)


def make_loader(dataset: TensorDataset, cfg: TrainConfig, world_size: int, rank: int,
                pin_memory: bool = False) -> tuple[DistributedSampler, DataLoader]:
    """Rank ``rank``'s share: a shuffled, non-overlapping 1/N, cut into B/N mini-batches."""
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(dataset, batch_size=per_rank_batch(cfg, world_size),
                        sampler=sampler, pin_memory=pin_memory)
    return sampler, loader


def train_one_epoch(model: nn.Module, batches: Iterable, optimizer: torch.optim.Optimizer,
                    device: torch.device) -> tuple[torch.Tensor, int]:
    """One pass over ``batches``; returns this process's (sum of sample losses, count)."""
    loss_sum, count = torch.zeros((), device=device), 0
    for x, y in batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        # 3단계 순전파: 통신 없음. L_i = 미니배치 B/N개의 평균 손실
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        # 4단계 역전파 + 5단계 All-Reduce: DDP의 훅이 g = (1/N) Σ g_i 를 모든 랭크에 만든다
        loss.backward()
        # 6단계 업데이트 w ← w − η g: 모든 랭크가 같은 g로 같은 계산
        optimizer.step()
        # .item()을 스텝마다 부르면 GPU가 매번 멈춘다: 텐서로 모아 두었다가 한 번에
        loss_sum += loss.detach() * len(y)
        count += len(y)
    return loss_sum, count


def global_mean(loss_sum: torch.Tensor, count: int, device: torch.device) -> float:
    """The epoch's loss averaged over all ranks: All-Reduce the sum and the count."""
    totals = torch.tensor([loss_sum.item(), count], dtype=torch.float64, device=device)
    # 합과 개수를 따로 더해야 랭크마다 샘플 수가 달라도 전역 평균이 된다
    dist.all_reduce(totals)
    return (totals[0] / totals[1]).item()


@torch.no_grad()  # 평가: 그래디언트 그래프를 만들지 않는다
def count_correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    return int((model(x).argmax(dim=1) == y).sum())


def evaluate(model: nn.Module, dataset: TensorDataset, ctx: RankContext) -> tuple[int, int]:
    """Test accuracy, shared out: each rank scores every N-th sample, All-Reduce the counts."""
    x, y = (t[ctx.rank::ctx.world_size].to(ctx.device) for t in dataset.tensors)
    counts = torch.tensor([count_correct(model, x, y), len(y)], device=ctx.device)
    dist.all_reduce(counts)
    return int(counts[0]), int(counts[1])


def save_checkpoint(path: Path, model: DDP, optimizer: torch.optim.Optimizer, epoch: int,
                    history: list[dict], ctx: RankContext) -> None:
    """Rank 0 writes atomically; every rank waits at the barrier until it is on disk."""
    if ctx.rank == 0:
        # 복제본이 모두 같으므로 한 랭크만 쓴다 (N개가 같은 파일에 쓰면 서로 덮어쓴다)
        state = {"epoch": epoch, "model": model.module.state_dict(),
                 "optimizer": optimizer.state_dict(), "history": history}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        # 원자적 교체: 도중에 죽어도 옛 파일이나 새 파일, 둘 중 하나만 온전히 남는다
        os.replace(tmp, path)
    # 이 줄을 지난 랭크는 에폭 `epoch`의 체크포인트가 디스크에 있다고 믿어도 된다
    dist.barrier()


def load_checkpoint(path: Path, model: DDP, optimizer: torch.optim.Optimizer,
                    ctx: RankContext) -> tuple[int, list[dict]]:
    """Every rank loads the last checkpoint, if any: (epochs already done, history)."""
    if not path.exists():
        return 0, []
    # 저장한 장치(랭크 0의 cuda:0)가 아니라 이 랭크의 장치로 올린다
    state = torch.load(path, map_location=ctx.device)
    model.module.load_state_dict(state["model"])
    # 모멘텀 버퍼도 이어받아야 끊기지 않은 학습과 같은 길을 간다
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"], state["history"]


def fail_midway(batches: Iterable, epoch: int, ctx: RankContext) -> Iterable:
    """Yield about half of ``batches``, then raise: a process dying in the middle of an epoch."""
    batches = list(batches)
    yield from batches[:len(batches) // 2]
    raise InjectedFault(f"의도한 고장: 에폭 {epoch}의 {len(batches) // 2 + 1}번째 스텝에서 "
                        f"랭크 {ctx.rank} 프로세스가 죽었습니다")


def log(ctx: RankContext, cfg: TrainConfig, message: str) -> None:
    # 로그는 랭크 0만: N개 프로세스가 같은 줄을 N번 찍지 않게
    if ctx.rank == 0 and cfg.progress:
        tqdm.write(message, file=sys.stdout)  # 진행 막대(stderr)를 지우고 쓴 뒤 다시 그린다
        sys.stdout.flush()


def train(cfg: TrainConfig, ctx: RankContext, train_set: TensorDataset, test_set: TensorDataset,
          on_epoch_end: Callable[[int, DistributedSampler], None] | None = None,
          ) -> tuple[DDP, list[dict], int]:
    """The whole DDP training; returns (model, per-epoch history, epochs done before)."""
    model = make_ddp_model(cfg, ctx)  # 1단계 복제
    optimizer = sgd(model, cfg)
    # 2단계: 랭크마다 겹치지 않는 1/N을 B/N개씩
    sampler, loader = make_loader(train_set, cfg, ctx.world_size, ctx.rank,
                                  pin_memory=ctx.device.type == "cuda")
    with checkpoint_folder(cfg.ckpt_dir, run_config(cfg, ctx.world_size), cfg.fresh, ctx) as ckpt:  # 다른 설정의 폴더는 거절
        start, history = load_checkpoint(ckpt, model, optimizer, ctx) if ckpt else (0, [])
        if start:
            log(ctx, cfg, f"체크포인트에서 이어서 학습: 에폭 {start}까지 끝났으므로 에폭 {start + 1}부터")
        # 진행 막대도 랭크 0만
        epochs = tqdm(range(start, cfg.epochs), initial=start, total=cfg.epochs, desc="에폭",
                      disable=not (ctx.rank == 0 and cfg.progress))
        for epoch in epochs:
            # 섞는 순서 = randperm(seed + epoch): 에폭마다 다르고, 재시작해도 같다
            sampler.set_epoch(epoch)
            faulty = cfg.fail_at_epoch == epoch + 1 and ctx.rank == ctx.world_size - 1
            batches = fail_midway(loader, epoch + 1, ctx) if faulty else loader
            # 3–6단계
            loss_sum, count = train_one_epoch(model, batches, optimizer, ctx.device)
            correct, total = evaluate(model.module, test_set, ctx)
            loss = global_mean(loss_sum, count, ctx.device)
            history.append({"epoch": epoch + 1, "loss": loss, "correct": correct, "total": total})
            if on_epoch_end is not None:
                on_epoch_end(epoch, sampler)
            if ckpt:
                save_checkpoint(ckpt, model, optimizer, epoch + 1, history, ctx)
            epochs.set_postfix(loss=f"{loss:.4f}", acc=f"{correct / total:.1%}")
            log(ctx, cfg, f"에폭 {epoch + 1}/{cfg.epochs} · 손실 {loss:.4f} · "
                          f"테스트 정확도 {correct / total:.1%} ({correct}/{total})")
        return model, history, start


def run_summary(model: DDP, history: list[dict], start: int, ctx: RankContext) -> dict:
    """What a run ended with, as plain data: compared across runs (uninterrupted vs resumed)."""
    params = flat_parameters(model.module)
    return {"world_size": ctx.world_size, "resumed_from": start, "fingerprint": fingerprint(model.module),
            "checksum": float(params.sum()), "params": params.tolist(), "history": history}


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(description="DDP로 손글씨 숫자 분류기를 학습합니다 (torchrun으로 실행).")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--global-batch", type=int, default=defaults.global_batch, help="전역 배치 B")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--momentum", type=float, default=defaults.momentum)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--ckpt-dir", default="", help="체크포인트 폴더 (비우면 저장하지 않음)")
    parser.add_argument("--fail-at-epoch", type=int, default=0,
                        help="첫 시도에서만 마지막 랭크가 이 에폭 중간에 죽는다 (0: 고장 없음)")
    parser.add_argument("--no-progress", action="store_true", help="진행 막대와 로그를 끈다")
    parser.add_argument("--fresh", action="store_true",
                        help="체크포인트 폴더의 옛 체크포인트를 지우고 처음부터 학습 (첫 시도에서만)")
    args = parser.parse_args(argv)
    return TrainConfig(args.epochs, args.global_batch, args.lr, args.momentum, args.seed, args.ckpt_dir,
                       args.fail_at_epoch, progress=not args.no_progress, fresh=args.fresh)


RESULT_PREFIX = "RESULT "  # rank 0's last line: run_summary() as JSON, read back by read_result()


def read_result(output: str) -> dict:
    """The one ``RESULT`` line in a run's standard output (torchrun's or a Slurm job's), as a dict."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    if len(lines) != 1:
        raise ValueError(f"RESULT 줄이 하나여야 하는데 {len(lines)}개입니다:\n{output[-2000:]}")
    return json.loads(lines[0][len(RESULT_PREFIX):])


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    ctx = init_distributed()
    # torchrun이 랭크들을 다시 띄울 때마다 1씩 늘린다
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if restarts > 0:
        cfg.fail_at_epoch, cfg.fresh = 0, False  # 주입한 고장과 새로 시작(--fresh)은 첫 시도에서만
    try:
        log(ctx, cfg, f"시작: 월드 크기 {ctx.world_size} · 장치 {ctx.device} · "
                      f"랭크당 배치 {per_rank_batch(cfg, ctx.world_size)} · 재시작 횟수 {restarts}")
        train_set, test_set = load_digits_split()
        model, history, start = train(cfg, ctx, train_set, test_set)
        if ctx.rank == 0:
            summary = {**run_summary(model, history, start, ctx), "restarts": restarts}
            print(RESULT_PREFIX + json.dumps(summary), flush=True)
    except CheckpointFolderError as err:  # 쓸 수 없는 체크포인트 폴더: 학습하지 않고 잘못된 입력(2)으로 끝난다
        if ctx.rank == 0:
            print(err, file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
