"""Train a small MLP on scikit-learn's handwritten digits on one device (a GPU if there is one, else the CPU).

    python recipe/train_single.py               # 6 epochs; the checkpoint train_single.pt goes to this folder
    python recipe/train_single.py --epochs 12   # run again: it resumes from the checkpoint

recipe/train_ddp.py is this file with the lines DDP needs; chapter 14 of the course shows them one by one.
"""

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, TensorDataset

parser = argparse.ArgumentParser(description="손글씨 숫자(digits)를 작은 MLP로 학습합니다.")
parser.add_argument("--epochs", type=int, default=6, help="학습할 에폭 수 (체크포인트가 있으면 그 뒤부터)")
parser.add_argument("--batch", type=int, default=96, help="B: 옵티마이저 스텝 하나의 샘플 수")
parser.add_argument("--accum", type=int, default=2, help="K: 스텝 하나를 나눠 계산할 마이크로배치 수")
parser.add_argument("--lr", type=float, default=0.1, help="학습률")
parser.add_argument("--clip", type=float, default=1.0, help="그래디언트 노름의 최댓값")
parser.add_argument("--seed", type=int, default=0, help="모델 초기화와 데이터 순서의 시드")
parser.add_argument("--ckpt", default=Path(__file__).with_suffix(".pt").name, help="체크포인트 파일 (있으면 이어서 학습)")


def digits(device: torch.device) -> tuple[TensorDataset, tuple[torch.Tensor, torch.Tensor]]:
    """The 1,797 images bundled with scikit-learn (no download): 1,440 to train and 357 to test, a fixed split."""
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y)  # 픽셀 값 0–16 → 0–1
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))  # 학습/시험 나누기는 늘 같다
    train, test = order[:1440], order[1440:]
    return TensorDataset(x[train], y[train]), (x[test].to(device), y[test].to(device))


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """(correct, total) on the test set."""
    model.eval()
    counts = torch.tensor([int((model(x).argmax(1) == y).sum()), len(y)], device=x.device)
    return int(counts[0]), int(counts[1])


def save(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
         epoch: int) -> None:
    """Write the checkpoint atomically: a crash while writing leaves the previous file whole."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
             "epoch": epoch}
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # 이름 바꾸기는 한 번에 일어난다: 옛 파일 아니면 새 파일


def main() -> None:
    args = parser.parse_args()
    on_gpu = torch.cuda.is_available()  # fp16 autocast는 GPU에서만: CPU에서는 autocast를 끄고 fp32로 계산한다
    K = args.accum
    device = torch.device("cuda" if on_gpu else "cpu")
    if args.batch % K:
        parser.error(f"--batch {args.batch}이(가) --accum {K}으로 나누어떨어지지 않습니다. 예: --batch {K * 48}")
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # CPU에서도 켜 둔다: 손실에 2^16을 곱했다가 그래디언트를 2^16으로 나누므로 fp32 값은 그대로이고, GPU와 같은 줄을 지난다
    scaler = torch.amp.GradScaler(device.type)
    start = 0
    if os.path.exists(args.ckpt):  # 이어서 학습: 모델, 모멘텀, 손실 배율, 끝난 에폭 수
        state = torch.load(args.ckpt, map_location=device)  # 저장한 장치가 아니라 지금 이 프로세스의 장치로
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        start = state["epoch"]
    train_set, test = digits(device)
    generator = torch.Generator()
    sampler = RandomSampler(train_set, generator=generator)
    loader = DataLoader(train_set, batch_size=args.batch, sampler=sampler, drop_last=True, pin_memory=on_gpu)
    for epoch in range(start, args.epochs):
        generator.manual_seed(args.seed + epoch)  # 에폭마다 다른 순서, 다시 실행해도 같은 순서
        model.train()
        loss_sum, count = torch.zeros((), device=device), 0
        for x, y in loader:  # 옵티마이저 스텝 하나의 배치
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            for k, (xk, yk) in enumerate(zip(x.chunk(K), y.chunk(K))):
                with torch.autocast(device.type, dtype=torch.float16, enabled=on_gpu):
                    loss = F.cross_entropy(model(xk), yk)
                scaler.scale(loss / K).backward()  # K개 평균의 평균 = 배치 B개의 평균
                loss_sum += loss.detach() * len(yk)
                count += len(yk)
            scaler.unscale_(optimizer)  # 자르기 전에 배율을 걷어 낸다: 자르는 것은 진짜 그래디언트
            nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            scaler.step(optimizer)  # inf·NaN이 있으면 이 스텝을 건너뛴다
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        mean_loss = loss_sum.item() / count
        correct, total = evaluate(model, *test)
        print(f"에폭 {epoch + 1}/{args.epochs}  손실 {mean_loss:.4f}  테스트 정확도 {correct}/{total}", flush=True)
        save(args.ckpt, model, optimizer, scaler, epoch + 1)


if __name__ == "__main__":
    main()
