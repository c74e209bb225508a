"""Broken: batches drawn by hand (no DataLoader) from a generator seeded the same on every rank, so all ranks
train on identical batches: N times the compute for one rank's worth of data."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)  # stands for a dataset read from disk: the same on every rank
data_x, data_y = torch.randn(200, 4), torch.randn(200, 1)
generator = torch.Generator().manual_seed(42)
model = DDP(torch.nn.Linear(4, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def get_batch(batch_size=8):
    index = torch.randint(0, len(data_x), (batch_size,), generator=generator)
    return data_x[index], data_y[index]


for it in range(5):
    x, y = get_batch()
    loss = torch.nn.functional.mse_loss(model(x), y)  # doctor: same_batch
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
