"""Fails by itself (not a DDP mistake): a KeyError in the reader's own code on every rank."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
config = {"lr": 0.1}
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=config["learning_rate"])  # doctor: failure
