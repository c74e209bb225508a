"""A GPU script on CPU ranks: CUDA placements become the CPU and NCCL becomes gloo, each change recorded
once per line of the reader's code (``map`` events), and the CUDA device index each placement asked for
is recorded (``cuda`` events) so that the parent can tell when two ranks would share one GPU.

The mapping, one rule each (README.md lists it for readers):
- ``init_process_group("nccl" | "cpu:gloo,cuda:nccl", device_id=…)`` → ``"gloo"``, without ``device_id``;
- ``tensor.cuda(i)``, ``module.cuda(i)``, ``.to("cuda:i" | torch.device("cuda", i) | i)``, ``device="cuda…"`` of
  the factory functions, ``pin_memory()`` → the CPU;
- ``torch.cuda.set_device(i)`` / ``current_device()`` keep the index (no GPU is touched); ``synchronize``,
  ``empty_cache``, the memory counters (0) and ``torch.cuda.Event`` (wall-clock time) have CPU stand-ins;
- ``GradScaler("cuda")`` / ``torch.cuda.amp.GradScaler()`` scale on the CPU (enabled as on a GPU), and
  ``autocast("cuda", dtype)`` is ``autocast("cpu", dtype)`` (float16 when no dtype is given, as on CUDA);
- ``torch.load(map_location="cuda…" | {…: "cuda…"})`` loads onto the CPU;
- ``DistributedDataParallel(module, device_ids=[i], output_device=i)`` of a CPU module drops both arguments.
``torch.cuda.is_available()`` stays False and ``device_count()`` 0: a script that asks takes its CPU branch.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .record import Recorder

FACTORIES = ("tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
             "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
             "rand_like", "randn_like", "randint_like", "empty_strided", "scalar_tensor", "normal")


def _index(device: object) -> int | None | bool:
    """The CUDA index ``device`` names (None: the current one), or False when it is not a CUDA device."""
    if isinstance(device, torch.device):
        return device.index if device.type == "cuda" else False
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        return (int(index) if index else None) if kind == "cuda" else False
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    return False


class Devices:
    """The rank's CUDA bookkeeping: the current device index and what was mapped."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.current = 0

    def mapped(self, what: str, before: str, after: str) -> None:
        site = self.rec.reader.site()
        if site is not None and self.rec.once("map", what, site["file"], site["line"]):
            self.rec.emit("map", what=what, before=before, after=after, site=site)

    def placed(self, device: object, what: str) -> bool:
        """Record a placement on ``device``; True when it was a CUDA device (then the caller uses the CPU)."""
        index = _index(device)
        if index is False or self.rec.busy:
            return index is not False
        real = self.current if index is None else int(index)
        site = self.rec.reader.site()
        if self.rec.once("cuda", real):
            self.rec.emit("cuda", index=real, site=site)
        self.mapped(what, f"cuda:{real}", "cpu")
        return True

    def install(self) -> None:
        _patch_backend(self)
        _patch_placement(self)
        _patch_cuda_module(self)
        _patch_amp(self)


def _patch_backend(dev: Devices) -> None:
    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(backend, str) and "nccl" in backend:
            dev.mapped("backend", backend, "gloo")
            backend = "gloo"
        if kwargs.get("device_id") is not None:
            dev.placed(kwargs["device_id"], "device_id")
            dev.mapped("device_id", f"device_id={kwargs['device_id']}", "없음")
            kwargs["device_id"] = None
        return original(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.distributed_c10d.init_process_group = init_process_group


def _patch_placement(dev: Devices) -> None:
    tensor_to = torch.Tensor.to
    tensor_cuda = torch.Tensor.cuda

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if args and dev.placed(args[0], ".to"):
            args = ("cpu", *args[1:])
        if "device" in kwargs and dev.placed(kwargs["device"], ".to"):
            kwargs["device"] = "cpu"
        return tensor_to(self, *args, **kwargs)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
        dev.placed(device if device is not None else "cuda", ".cuda()")
        return self.cpu(**({"memory_format": kwargs["memory_format"]} if "memory_format" in kwargs else {}))

    def module_cuda(self: torch.nn.Module, device: Any = None) -> torch.nn.Module:
        dev.placed(device if device is not None else "cuda", ".cuda()")
        return self

    def pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        dev.mapped("pin_memory", "pin_memory()", "그대로(CPU)")
        return self

    torch.Tensor.to = to  # type: ignore[method-assign,assignment]
    torch.Tensor.cuda = cuda  # type: ignore[method-assign,assignment]
    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign,assignment]
    torch.nn.Module.cuda = module_cuda  # type: ignore[method-assign,assignment]
    del tensor_cuda
    for name in FACTORIES:
        setattr(torch, name, _factory(getattr(torch, name), dev))
    load = torch.load

    @functools.wraps(load)
    def torch_load(*args: Any, **kwargs: Any) -> Any:
        if "map_location" in kwargs:
            kwargs["map_location"] = _map_location(kwargs["map_location"], dev)
        return load(*args, **kwargs)

    torch.load = torch_load


