"""Broken: rank 0 reads the configuration and broadcasts it, but the broadcast sits inside `if rank == 0:`,
so the other ranks never receive it: they go on to build DDP while rank 0 waits in the broadcast."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def load_config(rank):
    config = [{"lr": 0.1, "hidden": 8}]
    if rank == 0:
        config[0]["lr"] = 0.05  # e.g. read from a file only rank 0 can see
        dist.broadcast_object_list(config, src=0)  # doctor: collective_mismatch
    return config[0]


def main():
    dist.init_process_group("gloo")
    config = load_config(dist.get_rank())
    model = DistributedDataParallel(torch.nn.Linear(4, config["hidden"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
