"""labs.comms.CollectiveCounter sees exactly the work items the process group ran: the calls this
test makes itself, and DDP's bucketed All-Reduce launched from C++ (every gradient element once)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from labs.comms import CollectiveCounter


@pytest.fixture
def group_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_explicit_calls_are_counted_in_order_with_size_and_dtype(group_of_one):
    with CollectiveCounter() as counter:
        dist.all_reduce(torch.zeros(3, 4))
        torch.randn(50, 50) @ torch.randn(50, 50)  # 집합 통신이 아닌 연산은 세지 않는다
        dist.broadcast(torch.zeros(7, dtype=torch.int64), 0)
        dist.all_reduce(torch.zeros(2, dtype=torch.float64))
        dist.barrier()
    assert counter.items[:3] == [{"op": "all_reduce", "numel": 12, "dtype": "float32"},
                                 {"op": "broadcast", "numel": 7, "dtype": "int64"},
                                 {"op": "all_reduce", "numel": 2, "dtype": "float64"}]
    assert counter.counts["all_reduce"] == 2 and counter.counts["broadcast"] == 1
    assert counter.counts["barrier"] == 1 and counter.total == 4


def test_ddp_backward_reduces_every_gradient_element_once(group_of_one):
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*[nn.Linear(16, 16) for _ in range(5)]),
                                                bucket_cap_mb=0.002)
    elements = sum(p.numel() for p in model.parameters())
    with CollectiveCounter() as counter:
        for _ in range(3):
            model(torch.randn(4, 16)).sum().backward()
    reduced = [item for item in counter.items if item["op"] == "all_reduce"]
    assert len(reduced) >= 3 * 2  # 작은 bucket_cap_mb: 역전파마다 버킷이 여럿
    assert sum(item["numel"] for item in reduced) == 3 * elements
    assert {item["dtype"] for item in reduced} == {"float32"}
