"""Grader reports on files written by others: the verdict and the real cause, in the report's own words.

Held-out files in the styles readers use (written here, not taken from the course's galleries):

- a correct ZeRO-1 optimizer whose owners go round-robin by index: the state is sharded but uneven, and the
  report names the largest-first assignment, not "every rank updates every parameter";
- DDP hooks on ``register_hook``, which run before ``p.grad`` is written: with a ``p.grad is None`` guard
  (nothing is ever reduced) and without one (the hook raises on ``None``); both are pointed to
  ``register_post_accumulate_grad_hook``;
- a DDP that waits only on the last handle of each iteration: rejected, with the line that drops the others,
  although gloo happens to finish them in order (the gradients are right);
- an FSDP built on ``dist.all_gather_into_tensor``, which torch 2.13 deprecates: it passes, torch's
  FutureWarning never prints above the report, and the report lists it under the reader's line.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import clean_env, write_source

import labs
from labs.errors import EXIT_OK
from labs.grading import diagnosis, failed_checks, report
from labs.grading.hints import CAUSES, HINTS_OF

pytestmark = pytest.mark.timeout(300)

SMALL = {"steps": 2}

ROUND_ROBIN = '''\
import torch
import torch.distributed as dist


class RoundRobin(torch.optim.Optimizer):
    """Parameter i belongs to rank i % N; each owner steps its parameters and broadcasts them."""

    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.make, self.kwargs = optimizer_cls, kwargs
        self.inner, self.owners, self.links = None, [], []
        super().__init__(params, kwargs)

    def add_param_group(self, group):
        super().add_param_group(group)
        full = self.param_groups[-1]
        mine = []
        for p in full["params"]:
            owner = len(self.owners) % self.n
            self.owners.append((p, owner))
            if owner == self.rank:
                mine.append(p)
        if mine:
            sub = {**{k: v for k, v in full.items() if k != "params"}, "params": mine}
            if self.inner is None:
                self.inner = self.make([sub], **self.kwargs)
            else:
                self.inner.add_param_group(sub)
            self.links.append((full, self.inner.param_groups[-1]))

    @torch.no_grad()
    def step(self, closure=None):
        for full, sub in self.links:
            sub["lr"] = full["lr"]
        if self.inner is not None:
            self.inner.step()
        for p, owner in self.owners:
            dist.broadcast(p, src=owner)
'''

HOOKS = '''\
import torch
import torch.distributed as dist
from torch import nn


class _Base(nn.Module):
    def __init__(self, module):
        super().__init__()
        self.module = module
        self.n = dist.get_world_size()
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t, 0)
        self.works = []
        for p in module.parameters():
            if p.requires_grad:
                self.hook(p)

    def hook(self, p):
        p.register_hook(lambda grad, p=p: self._reduce(p))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        for p, work in self.works:
            work.wait()
            p.grad.div_(self.n)
        self.works.clear()


class GuardedGradHook(_Base):
    def _reduce(self, p):
        if p.grad is not None:
            self.works.append((p, dist.all_reduce(p.grad, async_op=True)))


class GradHook(_Base):
    def _reduce(self, p):
        self.works.append((p, dist.all_reduce(p.grad, async_op=True)))


class LastHandleOnly(_Base):
    def hook(self, p):
        p.register_post_accumulate_grad_hook(self._reduce)

    def _reduce(self, p):
        self.works.append((p, dist.all_reduce(p.grad, async_op=True)))

    def finish_gradient_synchronization(self):
        self.works[-1][1].wait()             # 마지막 핸들만 기다린다
        for p, _ in self.works:
            p.grad.div_(self.n)
        self.works.clear()                   # 나머지 핸들은 기다리지 않고 버린다
'''

INTO_TENSOR = '''\
import torch
import torch.distributed as dist
from torch import nn


class IntoTensor(nn.Module):
    """Each Linear's weight in N padded shards; gathered with all_gather_into_tensor for forward and backward."""

    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module, self.n, self.rank = module, dist.get_world_size(), dist.get_rank()
        with torch.no_grad():
            for p in module.parameters():
                dist.broadcast(p, 0)
        self.shards, self.info = nn.ParameterList(), {}
        for name, layer in module.named_modules():
            if isinstance(layer, nn.Linear):
                w = layer.weight.detach()
                size = -(-w.numel() // self.n)
                flat = torch.zeros(size * self.n)
                flat[:w.numel()] = w.reshape(-1)
                shard = nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())
                self.shards.append(shard)
                del layer.weight
                full = torch.zeros(size * self.n, requires_grad=True)
                full.untyped_storage().resize_(0)
                full.register_post_accumulate_grad_hook(lambda t, layer=layer: self._reduce(layer))
                self.info[layer] = (name + ".weight", shard, full, w.shape, w.numel(), size)
                layer.register_forward_pre_hook(self._before)
                layer.register_forward_hook(self._after)

    def _gather(self, layer):
        _, shard, full, _, _, _ = self.info[layer]
        full.untyped_storage().resize_(full.numel() * full.element_size())
        dist.all_gather_into_tensor(full.data, shard.detach())

    def _before(self, layer, inputs):
        self._gather(layer)
        _, _, full, shape, numel, _ = self.info[layer]
        layer.weight = full[:numel].view(shape)

    def _after(self, layer, inputs, output):
        self.info[layer][2].untyped_storage().resize_(0)
        if output.requires_grad:
            output.register_hook(lambda grad: self._gather(layer))

    def _reduce(self, layer):
        _, shard, full, _, _, size = self.info[layer]
        summed = full.grad.clone()
        dist.all_reduce(summed)
        piece = summed[self.rank * size:(self.rank + 1) * size] / self.n
        shard.grad = piece.clone() if shard.grad is None else shard.grad + piece
        full.grad = None
        full.untyped_storage().resize_(0)

    def forward(self, x):
        return self.module(x)

    def finish_gradient_synchronization(self):
        for p in self.module.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= self.n

    @torch.no_grad()
    def gather_full_params(self):
        out = {name: p.detach().clone() for name, p in self.module.named_parameters()}
        for name, shard, _, shape, numel, size in self.info.values():
            flat = torch.empty(size * self.n)
            dist.all_gather_into_tensor(flat, shard.detach())
            out[name] = flat[:numel].view(shape)
        return out
