"""A correct nanoGPT-style DDP script: an iteration-count loop over an endless DataLoader iterator (set_epoch
at each new pass), the gradient sync flag set before each micro-step's forward, and a GradScaler on the CPU."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="gloo")
    rank = int(os.environ["RANK"])
else:
    rank = 0
torch.manual_seed(1337)
max_iters, grad_accum = 6, 2
dataset = TensorDataset(torch.randn(64, 5), torch.randn(64, 1))
sampler = DistributedSampler(dataset) if ddp else None
loader = DataLoader(dataset, batch_size=4, sampler=sampler, shuffle=sampler is None)


def batches():
    epoch = 0
    while True:
        if sampler is not None:
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


model = torch.nn.Linear(5, 1)
if ddp:
    model = DDP(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
scaler = torch.amp.GradScaler("cpu")
stream = batches()
for it in range(max_iters):
    for micro_step in range(grad_accum):
        if ddp:
            model.require_backward_grad_sync = micro_step == grad_accum - 1
        x, y = next(stream)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x).float(), y) / grad_accum
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if rank == 0 and it % 3 == 0:
        print(f"iter {it}: loss {loss.item() * grad_accum:.4f}")
if ddp:
    dist.destroy_process_group()
