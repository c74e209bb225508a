"""Every point where all ranks must meet, in this rank's order: the ``torch.distributed`` collectives the
script calls from Python (the outermost call, with the shapes it passed and the reader's line), the
process group's creation, DDP's constructor (it broadcasts the parameters) and each DDP forward that
starts a collective (its buffer broadcast, the gradient All-Reduce of the backward it prepares).

``sync`` events are written when the call starts and ``synced`` when it returns, so a rank that never
returns still shows where it waited. DDP forwards also record their inputs' digest, the batch size and
whether gradient sync was on; a change of ``require_backward_grad_sync`` records the line that made it.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from . import digest
from .devices import Devices, ddp_device_ids
from .record import Recorder
from .steps import Steps

COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
               "all_gather_coalesced", "all_gather_object", "gather", "gather_object", "scatter",
               "scatter_object_list", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
               "barrier", "monitored_barrier", "broadcast_object_list", "new_group", "_all_gather_base",
               "_reduce_scatter_base")
# Point-to-point calls pair a send on one rank with a recv on another: recorded, never compared across ranks.
POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list")


def _shape(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[object] | None:
    """The shape and dtype of the call's first tensor argument (a list of tensors: its first one)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            value = value[0]
        if isinstance(value, torch.Tensor):
            return [list(value.shape), str(value.dtype).removeprefix("torch.")]
    return None


class Comms:
    def __init__(self, rec: Recorder, devices: Devices, steps: Steps) -> None:
        self.rec = rec
        self.devices = devices
        self.steps = steps
        self._local = threading.local()
        self._ddps = 0

    def install(self) -> None:
        for name in (*COLLECTIVES, *POINT_TO_POINT):
            original = getattr(dist.distributed_c10d, name, None)
            if original is not None:
                wrapped = self._wrap(name, original)
                setattr(dist.distributed_c10d, name, wrapped)
                if getattr(dist, name, None) is original:
                    setattr(dist, name, wrapped)
        self._wrap_init()
        self._patch_ddp()
        self._patch_checkpoint()

    def _meet(self, op: str, site: object, shape: list[object] | None = None, compared: bool = True,
              extra: dict[str, object] | None = None) -> int:
        seq = self.rec.sync_point() if compared else -1
        self.rec.emit("sync", seq=seq, op=op, shape=shape, site=site, step=self.rec.steps, **(extra or {}))
        return seq

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        comms = self

        @functools.wraps(original)
        def collective(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(comms._local, "depth", 0)
            if depth or comms.rec.busy:
                return original(*args, **kwargs)
            compared = name not in POINT_TO_POINT
            seq = comms._meet(name, comms.rec.reader.site(), _shape(args, kwargs), compared,
                              {"async_op": bool(kwargs.get("async_op", False))})
            comms._local.depth = depth + 1
            try:
                result = original(*args, **kwargs)
            finally:
                comms._local.depth = depth
            comms.rec.emit("synced", seq=seq, op=name)
            return result

        return collective

    def _wrap_init(self) -> None:
        original = dist.init_process_group  # already the backend-mapping wrapper of devices.py
        comms = self

        @functools.wraps(original)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            backend = args[0] if args else kwargs.get("backend")
            seq = comms._meet("init_process_group", comms.rec.reader.site(), None, extra={"backend": repr(backend)})
            result = original(*args, **kwargs)
            comms.rec.emit("synced", seq=seq, op="init_process_group", backend=dist.get_backend())
            return result

        dist.init_process_group = init_process_group
        dist.distributed_c10d.init_process_group = init_process_group

    def _patch_ddp(self) -> None:
        init, forward, setattr_ = DistributedDataParallel.__init__, DistributedDataParallel.forward, \
            DistributedDataParallel.__setattr__
        comms = self

        @functools.wraps(init)
        def __init__(self: DistributedDataParallel, module: torch.nn.Module, *args: Any, **kwargs: Any) -> None:
            ddp_device_ids(comms.devices, module, kwargs)
            site = comms.rec.reader.site()
            ident = comms._ddps
            comms._ddps += 1
            ignored = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))
            names = [n for n, p in module.named_parameters() if p.requires_grad and n not in ignored]
            seq = comms._meet("DDP", site, [[len(names)], "parameters"], extra={
                "ddp": ident, "names": names, "find_unused": bool(kwargs.get("find_unused_parameters", False)),
                "static_graph": bool(kwargs.get("static_graph", False)), "buffers": len(list(module.buffers()))})
            init(self, module, *args, **kwargs)
            object.__setattr__(self, "_doctor_id", ident)
            for name, p in module.named_parameters():
                comms.steps.names.setdefault(id(p), name)
                comms.steps.ddp_params.append(weakref.ref(p))
            comms.rec.emit("synced", seq=seq, op="DDP")

        def forward_(self: DistributedDataParallel, *inputs: Any, **kwargs: Any) -> Any:
            if not hasattr(self, "_doctor_id") or comms.rec.busy:
                return forward(self, *inputs, **kwargs)
            site = comms.rec.reader.site()
            grad = torch.is_grad_enabled()
            sync = grad and self.require_backward_grad_sync
            buffers = self.will_sync_module_buffers()
            with comms.rec.bookkeeping():
                seen = digest.whole([inputs, kwargs])
                size = digest.batch_size([inputs, kwargs])
            extra: dict[str, object] = {"ddp": self._doctor_id, "grad": grad, "grad_sync": sync, "input": seen, "b": size,
                                        "training": self.training}
            if buffers:
                comms._meet("DDP 순전파의 버퍼 broadcast", site, None, extra=extra)
            if sync:
                comms._meet("DDP 역전파의 그래디언트 All-Reduce", site, None, extra=extra)
            comms.rec.emit("forward", site=site, step=comms.rec.steps, **extra)
            return forward(self, *inputs, **kwargs)

        def __setattr__(self: DistributedDataParallel, name: str, value: Any) -> None:
            if name == "require_backward_grad_sync" and hasattr(self, "_doctor_id") and not comms.rec.busy:
                caller = sys._getframe(1).f_code.co_filename
                via = "no_sync" if caller.endswith("distributed.py") else "attribute"
                comms.rec.emit("flag", ddp=self._doctor_id, value=bool(value), via=via, site=comms.rec.reader.site(),
                               step=comms.rec.steps)
            setattr_(self, name, value)

        DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign]
        DistributedDataParallel.forward = forward_  # type: ignore[method-assign]
        DistributedDataParallel.__setattr__ = __setattr__  # type: ignore[method-assign,assignment]

    def _patch_checkpoint(self) -> None:
        import torch.utils.checkpoint as checkpointing

        original = checkpointing.checkpoint
        comms = self

        @functools.wraps(original)
        def checkpoint(*args: Any, **kwargs: Any) -> Any:
            site = comms.rec.reader.site()
            reentrant = kwargs.get("use_reentrant")
            if site is not None and comms.rec.once("checkpoint", site["file"], site["line"]):
                comms.rec.emit("checkpoint", site=site, use_reentrant=True if reentrant is None else bool(reentrant))
            return original(*args, **kwargs)

        checkpointing.checkpoint = checkpoint
