"""``python -m labs grade FILE --class FullyShardedDP``: a reader's small FSDP graded on real ranks.

The reference (labs.ddp.FullyShardedDP) passes at N = 1..3; a held-out correct style written here (the
gathered weight a leaf tensor whose post-accumulate hook reduces its gradient with an All-Reduce and keeps
this rank's slice, the shards in a ParameterList) passes every check; each bug of the gallery
(labs/ddp/fsdp_bugs.py) fails exactly its named checks, the first being its diagnosis, with its cause in
the report; a bad class ends in a Korean error with exit 2 before any rank starts.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import assert_gallery_bug, clean_env, has_hangul, write_source

import labs
from labs.ddp.fsdp_bugs import BUGS
from labs.errors import EXIT_BAD_INPUT
from labs.grading import GradeInputError, diagnosis, report
from labs.grading.fsdp_judge import CHECKS
from labs.grading.hints import HINTS_OF
from labs.grading.report import cause_text

pytestmark = pytest.mark.timeout(300)

SMALL = {"steps": 2}
FAILS = {cls.__name__: bug.fails for cls, bug in BUGS.items()}  # 갤러리의 클래스마다 실패해야 할 확인

STYLE = '''\
import torch
import torch.distributed as dist
from torch import nn


class LeafGather(nn.Module):
    def __init__(self, module, compute_dtype=None):
        super().__init__()
        self.module, self.dtype = module, compute_dtype
        self.n, self.rank = dist.get_world_size(), dist.get_rank()
        with torch.no_grad():
            for p in module.parameters():
                dist.broadcast(p, 0)
        self.shards = nn.ParameterList()
        self.info = {}
        for name, layer in module.named_modules():
            if isinstance(layer, (nn.Linear, nn.Embedding)):
                w = layer.weight.detach()
                size = -(-w.numel() // self.n)
                flat = torch.zeros(size * self.n)
                flat[:w.numel()] = w.reshape(-1)
                shard = nn.Parameter(flat[self.rank * size:(self.rank + 1) * size].clone())
                self.shards.append(shard)
                del layer.weight
                full = torch.zeros(size * self.n, dtype=compute_dtype or w.dtype, requires_grad=True)
                full.untyped_storage().resize_(0)
                full.register_post_accumulate_grad_hook(lambda t, layer=layer: self._reduce(layer))
                self.info[layer] = (name + ".weight", shard, full, w.shape, w.numel(), size)
                layer.register_forward_pre_hook(self._before)
                layer.register_forward_hook(self._after)

    def _gather(self, layer):
        _, shard, full, _, _, _ = self.info[layer]
        full.untyped_storage().resize_(full.numel() * full.element_size())
        dist.all_gather(list(full.data.chunk(self.n)), shard.detach().to(full.dtype))

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
        summed = full.grad.float()
        dist.all_reduce(summed)
        piece = summed[self.rank * size:(self.rank + 1) * size] / self.n
        shard.grad = piece.clone() if shard.grad is None else shard.grad + piece
        full.grad = None
        full.untyped_storage().resize_(0)

    def forward(self, x):
        if self.dtype is None:
            return self.module(x)
        with torch.autocast("cpu", dtype=self.dtype):
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
            pieces = [torch.empty(size) for _ in range(self.n)]
            dist.all_gather(pieces, shard.detach())
            out[name] = torch.cat(pieces)[:numel].view(shape)
        return out
'''


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_reference_passes_every_check(nproc):
    result = labs.run("grade", nproc=nproc, timeout=240, path="labs/ddp/fsdp.py", classes="FullyShardedDP", **SMALL)
    assert diagnosis(result, "FullyShardedDP") is None, report(result)
    assert all(result.checks[f"FullyShardedDP.{c}"].applicable for c in CHECKS)


def test_held_out_style_passes(tmp_path):
    result = labs.grade(write_source(tmp_path, "fsdp_style.py", STYLE), "LeafGather", timeout=240, **SMALL)
    assert diagnosis(result, "LeafGather") is None, report(result)
    assert result.data["classes"][0]["calls"]["ops"] == {"all_gather": 12, "all_reduce": 12}, report(result)


@pytest.fixture(scope="module")
def gallery():
    return labs.run("grade", nproc=2, timeout=240, path="labs/ddp/fsdp_bugs.py", classes=" ".join(FAILS), **SMALL)


@pytest.mark.parametrize("bug", list(FAILS))
def test_every_bug_fails_exactly_its_named_checks(gallery, bug):
    cls = next(c for c in gallery.data["classes"] if c["name"] == bug)
    assert_gallery_bug(gallery, FAILS, bug, cause_text(cls, FAILS[bug][0])[0])


def test_the_sum_is_named_by_its_ratio(gallery):
    cause = next(c for c in gallery.data["classes"] if c["name"] == "SumNotAverage")["grad_cause"]
    assert cause["cause"] == "sum_not_average" and abs(cause["ratio"] - 2) < 1e-2, cause


def test_every_check_has_its_hint():
    assert set(CHECKS) == set(HINTS_OF["fsdp"]) and all(set(b) <= set(CHECKS) for b in FAILS.values())


BAD = {
    "constructor": ("import torch\nclass FullyShardedDP(torch.nn.Module):\n    def __init__(self, module, world_size):\n"
                    "        super().__init__()\n    def finish_gradient_synchronization(self): pass\n"
                    "    def gather_full_params(self): return {}\n", ("생성자", "compute_dtype", "world_size")),
    "no_gather": ("import torch\nclass FullyShardedDP(torch.nn.Module):\n    def __init__(self, module, compute_dtype=None):\n"
                  "        super().__init__()\n    def finish_gradient_synchronization(self): pass\n",
                  ("gather_full_params",)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_class_is_exit_2_in_korean_before_ranks_start(tmp_path, no_spawn, case):
    source, words = BAD[case]
    path = write_source(tmp_path, "my_fsdp.py", source)
    with pytest.raises(GradeInputError) as err:
        labs.grade(path, "FullyShardedDP")
    assert all(word in str(err.value) for word in words), str(err.value)
    proc = subprocess.run([sys.executable, "-m", "labs", "grade", path, "--class", "FullyShardedDP"],
                          capture_output=True, text=True, encoding="utf-8", timeout=120, env=clean_env())
    assert proc.returncode == EXIT_BAD_INPUT and has_hangul(proc.stderr) and "Traceback" not in proc.stderr, proc.stderr
