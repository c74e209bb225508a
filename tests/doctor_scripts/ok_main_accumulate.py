"""A correct DDP script with main() and argparse: the device picked with torch.cuda.is_available(), gradient
accumulation with no_sync on all micro-steps but the last, and evaluation on every rank."""
import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    return parser.parse_args()


def evaluate(model, loader, device):
    model.eval()
    correct = torch.zeros(2, device=device)
    with torch.no_grad():
        for x, y in loader:
            correct += torch.tensor([(model(x.to(device)).argmax(1) == y.to(device)).sum().item(), len(y)], device=device)
    dist.all_reduce(correct)
    model.train()
    return (correct[0] / correct[1]).item()


def main():
    args = parse_args()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    torch.manual_seed(7)
    train = TensorDataset(torch.randn(80, 6), torch.randint(0, 2, (80,)))
    test = TensorDataset(torch.randn(40, 6), torch.randint(0, 2, (40,)))
    train_sampler = DistributedSampler(train)
    train_loader = DataLoader(train, batch_size=args.batch_size, sampler=train_sampler, drop_last=True)
    test_loader = DataLoader(test, batch_size=20, sampler=DistributedSampler(test, shuffle=False))
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(train_loader):
            last = (i + 1) % args.accumulate == 0
            with contextlib.nullcontext() if last else model.no_sync():
                loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)) / args.accumulate
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
        accuracy = evaluate(model, test_loader, device)
        if dist.get_rank() == 0:
            print(f"epoch {epoch} accuracy {accuracy:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
