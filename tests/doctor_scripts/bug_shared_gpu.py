"""Broken: a GPU script that never picks its rank's GPU (no set_device, no LOCAL_RANK): `.cuda()` means the
current device, cuda:0, on every rank."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group(backend="nccl")
model = torch.nn.Linear(4, 1).cuda()  # doctor: shared_gpu
model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
    x, y = x.cuda(), y.cuda()
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
dist.destroy_process_group()
