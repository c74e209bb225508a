"""Broken: an unchanged single-device training script launched on N ranks: no process group, no DDP, no
DistributedSampler: every rank trains its own copy on the whole dataset."""
import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
data = TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)  # doctor: data_overlap
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()  # doctor: no_process_group
torch.save(model.state_dict(), "single.pt")  # doctor: same_file