'''


def part(result: labs.LabResult, name: str) -> str:
    """Class ``name``'s part of the report."""
    return next(p for p in report(result).split("채점: 클래스 ") if p.startswith(f"{name}("))


def cause_line(result: labs.LabResult, name: str) -> str:
    return next(line for line in part(result, name).splitlines() if line.startswith("가장 가능성 높은 원인"))


def line_of(source: str, code: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if code in line)


def test_an_uneven_owner_assignment_is_sharded_but_unbalanced(tmp_path):
    result = labs.grade(write_source(tmp_path, "zero_rr.py", ROUND_ROBIN), "RoundRobin", timeout=240, **SMALL)
    assert failed_checks(result, "RoundRobin") == {"state_divided"}, report(result)  # 결과는 맞다: 메모리만 고르지 않다
    cls = result.data["classes"][0]
    assert cls["causes"]["state_divided"]["key"] == "unbalanced" and cls["causes"]["state_divided"]["rank"] == 0, cls
    cause = cause_line(result, "RoundRobin")
    assert "상태는 나뉘었지만" in cause and "고르지 않습니다" in cause and "round-robin" in cause, cause
    assert "모든 랭크가 모든 파라미터를 업데이트" not in part(result, "RoundRobin")
    assert "가장 큰 텐서부터" in part(result, "RoundRobin") and "assign_to_ranks" in part(result, "RoundRobin")


@pytest.fixture(scope="module")
def hooks(tmp_path_factory):
    path = write_source(tmp_path_factory.mktemp("hooks"), "hooks.py", HOOKS)
    return labs.grade(path, ["GuardedGradHook", "GradHook", "LastHandleOnly"], timeout=240, **SMALL)


def test_a_tensor_hook_that_finds_no_gradient_is_pointed_to_the_post_accumulate_hook(hooks):
    """Guarded, nothing is reduced (every p.grad is this rank's own); unguarded, the hook raises on None."""
    guarded = next(c for c in hooks.data["classes"] if c["name"] == "GuardedGradHook")
    assert diagnosis(hooks, "GuardedGradHook") == "grads_averaged" and guarded["grad_cause"]["cause"] == "hook_before_grad"
    assert diagnosis(hooks, "GradHook") == "runs_without_error"
    assert "NoneType" in hooks.checks["GradHook.runs_without_error"].value
    for name, check in (("GuardedGradHook", "grads_averaged"), ("GradHook", "runs_without_error")):
        text = part(hooks, name)
        why, where = CAUSES["ddp"][check]["hook_before_grad"]
        assert f"가장 가능성 높은 원인 ({check}): {why}" in text and f"볼 곳: {where}" in text, text
        assert "register_post_accumulate_grad_hook" in where and "p.grad가 아닌 텐서" not in text, text


def test_waiting_on_the_last_handle_only_is_rejected_with_the_line_that_drops_the_rest(hooks):
    # Whether an unwaited All-Reduce has also finished by the time the gradient is read depends on load: the averaged
    # gradient and the result may be wrong too, but the report always names the dropped handles first.
    failed = failed_checks(hooks, "LastHandleOnly")
    assert "handles_waited" in failed and failed <= {"handles_waited", "grads_averaged", "matches_oracles"}, report(hooks)
    line = line_of(HOOKS, "# 나머지 핸들은 기다리지 않고 버린다")
    value = hooks.checks["LastHandleOnly.handles_waited"].value
    assert f"hooks.py {line}행 `self.works.clear()`" in value and "작업(Work) 11개" in value, value
    assert "torch는 작업이 끝나는 순서를 약속하지 않" in cause_line(hooks, "LastHandleOnly")


def test_torch_warnings_stay_out_of_the_terminal_and_the_readers_own_are_listed(tmp_path):
    path = write_source(tmp_path, "my_fsdp.py", INTO_TENSOR)
    proc = subprocess.run([sys.executable, "-m", "labs", "grade", path, "--class", "IntoTensor", "--param", "steps=2"],
                          capture_output=True, text=True, encoding="utf-8", timeout=240, env=clean_env())
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    assert "Warning" not in proc.stderr and proc.stderr.strip() == "", proc.stderr
    report_text, listed = proc.stdout.split("torch가 여러분의 코드에 낸 경고")
    assert "결과: 확인 8개 모두 통과했습니다" in report_text, proc.stdout
    for code in ("dist.all_gather_into_tensor(full.data, shard.detach())", "dist.all_gather_into_tensor(flat, shard.detach())"):
        assert f"my_fsdp.py {line_of(INTO_TENSOR, code)}행 `{code}`: FutureWarning" in listed, listed
    assert listed.count("FutureWarning") == 2 and "all_gather_single" in listed, listed  # 랭크마다가 아니라 줄마다 한 번


def test_every_cause_has_its_words():
    """Each narrowed cause names a check of its interface, and every interface's checks have their hints."""
    for kind, by_check in CAUSES.items():
        assert set(by_check) <= set(HINTS_OF[kind]), kind
        assert all(why and where for causes in by_check.values() for why, where in causes.values()), kind
