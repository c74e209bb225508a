"""Broken: a model with a second head that the forward never uses, wrapped without find_unused_parameters:
DDP's reducer waits for gradients that never come and fails on the next forward."""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(6, 16)
        self.classify = nn.Linear(16, 3)
        self.regress = nn.Linear(16, 1)  # defined, never used in forward

    def forward(self, x):
        return self.classify(torch.relu(self.trunk(x)))


dist.init_process_group("gloo")
model = DDP(TwoHeads())  # doctor: unused_parameters
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(32, 6), torch.randint(0, 3, (32,)))
for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
dist.destroy_process_group()
