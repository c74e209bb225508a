"""Chapter 1: the ``replicas`` lab on real gloo ranks (replicas, DistributedSampler), its checks
failing on a real wrong behaviour, and the batch-split figure drawn from the sampler."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_checks_hold, assert_only_these_fail
from torch.utils.data.distributed import DistributedSampler

import labs
from labs.lessons import replicas as replicas_lab
from labs.viz.structure import batch_split_figure

pytestmark = pytest.mark.timeout(120)

UNEVEN = {"extra_samples": 2}  # D = 3·4·2 + 2 = 26: 3으로 나누어떨어지지 않는다


@pytest.fixture(scope="module")
def runs():
    return {"even": labs.run("replicas", nproc=4), "uneven": labs.run("replicas", nproc=3, **UNEVEN)}


def test_even_split(runs):
    result = runs["even"]
    assert_checks_hold(result)
    assert result.data["dataset_size"] == result.data["padded_size"] == 32
    assert result.data["batch_sizes"] == [4, 4]
    assert [len(g) for g in result.data["global_batches"]] == [16, 16]
    recorded = [r["shard"] for r in result.ranks]
    assert replicas_lab.sampler_shards(32, 4) == recorded  # 그림이 쓰는 계산 = 랭크들이 받은 것


def test_uneven_split_pads_the_dataset_not_the_batch(runs):
    result = runs["uneven"]
    assert_checks_hold(result)
    assert (result.data["dataset_size"], result.data["padded_size"]) == (26, 27)  # ⌈26/3⌉·3
    assert result.data["batch_sizes"] == [4, 4, 1]  # 랭크당 9개: 마지막 미니배치만 짧다
    assert [len(g) for g in result.data["global_batches"]] == [12, 12, 3]
    assert result.data["duplicates"] == replicas_lab.leading_indices(26, 1, 0)  # 섞인 순서의 맨 앞 1개
    assert result.checks["drop_last_shards"].value == [24, 24]


def _per_rank_seeds(ranks):
    """A real bug: every rank builds its sampler with its own seed (e.g. seed=rank)."""
    d = 26
    for r in ranks:
        sampler = DistributedSampler(range(d), num_replicas=len(ranks), rank=r["rank"], shuffle=True, seed=r["rank"])
        r["shard"] = list(sampler)


def test_sampler_checks_catch_per_rank_seeds(runs):
    assert_only_these_fail(replicas_lab, runs["uneven"], _per_rank_seeds,
                           {"no_overlap", "padding_repeats_leading", "full_coverage"}, **UNEVEN)


def test_padding_from_the_wrong_end_is_caught(runs):
    """A sampler that pads with the *last* shuffled indices has the right count but the wrong samples."""
    result = runs["uneven"]

    def tamper(ranks):
        order = torch.randperm(26, generator=torch.Generator().manual_seed(0)).tolist()
        padded = order + order[-1:]  # 맨 뒤 샘플로 채운 잘못된 패딩 (9개씩 3랭크)
        for r in ranks:
            r["shard"] = padded[r["rank"]:27:3]

    assert_only_these_fail(replicas_lab, result, tamper, {"padding_repeats_leading"}, **UNEVEN)


def test_replica_checks_catch_unsynced_wrap(runs):
    def tamper(ranks):  # DDP로 감싸지 않았다면: 감싼 뒤 = 감싸기 전
        for r in ranks:
            r["params_after"], r["fingerprint_after"] = r["params_before"], r["fingerprint_before"]

    assert_only_these_fail(replicas_lab, runs["even"], tamper,
                           {"replicas_identical_after_ddp", "equal_to_rank0_initial", "fingerprints_after_ddp"})


def test_batch_split_figure_labels_the_dataset():
    fig = batch_split_figure()
    assert [b.label for b in fig.layout.updatemenus[1].buttons] == ["D=8", "D=10", "D=16"]
    n4 = next(f for f in fig.frames if f.name == "N=4")
    counts = n4.data[4].text  # D=10 개수 레이블: ⌈10/4⌉ = 3개씩, 패딩 2개
    assert list(counts[:4]) == ["3개", "3개", "3개 (중복 1)", "3개 (중복 1)"]
