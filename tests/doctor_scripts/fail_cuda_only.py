"""Fails on a machine without a GPU (not a DDP mistake): a CUDA call the doctor has no CPU stand-in for, asked
outside `if torch.cuda.is_available():`. The doctor says which line needs a GPU and how to guard it."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
memory = torch.cuda.get_device_properties(local_rank).total_memory  # doctor: failure
batch = 64 if memory > 40 * 2**30 else 16
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1).cuda(), device_ids=[local_rank])
dist.destroy_process_group()
