"""Gradient clipping against the ``GradScaler``'s state: whether the gradients being clipped were scaled
by ``scaler.scale(loss)`` and not yet unscaled (``scaler.unscale_(optimizer)``), read from the scaler's own
per-optimizer stage, with the scale, the norm the clip saw and the reader's line."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.amp.grad_scaler import OptState

from .record import Recorder


class Amp:
    def __init__(self, rec: Recorder, optimizers: weakref.WeakSet[torch.optim.Optimizer]) -> None:
        self.rec = rec
        self.scalers: weakref.WeakSet[torch.amp.GradScaler] = weakref.WeakSet()
        self.optimizers = optimizers  # every optimizer created (the steps probe keeps them)
        self._scaled: weakref.WeakKeyDictionary[torch.amp.GradScaler, bool] = weakref.WeakKeyDictionary()

    def install(self) -> None:
        scaler = torch.amp.GradScaler
        scale, update = scaler.scale, scaler.update
        amp = self

        @functools.wraps(scale)
        def scale_(self: torch.amp.GradScaler, outputs: Any) -> Any:
            amp.scalers.add(self)
            amp._scaled[self] = True
            return scale(self, outputs)

        @functools.wraps(update)
        def update_(self: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> None:
            amp._scaled[self] = False
            update(self, *args, **kwargs)

        scaler.scale = scale_  # type: ignore[method-assign]
        scaler.update = update_  # type: ignore[method-assign]
        import torch.nn.utils.clip_grad as clip_grad

        for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"):
            wrapped = self._clip(name, getattr(clip_grad, name))
            setattr(clip_grad, name, wrapped)
            setattr(torch.nn.utils, name, wrapped)

    def _scaled_for(self, params: list[torch.Tensor]) -> tuple[bool, float | None]:
        """Whether some scaler has scaled these gradients and not unscaled them for their optimizer."""
        ids = {id(p) for p in params}
        owners = [o for o in self.optimizers if any(id(p) in ids for g in o.param_groups for p in g["params"])]
        for scaler in self.scalers:
            if not scaler.is_enabled() or not self._scaled.get(scaler, False):
                continue
            for opt in owners:
                state = scaler._per_optimizer_states.get(id(opt))
                if state is None or state["stage"] is OptState.READY:
                    return True, float(scaler.get_scale())
        return False, None

    def _clip(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        amp = self

        @functools.wraps(original)
        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
            if amp.rec.busy:
                return original(params, *args, **kwargs)
            site = amp.rec.reader.site()
            with amp.rec.bookkeeping():
                scaled, scale = amp._scaled_for(params)
            result = original(params, *args, **kwargs)
            norm = float(result) if isinstance(result, torch.Tensor) and result.numel() == 1 else None
            if amp.rec.once("clip", scaled, None if site is None else (site["file"], site["line"])):
                amp.rec.emit("clip", fn=name, site=site, scaled=scaled, scale=scale, norm=norm, step=amp.rec.steps)
            return result

        return clip
