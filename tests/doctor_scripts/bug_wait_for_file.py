"""Broken: the other ranks poll for a file that rank 0 writes only after an All-Reduce the pollers never
reach, so rank 0 waits in the All-Reduce and the others wait for the file: the job hangs."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
ready = "vocab.ready"
if rank != 0:
    while not os.path.exists(ready):
        time.sleep(0.2)  # doctor: collective_mismatch
size = torch.tensor([1000.0])
dist.all_reduce(size)
if rank == 0:
    open(ready, "w").close()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(4, 3)).sum().backward()
optimizer.step()
dist.destroy_process_group()
