"""One source per grader rule, held to it without spawning a rank.

- The bucket rules a reader may write live in labs/ddp/buckets.py, each checked here against its own
  definition (never a copy of the code), and the judge accepts exactly the call counts between them.
- The constructor and class-shape rule is one rule: the syntax-tree path (before any rank starts) and the
  run-time path (inside a rank, for what the tree cannot show) give the same verdict on every shape.
- The parent side of the grader loads no rank-side module.
- A launcher error carries the grader's ``places`` from its construction, so a recorded error keeps it.
- Each chapter 13 gallery has one table, which the lab, the figures and the grader's tests read.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import clean_env

from labs import replay
from labs.ddp import fsdp_bugs, zero_bugs
from labs.ddp.buckets import group_before_cap, group_by_size
from labs.errors import LabTimeoutError, RankCrashedError
from labs.grading import fsdp_judge, zero_judge
from labs.grading.hints import HINTS_OF
from labs.grading.judge import layout_problem
from labs.grading.reach import held_bytes
from labs.grading.source import class_error, node_shape, shape_error
from labs.grading.summary import JUDGES
from labs.grading.verdicts import LEADING
from labs.lessons import fsdp as fsdp_lab
from labs.lessons import zero as zero_lab
from labs.viz import fsdp as fsdp_viz
from labs.viz import zero as zero_viz

SIZES = [[4, 4, 4, 4], [3, 3, 3], [10, 1, 2, 9], [1] * 7, [6, 2, 2, 6, 1]]


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("cap", [1, 5, 8, 12, 100])
def test_each_bucket_rule_keeps_its_definition(sizes, cap):
    """torch's reducer: every bucket but the last reaches the cap, and would not without its last tensor.
    Close before exceeding: no bucket passes the cap unless it is one tensor, and none could take the next one."""
    at_cap, before = group_by_size(sizes, cap, nbytes=int), group_before_cap(sizes, cap, nbytes=int)
    for groups in (at_cap, before):
        assert [s for g in groups for s in g] == sizes and all(groups)
    assert all(sum(g) >= cap > sum(g) - g[-1] for g in at_cap[:-1])
    assert all(sum(g) <= cap or len(g) == 1 for g in before)
    assert all(sum(g) + nxt[0] > cap for g, nxt in zip(before, before[1:]))


def test_the_two_rules_differ_and_the_judge_accepts_what_lies_between():
    sizes, cap = [3, 3, 3], 5
    assert group_by_size(sizes, cap, nbytes=int) == [[3, 3], [3]]    # 6 ≥ 5에서 닫는다
    assert group_before_cap(sizes, cap, nbytes=int) == [[3], [3], [3]]  # 3 + 3 > 5가 되기 전에 닫는다
    assert layout_problem([6, 3], sizes, cap) is None and layout_problem([3, 3, 3], sizes, cap) is None
    assert "cap+가장 큰" in (layout_problem([9], sizes, cap) or "")    # 버킷 하나가 cap+가장 큰 텐서보다 크다
    assert "범위 밖" in (layout_problem([1, 1, 1, 1], [1] * 4, 2) or "")  # 두 규칙 모두 호출 2번: 4번은 밖


BASES = {"BucketedDDP": "nn.Module", "ShardedOptimizer": "torch.optim.Optimizer", "FullyShardedDP": "nn.Module"}
FINISH, GATHER = "    def finish_gradient_synchronization(self): pass\n", "    def gather_full_params(self): return {}\n"
METHODS = {"BucketedDDP": FINISH, "ShardedOptimizer": "", "FullyShardedDP": FINISH + GATHER}
SHAPES = [
    ("BucketedDDP", "self, module", True), ("BucketedDDP", "self, module, bucket_cap_mb=25.0", True),
    ("BucketedDDP", "self, module, *, process_group=None", True), ("BucketedDDP", "self, module, cap", False),
    ("BucketedDDP", "self", False), ("BucketedDDP", "self, *args, **kwargs", False),
    ("ShardedOptimizer", "self, params, optimizer_cls, **kwargs", True),
    ("ShardedOptimizer", "self, params, optimizer_cls, process_group=None, **kwargs", True),
    ("ShardedOptimizer", "self, params, lr", False), ("ShardedOptimizer", "self, params, optimizer_cls", False),
    ("FullyShardedDP", "self, module, compute_dtype=None", True), ("FullyShardedDP", "self, module, **kwargs", True),
    ("FullyShardedDP", "self, module, world_size", False), ("FullyShardedDP", "self, module", False),
]


@pytest.mark.parametrize("name, signature, ok", SHAPES)
def test_the_syntax_tree_and_the_class_get_the_same_verdict(name: str, signature: str, ok: bool) -> None:
    source = f"import torch\nfrom torch import nn\nclass {name}({BASES[name]}):\n    def __init__({signature}): pass\n{METHODS[name]}"
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    space: dict[str, object] = {}
    exec(source, space)
    from_tree, from_class = shape_error(name, node_shape(node)), class_error(name, space[name])
    assert (from_tree is None) == (from_class is None) == ok, (from_tree, from_class)
    assert from_tree == from_class  # 같은 규칙, 같은 말


@pytest.mark.parametrize("name", list(BASES))
def test_a_missing_base_or_method_is_one_rule_too(name: str) -> None:
    bare = f"class {name}:\n    def __init__(self, x, y, **kwargs): pass\n"
    node = ast.parse(bare).body[0]
    assert isinstance(node, ast.ClassDef)
    space: dict[str, object] = {}
    exec(bare, space)
    assert shape_error(name, node_shape(node)) == class_error(name, space[name])
    assert "상속한 클래스여야 합니다" in (class_error(name, space[name]) or "")


RANK_SIDE = ("labs.grading.rank", "labs.grading.probes", "labs.grading.zero_probes", "labs.grading.fsdp_probes",
             "labs.grading.reach", "labs.tools.comms")


def loaded(*modules: str) -> list[str]:
    code = f"import sys, {', '.join(modules)}; print(sorted(m for m in sys.modules if m in {RANK_SIDE!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ast.literal_eval(proc.stdout.strip())


def test_the_parent_side_loads_no_rank_side_module():
    assert loaded("labs", "labs.grading.summary", "labs.grading.report", "labs.grading.runner", "labs.grading.source") == []
    assert "labs.grading.probes" in loaded("labs.lessons.grade")  # 랭크에서 도는 실습은 불러온다: 검사가 실패할 수 있다


@pytest.mark.parametrize("err", [
    LabTimeoutError("grade", 10.0, [0, 1], {0: "a.py:3"}, places={0: "여러분의 코드 my.py 8행 f()"}),
    RankCrashedError("grade", 1, -9, "tail", places={1: "여러분의 코드 my.py 2행 <module>()"}),
], ids=["timeout", "crash"])
def test_an_error_carries_its_places_through_a_record(err):
    again = replay.decode(replay.encode(err))
    assert type(again) is type(err) and again.places == err.places and str(again) == str(err)


@pytest.mark.parametrize("gallery, lab, viz, judge", [(zero_bugs, zero_lab, zero_viz, zero_judge),
                                                      (fsdp_bugs, fsdp_lab, fsdp_viz, fsdp_judge)], ids=["zero", "fsdp"])
def test_each_gallery_is_one_table(gallery, lab, viz, judge):
    reference = lab.SHARDED["none"]
    classes = {v for v in vars(gallery).values() if isinstance(v, type) and issubclass(v, reference) and v is not reference}
    assert set(gallery.BUGS) == classes  # 갤러리의 모든 클래스가 표에 있다
    measured = {bug.mistake: (cls, bug.claim) for cls, bug in gallery.BUGS.items() if bug.mistake}
    assert measured and all(lab.SHARDED[m] is cls and viz.MISTAKES[m] == claim for m, (cls, claim) in measured.items())
    others = set(lab.SHARDED) - set(measured) - {"none"}  # 인자로 만드는 실수(갤러리의 클래스가 아니다)
    assert not any(isinstance(lab.SHARDED[m], type) and issubclass(lab.SHARDED[m], reference) for m in others), others
    assert set(lab.MISTAKE_FAILS) == set(viz.MISTAKES) == set(measured) | others
    assert all(bug.fails and set(bug.fails) <= set(judge.CHECKS) for bug in gallery.BUGS.values())


def test_the_source_quotes_no_gallery_names_by_hand():
    """The lab and the figures name no gallery class themselves: they read the table."""
    for module in (zero_lab, fsdp_lab, zero_viz, fsdp_viz):
        text = Path(str(module.__file__)).read_text(encoding="utf-8")
        assert not any(cls.__name__ in text for cls in [*zero_bugs.BUGS, *fsdp_bugs.BUGS]), module.__name__


def test_one_storage_accounting_counts_each_storage_once_and_leaves_the_parameters_out():
    """ZeRO's optimizer state and FSDP's gathered weights are measured by the same walk (labs/grading/reach.py)."""
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.zeros(4)
    moment = torch.zeros(8)
    state = {p: {"moment": moment, "view": moment[:2], "alias": p.detach(), "nested": [torch.zeros(2)], "step": 3}}
    assert held_bytes([state], [p, p.grad]) == 8 * 4 + 2 * 4  # 뷰는 한 번, 파라미터와 같은 저장소는 빼고, 안쪽 목록도
    assert held_bytes([state]) == 8 * 4 + 2 * 4 + 4 * 4


@pytest.mark.parametrize("kind", list(JUDGES))
def test_each_judge_lists_its_checks_once(kind):
    """The order of diagnosis is the table of check functions after the two leading checks; every check the
    table names has the report's words, and every probe a check reads is a check of the table."""
    judge = JUDGES[kind]
    assert judge.checks == (*LEADING, *judge.check_fns)
    assert set(HINTS_OF[kind]) == set(judge.checks)
    assert set(judge.probe_of) | set(judge.needs_two_ranks) <= set(judge.check_fns)
