"""A correct DDP script written as plain top-level code (CPU, gloo): DistributedSampler with set_epoch,
the loss logged as a global mean on rank 0, rank 0 saving the weights behind a barrier."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
data = TensorDataset(torch.randn(96, 10), torch.randint(0, 3, (96,)))
sampler = DistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = DDP(torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    sampler.set_epoch(epoch)
    total = torch.zeros(2)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += torch.tensor([loss.item() * len(y), len(y)])
    dist.all_reduce(total)
    if rank == 0:
        print(f"epoch {epoch}: loss {total[0] / total[1]:.4f}")
if rank == 0:
    torch.save(model.module.state_dict(), os.path.join(os.getcwd(), "plain.pt"))
dist.barrier()
dist.destroy_process_group()
