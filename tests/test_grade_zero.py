"""``python -m labs grade FILE --class ShardedOptimizer``: a reader's ZeRO-1 optimizer graded on real ranks.

The reference (labs.ddp.ShardedOptimizer) passes at N = 1..3; held-out correct styles written here (an
all_gather of per-parameter slices, a partition by contiguous parameter index) and torch's
ZeroRedundancyOptimizer pass every check; each bug of
the gallery (labs/ddp/zero_bugs.py) fails exactly its named checks, the first being its diagnosis, with its
cause in the report; a bad file or class ends in a Korean error with exit 2 before any rank starts.
"""

from __future__ import annotations

import pytest
from conftest import assert_gallery_bug, grade_cli, has_hangul, write_source

import labs
from labs.ddp.zero_bugs import BUGS
from labs.errors import EXIT_BAD_INPUT
from labs.grading import GradeInputError, diagnosis, report
from labs.grading.hints import HINTS_OF
from labs.grading.report import cause_text
from labs.grading.zero_judge import CHECKS

pytestmark = pytest.mark.timeout(300)

SMALL = {"steps": 2}
FAILS = {cls.__name__: bug.fails for cls, bug in BUGS.items()}  # 갤러리의 클래스마다 실패해야 할 확인

STYLES = '''\
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


class ContiguousShards(torch.optim.Optimizer):
    """Each group's parameters cut by index into N contiguous runs; each run's owner broadcasts it."""

    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.make, self.kwargs = optimizer_cls, kwargs
        self.inner, self.owners, self.links = None, [], []
        super().__init__(params, kwargs)

    def add_param_group(self, group):
        super().add_param_group(group)
        full = self.param_groups[-1]
        run = -(-len(full["params"]) // self.n)
        mine = []
        for i, p in enumerate(full["params"]):
            self.owners.append((p, i // run))
            if i // run == self.rank:
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


class SlicesAllGather(torch.optim.Optimizer):
    """Every parameter's flat view padded and cut into N slices: rank r steps slice r of each parameter
    (a copy with its own optimizer state) and the slices come back with all_gather_into_tensor."""

    def __init__(self, params, optimizer_cls, **kwargs):
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.make, self.kwargs = optimizer_cls, kwargs
        self.inner, self.slices, self.links = None, [], []
        super().__init__(params, kwargs)

    def _padded(self, t, size):
        flat = torch.zeros(size * self.n, dtype=t.dtype)
        flat[:t.numel()] = t.reshape(-1)
        return flat

    def add_param_group(self, group):
        super().add_param_group(group)
        full = self.param_groups[-1]
        mine = []
        for p in full["params"]:
            size = -(-p.numel() // self.n)
            piece = self._padded(p.detach(), size)[self.rank * size:(self.rank + 1) * size].clone()
            self.slices.append((p, piece, size))
            mine.append(piece)
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
        for p, piece, size in self.slices:
            piece.grad = self._padded(p.grad, size)[self.rank * size:(self.rank + 1) * size].clone()
        self.inner.step()
        for p, piece, size in self.slices:
            out = torch.empty(size * self.n, dtype=p.dtype)
            dist.all_gather_into_tensor(out, piece)
            p.copy_(out[:p.numel()].view_as(p))
'''


@pytest.mark.parametrize("nproc", [1, 2, 3])
def test_reference_passes_every_check(nproc):
    result = labs.run("grade", nproc=nproc, timeout=240, path="labs/ddp/zero.py", classes="ShardedOptimizer", **SMALL)
    assert diagnosis(result, "ShardedOptimizer") is None, report(result)
    assert [c for c in CHECKS if not result.checks[f"ShardedOptimizer.{c}"].applicable] == \
        (["step_shares_params", "replicas_identical"] if nproc == 1 else [])
    diffs = result.data["classes"][0]["diffs"]
    assert all(d["ddp"] == 0.0 and d["single"] <= 1e-5 for d in diffs.values()), diffs


def test_held_out_styles_pass(tmp_path):
    """Two styles written here, and torch's own ZeroRedundancyOptimizer (the grader's independent check)."""
    path = write_source(tmp_path, "zero_styles.py", STYLES)
    names = ["ContiguousShards", "SlicesAllGather", "ZeroRedundancyOptimizer"]
    result = labs.grade(path, names, timeout=240, **SMALL)
    for name in names:
        assert diagnosis(result, name) is None, report(result)
    calls = {c["name"]: c["calls"]["ops"] for c in result.data["classes"]}
    assert calls == {"ContiguousShards": {"broadcast": 12}, "SlicesAllGather": {"all_gather": 12},
                     "ZeroRedundancyOptimizer": {"broadcast": 12}}, calls


@pytest.fixture(scope="module")
def gallery():
    return labs.run("grade", nproc=2, timeout=240, path="labs/ddp/zero_bugs.py", classes=" ".join(FAILS), **SMALL)


@pytest.mark.parametrize("bug", list(FAILS))
def test_every_bug_fails_exactly_its_named_checks(gallery, bug):
    cls = next(c for c in gallery.data["classes"] if c["name"] == bug)
    assert_gallery_bug(gallery, FAILS, bug, cause_text(cls, FAILS[bug][0])[0])


def test_a_state_every_rank_keeps_is_told_apart_from_an_uneven_one(gallery):
    """StepAllParams holds the whole state on every rank: the cause says so, with the N-fold total."""
    cls = next(c for c in gallery.data["classes"] if c["name"] == "StepAllParams")
    assert cls["causes"]["state_divided"]["key"] == "replicated" and cls["causes"]["state_divided"]["total"] == "2"


def test_wrong_owner_names_the_parameters_left_stale(gallery):
    cls = next(c for c in gallery.data["classes"] if c["name"] == "WrongOwner")
    stale = cls["first_step"]
    assert stale["unchanged"] == len(stale["params"]) > 0, stale


def test_every_check_has_its_hint():
    assert set(CHECKS) == set(HINTS_OF["zero"]) and all(set(b) <= set(CHECKS) for b in FAILS.values())


# --- 나쁜 파일: 랭크를 띄우기 전에 한국어 오류, 종료 코드 2 ------------------------------------------------

BAD = {
    "constructor": ("import torch\nclass ShardedOptimizer(torch.optim.Optimizer):\n"
                    "    def __init__(self, params, lr):\n        super().__init__(params, {'lr': lr})\n",
                    "ShardedOptimizer", ("생성자", "optimizer_cls", "lr")),
    "no_base": ("class ShardedOptimizer:\n    def __init__(self, params, optimizer_cls, **kwargs): pass\n",
                "ShardedOptimizer", ("torch.optim.Optimizer",)),
    "missing_class": ("import torch\nclass ShardedOptimizer(torch.optim.Optimizer):\n    pass\n",
                      "FullyShardedDP", ("FullyShardedDP", "없습니다")),
    "not_a_name": ("import torch\n", "Sharded-Optimizer", ("classes",)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_exit_2_in_korean_before_ranks_start(tmp_path, no_spawn, case):
    source, name, words = BAD[case]
    path = write_source(tmp_path, "my_zero.py", source)
    with pytest.raises(GradeInputError) as err:
        labs.grade(path, name)
    assert all(word in str(err.value) for word in words), str(err.value)
    proc = grade_cli(path, "--class", name, timeout=120)
    assert proc.returncode == EXIT_BAD_INPUT and has_hangul(proc.stderr) and "Traceback" not in proc.stderr, proc.stderr
