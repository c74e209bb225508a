"""Broken: a metric all-reduced inside `if rank == 0:`, so rank 0 waits in an All-Reduce the other ranks
never call (they go on to the next step's gradient All-Reduce): the job hangs."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data))
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0 and step % 2 == 1:
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # doctor: collective_mismatch
        print(f"step {step}: mean loss {mean.item() / dist.get_world_size():.4f}")
dist.destroy_process_group()