def _factory(original: Callable[..., Any], dev: Devices) -> Callable[..., Any]:
    @functools.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs and dev.placed(kwargs["device"], f"torch.{original.__name__}(device=…)"):
            kwargs["device"] = "cpu"
        return original(*args, **kwargs)

    return factory


def _map_location(location: object, dev: Devices) -> object:
    if isinstance(location, dict):
        return {k: ("cpu" if _index(v) is not False else v) for k, v in location.items()}
    if _index(location) is not False:
        dev.mapped("map_location", str(location), "cpu")
        return "cpu"
    return location


class CpuEvent:
    """``torch.cuda.Event(enable_timing=True)`` on the CPU: ``record()`` takes the wall-clock time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.time: float | None = None

    def record(self, stream: object = None) -> None:
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def wait(self, stream: object = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: CpuEvent) -> float:
        if self.time is None or end.time is None:
            raise RuntimeError("record()를 부르지 않은 Event입니다")
        return (end.time - self.time) * 1000.0


def _patch_cuda_module(dev: Devices) -> None:
    cuda = torch.cuda

    def set_device(device: Any) -> None:
        index = _index(device)
        dev.current = int(index) if isinstance(index, int) and index is not True else dev.current
        dev.mapped("set_device", f"set_device({device})", "기록만(GPU 없음)")

    def current_device() -> int:
        return dev.current

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def zero(*args: Any, **kwargs: Any) -> int:
        return 0

    cuda.set_device = set_device
    cuda.current_device = current_device
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated"):
        setattr(cuda, name, nothing)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        setattr(cuda, name, zero)
    cuda.get_device_name = lambda *args, **kwargs: "CPU (labs doctor)"
    cuda.Event = CpuEvent  # type: ignore[misc,assignment]


def _patch_amp(dev: Devices) -> None:
    scaler_init = torch.amp.GradScaler.__init__

    @functools.wraps(scaler_init)
    def init(self: torch.amp.GradScaler, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        if device == "cuda" and not torch.cuda.is_available():
            dev.mapped("GradScaler", 'GradScaler("cuda")', 'GradScaler("cpu")')
            device = "cpu"
        scaler_init(self, device, *args, **kwargs)

    torch.amp.GradScaler.__init__ = init  # type: ignore[method-assign]
    autocast_init = torch.amp.autocast_mode.autocast.__init__

    @functools.wraps(autocast_init)
    def autocast(self: Any, device_type: str, dtype: torch.dtype | None = None, *args: Any, **kwargs: Any) -> None:
        if device_type == "cuda" and not torch.cuda.is_available():
            dtype = torch.float16 if dtype is None else dtype
            dev.mapped("autocast", 'autocast("cuda")', f'autocast("cpu", {dtype})')
            device_type = "cpu"
        autocast_init(self, device_type, dtype, *args, **kwargs)

    torch.amp.autocast_mode.autocast.__init__ = autocast  # type: ignore[method-assign]


def ddp_device_ids(dev: Devices, module: torch.nn.Module, kwargs: dict[str, Any]) -> None:
    """Drop ``device_ids``/``output_device`` of a DDP whose module is on the CPU (the GPU ones were mapped)."""
    params = list(module.parameters())
    if kwargs.get("device_ids") and params and all(p.device.type == "cpu" for p in params):
        for index in kwargs["device_ids"]:
            dev.placed(index, "device_ids")
        dev.mapped("device_ids", f"device_ids={kwargs['device_ids']}", "없음(CPU 모듈)")
        kwargs["device_ids"] = None
        kwargs["output_device"] = None
