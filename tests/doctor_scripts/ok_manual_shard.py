"""A correct DDP script that shards its data by hand (each rank keeps every N-th sample in its own
TensorDataset) and evaluates the full validation set on every rank without a sampler."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(5)
features, targets = torch.randn(60, 3), torch.randn(60, 1)
shard = TensorDataset(features[rank::world], targets[rank::world])
train_loader = DataLoader(shard, batch_size=5, shuffle=True, generator=torch.Generator().manual_seed(rank))
val_loader = DataLoader(TensorDataset(features[:20], targets[:20]), batch_size=10)
model = DDP(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        val = sum(torch.nn.functional.mse_loss(model(x), y, reduction="sum") for x, y in val_loader) / 20
    if rank == 0:
        print(f"epoch {epoch}: val {val:.4f}")
dist.destroy_process_group()
