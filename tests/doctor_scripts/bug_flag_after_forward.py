"""Broken: nanoGPT's gradient-sync flag set after the forward instead of before it. DDP reads the flag when
the forward ends, so the last micro-step runs without sync and each rank steps with its own gradients."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(100 + rank)  # every rank draws its own batches
model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
grad_accum = 2
for it in range(4):
    for micro_step in range(grad_accum):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        loss = torch.nn.functional.mse_loss(model(x), y) / grad_accum
        model.require_backward_grad_sync = micro_step == grad_accum - 1  # doctor: unsynced_step
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
dist.destroy_process_group()
