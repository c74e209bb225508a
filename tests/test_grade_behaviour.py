"""The grader judges what a DDP does, not how it is written: DDP files in the styles readers use.

Each case is a small file written here. Correct styles must pass every check; each bug must fail with
its real cause as the diagnosis (and the cause's words in the report); bad files must end in a Korean
error with exit 2 within the time limit, naming the reader's line. A few grader runs cover every case
(one run grades all the classes of a file).
"""

from __future__ import annotations

import time

import pytest
from conftest import grade_cli, has_hangul, write_source

import labs
from labs.errors import EXIT_BAD_INPUT
from labs.grading import GradeInputError, diagnosis, report
from labs.grading.hints import GRAD_CAUSES
from labs.grading.judge import GRAD_CAUSE_NAMES

pytestmark = pytest.mark.timeout(300)

BASE = '''\
import torch
import torch.distributed as dist
from torch import nn

MIB = 1 << 20


class _Base(nn.Module):
    def __init__(self, module, buffers=True):
        super().__init__()
        self.module = module
        self.n = dist.get_world_size()
        with torch.no_grad():
            for t in [*module.parameters(), *(module.buffers() if buffers else [])]:
                dist.broadcast(t, 0)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.works = []

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        for p, work in self.works:
            work.wait()
            p.grad.div_(self.n)
        self.works.clear()


class _Buckets(_Base):
    """Buckets from a rule (``close``), each reduced from the hooks as soon as it is full."""

    def __init__(self, module, bucket_cap_mb, close):
        super().__init__(module)
        self.buckets, size = [[]], 0
        for p in reversed(self.params):
            if close(size, p, bucket_cap_mb * MIB) and self.buckets[-1]:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self.index = {p: i for i, b in enumerate(self.buckets) for p in b}
        self.ready = [0] * len(self.buckets)
        self.flats = []
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._ready)

    def _ready(self, p):
        i = self.index[p]
        self.ready[i] += 1
        if self.ready[i] == len(self.buckets[i]):
            self.flats.append((i, self._launch(self.buckets[i])))

    def _launch(self, bucket):
        flat = torch.cat([q.grad.reshape(-1) for q in bucket])
        return flat, dist.all_reduce(flat, async_op=True)

    def finish_gradient_synchronization(self):
        for i, (flat, work) in self.flats:
            work.wait()
            flat /= self.n
            for q, piece in zip(self.buckets[i], flat.split([q.numel() for q in self.buckets[i]])):
                q.grad.copy_(piece.view_as(q))
        self.flats.clear()
        self.ready = [0] * len(self.buckets)
'''

STYLES = BASE + '''

class CapBeforeOverflow(_Buckets):
    """Closes a bucket before a tensor would overflow the cap, so no bucket ever exceeds it."""

    def __init__(self, module, bucket_cap_mb=25.0):
        super().__init__(module, bucket_cap_mb, lambda size, p, cap: size + p.numel() * p.element_size() > cap)


class CoalescedBuckets(_Buckets):
    """Closes a bucket once it reaches the cap; each bucket is one all_reduce_coalesced of its p.grad."""

    def __init__(self, module, bucket_cap_mb=25.0):
        super().__init__(module, bucket_cap_mb, lambda size, p, cap: size >= cap)

    def _launch(self, bucket):
        return None, dist.all_reduce_coalesced([q.grad for q in bucket], async_op=True)

    def finish_gradient_synchronization(self):
        for i, (_, work) in self.flats:
            work.wait()
            for q in self.buckets[i]:
                q.grad.div_(self.n)
        self.flats.clear()
        self.ready = [0] * len(self.buckets)


class GradAccumulatorHooks(_Base):
    """Hooks on each parameter's AccumulateGrad node, the way torch's reducer finds them."""

    def __init__(self, module):
        super().__init__(module)
        self.accumulators = []
        for p in self.params:
            acc = p.view_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(lambda *_, p=p: self.works.append((p, dist.all_reduce(p.grad, async_op=True))))
            self.accumulators.append(acc)


class LazyHooks(_Base):
    """Registers its hooks on the first forward; calls torch.distributed.all_reduce by its full name."""

    def forward(self, *args, **kwargs):
        if not getattr(self, "hooked", False):
            for p in self.params:
                p.register_post_accumulate_grad_hook(
                    lambda p: self.works.append((p, torch.distributed.all_reduce(p.grad, async_op=True))))
            self.hooked = True
        return self.module(*args, **kwargs)


class FutureChain(_Base):
    """The process group's own allreduce method; the division is chained on its future, which is waited."""

    def __init__(self, module):
        super().__init__(module)
        self.group = dist.group.WORLD
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        future = self.group.allreduce([p.grad]).get_future()
        self.works.append(future.then(lambda f: f.value()[0].div_(self.n)))

    def finish_gradient_synchronization(self):
        torch.futures.wait_all(self.works)
        self.works.clear()


class TensorHooks(_Base):
    """p.register_hook on the parameter itself: reduces a copy of the incoming gradient, copies it back in finish."""

    def __init__(self, module):
        super().__init__(module)
        for p in self.params:
            p.register_hook(lambda grad, p=p: self._hook(p, grad))

    def _hook(self, p, grad):
        copy = grad.detach().clone()
        self.works.append((p, copy, dist.all_reduce(copy, async_op=True)))
        return grad

    def finish_gradient_synchronization(self):
        for p, copy, work in self.works:
            work.wait()
            p.grad.copy_(copy / self.n)
        self.works.clear()


class PreDivided(_Base):
    """Divides by N in the hook before the sum, as torch's reducer does (an extra optional argument)."""

    def __init__(self, module, process_group=None):
        super().__init__(module)
        self.group = process_group or dist.group.WORLD
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        p.grad.div_(dist.get_world_size(self.group))
        self.works.append(dist.all_reduce(p.grad, group=self.group, async_op=True))

    def finish_gradient_synchronization(self):
        while self.works:
            self.works.pop().wait()
'''

