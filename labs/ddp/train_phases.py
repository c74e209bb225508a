"""Chapter 6: the training script's own functions called one phase at a time, with each phase's collectives counted."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import torch
from torch.utils.data import TensorDataset

from labs.context import RankContext
from labs.ddp.train_script import (
    TrainConfig,
    evaluate,
    global_mean,
    make_ddp_model,
    make_loader,
    run_config,
    save_checkpoint,
    sgd,
    train_one_epoch,
)
from labs.tools.checkpoint_folder import CHECKPOINT_NAME, checkpoint_folder
from labs.tools.comms import CollectiveCounter

COUNTED_STEPS = 3  # 학습 스텝 1, 2(버킷 재구성), 3(그 뒤의 모든 스텝과 같음)


def phase_collectives(ctx: RankContext, cfg: TrainConfig, train_set: TensorDataset,
                      test_set: TensorDataset) -> dict:
    """The collectives of each phase of the training script, one phase at a time, with the script's own
    functions: building the DDP model, taking the checkpoint folder (rank 0's answer, a broadcast), the first
    ``COUNTED_STEPS`` training steps, the evaluation, the logged loss and the checkpoint (its barrier)."""
    with CollectiveCounter() as construct:
        model = make_ddp_model(cfg, ctx)
    with tempfile.TemporaryDirectory(prefix="ddp-ch6-phases-") as tmp, CollectiveCounter() as prepare:
        with checkpoint_folder(tmp, run_config(cfg, ctx.world_size), False, ctx):
            pass
    optimizer = sgd(model, cfg)
    sampler, loader = make_loader(train_set, cfg, ctx.world_size, ctx.rank)
    sampler.set_epoch(0)
    steps, loss_sum, count = [], torch.zeros(()), 0
    for batch in itertools.islice(loader, COUNTED_STEPS):
        with CollectiveCounter() as step:
            step_loss, step_count = train_one_epoch(model, [batch], optimizer, ctx.device)
        steps.append(step.as_dict())
        loss_sum, count = loss_sum + step_loss.cpu(), count + step_count
    with CollectiveCounter() as evaluation:
        evaluate(model.module, test_set, ctx)
    with CollectiveCounter() as logged:
        global_mean(loss_sum.to(ctx.device), count, ctx.device)
    with tempfile.TemporaryDirectory(prefix="ddp-ch6-phases-") as tmp, CollectiveCounter() as checkpoint:
        save_checkpoint(Path(tmp) / CHECKPOINT_NAME, model, optimizer, 1, [], ctx)
    return {"construct": construct.as_dict(), "prepare": prepare.as_dict(), "steps": steps,
            "evaluate": evaluation.as_dict(),
            "log": logged.as_dict(), "checkpoint": checkpoint.as_dict()}
