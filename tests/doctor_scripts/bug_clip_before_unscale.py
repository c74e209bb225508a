"""Broken: a GPU script (nccl, .cuda(), torch.cuda.amp) that clips the gradients the GradScaler multiplied,
before scaler.unscale_: the clipping threshold is compared with gradients 65536 times too large."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = DDP(torch.nn.Linear(8, 2).cuda(), device_ids=[local_rank])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.cuda.amp.GradScaler()
data = TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
sampler = DistributedSampler(data)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, batch_size=8, sampler=sampler):
        x, y = x.cuda(), y.cuda()
        with torch.cuda.amp.autocast(dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # doctor: clip_scaled
        scaler.step(optimizer)
        scaler.update()
dist.destroy_process_group()