BUGS = BASE + '''

class _PerParameter(_Base):
    def __init__(self, module, buffers=True):
        super().__init__(module, buffers)
        for p in self.hooked():
            p.register_post_accumulate_grad_hook(self._hook)

    def hooked(self):
        return self.params

    def _hook(self, p):
        self.works.append((p, dist.all_reduce(p.grad, async_op=True)))


class DataReduced(_PerParameter):
    def _hook(self, p):
        self.works.append((p, dist.all_reduce(p.data, async_op=True)))   # p.grad가 아니라 p.data

    def finish_gradient_synchronization(self):
        for p, work in self.works:
            work.wait()
            p.data.div_(self.n)
        self.works.clear()


class DividedTwice(_PerParameter):
    def _hook(self, p):
        p.grad.div_(self.n)                  # 보내기 전에 한 번
        super()._hook(p)                     # finish가 받은 뒤에 또 한 번


class StaleHandles(_PerParameter):
    def finish_gradient_synchronization(self):
        for p, work in self.works:           # 지난 반복의 핸들이 남아 있다
            work.wait()
            p.grad.div_(self.n)


class MissingHook(_PerParameter):
    def hooked(self):
        return self.params[1:]               # 첫 파라미터에 훅을 걸지 않았다


class RaisesInFinish(_PerParameter):
    def finish_gradient_synchronization(self):
        super().finish_gradient_synchronization()
        self.stats["calls"] += 1             # 없는 속성


class UnwaitedFuture(_PerParameter):
    def _hook(self, p):
        future = dist.all_reduce(p.grad, async_op=True).get_future()
        self.works.append(future.then(lambda f: f.value()[0].div_(self.n)))

    def finish_gradient_synchronization(self):
        self.works.clear()                   # 이은 퓨처를 기다리지 않는다


class MaxReduced(_PerParameter):
    def _hook(self, p):
        self.works.append((p, dist.all_reduce(p.grad, op=dist.ReduceOp.MAX, async_op=True)))  # SUM이 아니라 MAX


class HooksEveryForward(_PerParameter):
    def forward(self, *args, **kwargs):
        for p in self.hooked():              # 순전파마다 훅을 또 건다: 반복마다 호출이 는다
            p.register_post_accumulate_grad_hook(self._hook)
        return super().forward(*args, **kwargs)


class BuffersForgotten(_PerParameter):
    def __init__(self, module):
        super().__init__(module, buffers=False)


class BarrierOnOneRank(_PerParameter):
    def finish_gradient_synchronization(self):
        if dist.get_rank() == 0:
            dist.barrier()                   # 랭크 0만 부른다: 다른 랭크는 오지 않는다
        super().finish_gradient_synchronization()


class CapInElements(_Buckets):
    def __init__(self, module, bucket_cap_mb=25.0):
        super().__init__(module, bucket_cap_mb, self._close)
        self.total = 0

    @staticmethod
    def _close(size, p, cap):
        return size / p.element_size() >= cap  # cap을 원소 수로 비교
'''

# 버그 -> (진단, 그 원인을 말하는 보고서의 말)
EXPECTED = {
    "DataReduced": ("grads_averaged", "not_reduced"),
    "DividedTwice": ("grads_averaged", "divided_twice"),
    "StaleHandles": ("grads_averaged", "stale_handles"),
    "MissingHook": ("grads_averaged", "not_reduced"),
    "RaisesInFinish": ("runs_without_error", "AttributeError"),
    "UnwaitedFuture": ("handles_waited", "p.grad가"),
    "MaxReduced": ("grads_averaged", "원소마다 MAX로 모은 값"),
    "HooksEveryForward": ("collectives_per_iteration", "반복마다 호출이 늘어남"),
    "BuffersForgotten": ("buffers_broadcast", "running_mean"),
    "CapInElements": ("collectives_per_iteration", "원소 수"),
    "BarrierOnOneRank": ("same_collectives_on_ranks", "랭크 0: BARRIER"),
}
SMALL = {"steps": 2}


def classes_of(source: str) -> list[str]:
    return [line.split()[1].split("(")[0] for line in source.splitlines()
            if line.startswith("class ") and not line.startswith("class _")]


