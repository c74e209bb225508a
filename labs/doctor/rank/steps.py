"""Optimizer steps: a fingerprint of every parameter (and gradient) before and after each ``step()``, the
hyperparameters of each parameter group, the parameters that got no gradient, the step time, and the
``--steps`` limit (every rank stops cleanly after the same step).

One step of the run (the third, else the second) is also watched by the autograd profiler, which records
every operation the process group really ran (``gloo:all_reduce`` …), DDP's own included.
"""

from __future__ import annotations

import functools
import gc
import os
import weakref
from typing import Any

import torch
from torch.autograd.profiler import profile
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from . import digest
from .record import Recorder

PROFILED_STEP = 3   # the step whose collectives are counted (the second when the run stops after two)
BACKEND_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")


class DoctorStop(BaseException):
    """Raised after the last step ``--steps`` allows: not an ``Exception``, so the script's ``except`` lets it by."""


def _hyper(group: dict[str, Any]) -> dict[str, object]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(group.items())
            if k != "params" and isinstance(v, (int, float, bool, str, tuple, type(None)))}


class _Quiet:
    """Standard error silenced (the profiler's start and stop banners are not the reader's output)."""

    def __enter__(self) -> None:
        self.saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)

    def __exit__(self, *exc: object) -> None:
        os.dup2(self.saved, 2)
        os.close(self.saved)


class Steps:
    def __init__(self, rec: Recorder, limit: int | None, names: dict[int, str]) -> None:
        self.rec = rec
        self.limit = limit
        self.names = names               # id(parameter) -> name, filled by the DDP probe
        self.ddp_params: list[weakref.ref[torch.nn.Parameter]] = []
        self._ids: dict[int, int] = {}   # id(optimizer) -> ordinal
        self._counts: dict[int, int] = {}
        self._depth = 0                  # ZeroRedundancyOptimizer steps an inner optimizer: count the outer one
        self._primary: int | None = None
        self._prof: profile | None = None
        self._prof_from = 0
        self.optimizers: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()

    def install(self) -> None:
        register_optimizer_step_pre_hook(self._pre)
        register_optimizer_step_post_hook(self._post)
        self._patch_optimizer_init()
        for owner in (torch.nn.Module, torch.optim.Optimizer):
            self._patch_load(owner)

    def _patch_optimizer_init(self) -> None:
        """Every optimizer, as it is created (the clip probe finds the one that owns some gradients)."""
        original = torch.optim.Optimizer.__init__
        steps = self

        @functools.wraps(original)
        def __init__(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            steps.optimizers.add(self)
            if not steps.rec.busy:
                steps.rec.emit("optimizer_created", type=type(self).__name__, site=steps.rec.reader.site())

        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign]

    def _patch_load(self, owner: type) -> None:
        """``load_state_dict`` of modules and optimizers: a load that only some ranks make changes their replica."""
        original = owner.load_state_dict  # type: ignore[attr-defined]
        steps = self

        @functools.wraps(original)
        def load_state_dict(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not steps.rec.busy:
                site = steps.rec.reader.site()
                if site is not None:
                    steps.rec.emit("load", owner=owner.__name__, type=type(self).__name__, site=site,
                                   step=steps.rec.steps)
            return original(self, *args, **kwargs)

        owner.load_state_dict = load_state_dict  # type: ignore[attr-defined]

    def _ordinal(self, opt: torch.optim.Optimizer) -> int:
        key = id(opt)
        if key not in self._ids:
            self._ids[key] = len(self._ids)
            self.rec.emit("optimizer", opt=self._ids[key], type=type(opt).__name__,
                          names=self._param_names(opt), site=self.rec.reader.site())
        return self._ids[key]

    def _param_names(self, opt: torch.optim.Optimizer) -> list[str]:
        params = [p for g in opt.param_groups for p in g["params"]]
        if any(id(p) not in self.names for p in params):
            self._name_from_modules(params)
        return [self.names.get(id(p), f"param_groups의 {i}번째 파라미터 {tuple(p.shape)}") for i, p in enumerate(params)]

    def _name_from_modules(self, params: list[torch.Tensor]) -> None:
        """Name parameters after the modules that hold them (once: the outermost modules on the heap)."""
        wanted = {id(p) for p in params} - set(self.names)
        modules = [m for m in gc.get_objects() if issubclass(type(m), torch.nn.Module)]
        children = {id(c) for m in modules for c in m.children()}
        for module in (m for m in modules if id(m) not in children):
            for name, p in module.named_parameters():
                if id(p) in wanted and id(p) not in self.names:
                    self.names[id(p)] = name

    def _pre(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._depth += 1
        if self._depth > 1 or self.rec.busy:
            return
        site = self.rec.reader.site()
        with self.rec.bookkeeping():
            ordinal = self._ordinal(opt)
            params = [p for g in opt.param_groups for p in g["params"]]
            ddp_ids = {id(r()) for r in self.ddp_params if r() is not None}
            no_grad = [self.names.get(id(p), str(i)) for i, p in enumerate(params)
                       if p.requires_grad and p.grad is None and id(p) in ddp_ids]
            self.rec.emit("pre", opt=ordinal, n=self._counts.get(ordinal, 0) + 1, site=site,
                          params=[digest.tensor(p) for p in params],
                          grads=[digest.tensor(p.grad) if p.grad is not None else None for p in params],
                          hyper=[_hyper(g) for g in opt.param_groups], no_grad=no_grad,
                          in_ddp=[id(p) in ddp_ids for p in params],
                          sharded=any(type(p).__name__ == "DTensor" for p in params))

    def _post(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._depth -= 1
        if self._depth > 0 or self.rec.busy:
            return
        with self.rec.bookkeeping():
            ordinal = self._ordinal(opt)
            n = self._counts[ordinal] = self._counts.get(ordinal, 0) + 1
            params = [p for g in opt.param_groups for p in g["params"]]
            self.rec.emit("post", opt=ordinal, n=n, params=[digest.tensor(p) for p in params],
                          sums=[float(p.detach().double().sum()) for p in params], overhead=self.rec.overhead)
            if self._primary is None:
                self._primary = ordinal
            if ordinal == self._primary:
                self.rec.steps = n
                self._profile(n)
        if ordinal == self._primary and self.limit is not None and n >= self.limit:
            self.rec.emit("limit", steps=n)
            raise DoctorStop()

    def _profile(self, n: int) -> None:
        start = PROFILED_STEP - 1 if self.limit is None or self.limit >= PROFILED_STEP else 1
        if n == start and self._prof is None:
            prof = profile(use_cpu=True)
            try:
                with _Quiet():
                    prof.__enter__()
            except RuntimeError:  # the script runs a profiler of its own: the step is not counted, nothing else changes
                return
            self._prof, self._prof_from = prof, n
        elif self._prof is not None and n == self._prof_from + 1:
            self.finish_profile(complete=True)

    def finish_profile(self, complete: bool) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        with _Quiet():
            prof.__exit__(None, None, None)
        if not complete:
            return
        counts: dict[str, int] = {}
        results = prof.kineto_results
        for event in (results.events() if results is not None else []):
            name = event.name()
            if name.startswith(BACKEND_PREFIXES) and not event.is_hidden_event():
                op = name.split(":", 1)[1]
                counts[op] = counts.get(op, 0) + 1
        self.rec.emit("profile", step_from=self._prof_from, step_to=self._prof_from + 1, counts=counts)