def test_every_correct_style_passes(tmp_path):
    path = write_source(tmp_path, "styles.py", STYLES)
    result = labs.grade(path, classes_of(STYLES), timeout=240, **SMALL)
    for name in classes_of(STYLES):
        assert diagnosis(result, name) is None, report(result)
    counts = {c["name"]: result.checks[f"{c['name']}.collectives_per_iteration"].value for c in result.data["classes"]}
    assert "[4, 4]" in counts["CapBeforeOverflow"] and "[3, 3]" in counts["CoalescedBuckets"], counts


@pytest.fixture(scope="module")
def bugs(tmp_path_factory):
    path = write_source(tmp_path_factory.mktemp("bugs"), "bugs.py", BUGS)
    return labs.grade(path, list(EXPECTED), timeout=240, **SMALL)


@pytest.mark.parametrize("bug", list(EXPECTED))
def test_every_bug_gets_its_real_cause(bugs, bug):
    check, words = EXPECTED[bug]
    assert diagnosis(bugs, bug) == check, report(bugs)
    text = report(bugs).split("채점: 클래스 ")[[c["name"] for c in bugs.data["classes"]].index(bug) + 1]
    assert words in text and f"가장 가능성 높은 원인 ({check})" in text, text


def test_every_gradient_cause_has_its_explanation():
    assert set(GRAD_CAUSE_NAMES) == set(GRAD_CAUSES)


def test_missing_hook_names_the_parameter(bugs):
    cls = next(c for c in bugs.data["classes"] if c["name"] == "MissingHook")
    assert cls["grad_cause"]["params"] == ["0.weight"] and not cls["grad_cause"]["all"]


def test_an_exception_leads_with_the_readers_line(bugs):
    text = report(bugs).split("채점: 클래스 RaisesInFinish")[1]
    line = BUGS.splitlines().index('        self.stats["calls"] += 1             # 없는 속성') + 1
    first = text.splitlines()[2]
    assert first.startswith("예외:") and f"bugs.py:{line}" in first, text


def test_no_division_is_not_masked_by_the_layout():
    result = labs.run("grade", nproc=2, timeout=240, path="labs/ddp/bugs.py", classes="NoDivision", steps=2)
    assert diagnosis(result, "NoDivision") == "grads_averaged"
    assert result.checks["NoDivision.collectives_per_iteration"].ok
    assert result.data["classes"][0]["grad_cause"]["cause"] == "not_divided"


# --- 나쁜 파일: 한국어 오류, 종료 코드 2, 제한 시간 안에 -------------------------------------------------

HEADER = '''\
import torch
from torch import nn


class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb=25.0):
        super().__init__()
        self.module = module

    def finish_gradient_synchronization(self):
        pass
'''


@pytest.mark.parametrize("tail, words", [
    ("import sys\nsys.exit(0)\n", ("SystemExit", "my_ddp.py:{last}", "sys.exit(0)")),
    ("raise KeyboardInterrupt\n", ("KeyboardInterrupt", "my_ddp.py:{last}")),
    ("import os\nos._exit(0)\n", ("프로세스가 끝났습니다", "{last}행")),
    ("while True:\n    pass\n", ("제한 시간 10초", "my_ddp.py {first}행")),
], ids=["sys_exit", "keyboard_interrupt", "os_exit", "endless_import"])
def test_a_bad_file_is_exit_2_in_korean_within_the_timeout(tmp_path, tail, words, no_leftover_children):
    source = HEADER + "\n" + tail
    path = write_source(tmp_path, "my_ddp.py", source)
    lines = {"first": len(HEADER.splitlines()) + 2, "last": len(source.splitlines())}
    started = time.monotonic()
    proc = grade_cli(path, "--timeout", "10")
    assert proc.returncode == EXIT_BAD_INPUT, (proc.returncode, proc.stdout, proc.stderr)
    assert has_hangul(proc.stderr) and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    for word in words:
        assert word.format(**lines) in proc.stderr, (word, proc.stderr)
    assert time.monotonic() - started < 60
    no_leftover_children()


def test_classes_and_paths_are_refused_or_normalized_before_spawning(tmp_path, monkeypatch, no_spawn):
    with pytest.raises(GradeInputError, match="255"):
        labs.grade(tmp_path / ("가" * 100) / "my_ddp.py")
    with pytest.raises(GradeInputError, match="classes"):
        labs.grade("labs/ddp/miniddp.py", classes=5)
    with pytest.raises(labs.LabConfigError, match="두 번"):
        labs.run("grade", path="labs/ddp/miniddp.py", classes="BucketedDDP BucketedDDP")
    monkeypatch.undo()
    tiny = {"steps": 1, "width": 4, "depth": 2}
    once = labs.grade("labs/ddp/miniddp.py", classes="PerParameterDDP", **tiny)
    again = labs.grade("labs/ddp/miniddp.py", classes=["PerParameterDDP", "PerParameterDDP"], **tiny)
    assert [c["name"] for c in once.data["classes"]] == [c["name"] for c in again.data["classes"]] == ["PerParameterDDP"]
    assert once.ok and again.ok
