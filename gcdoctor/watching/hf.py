"""Hugging Face Trainer integration: `Trainer(..., callbacks=[GcdoctorCallback(out="runs/x")])`.

Each optimizer step of the Trainer (gradient accumulation included) is one watched step; the
Trainer's logged loss is attached to the step it was logged at. At each of the Trainer's logs the
callback adds gcdoctor's own measurements since the previous log (`gcdoctor/step_ms`,
`gcdoctor/data_ms`, `gcdoctor/forward_ms`, `gcdoctor/backward_ms`, `gcdoctor/optimizer_ms`,
`gcdoctor/peak_allocated_gib`, `gcdoctor/recompute_share` once the profiled steps are analysed,
and the telemetry's `gcdoctor/gpu0.pcie_rx_gbs`, `...pcie_tx_gbs`, `...util_pct` means), so the
`report_to` trackers (TensorBoard, W&B, MLflow, ...) receive them. For that the callback moves
itself to the front of the Trainer's callbacks: the trackers read the logs after it.
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any, Iterable

from transformers import TrainerCallback

from gcdoctor.watching.watcher import Watcher


class GcdoctorCallback(TrainerCallback):
    def __init__(self, out: str | Path | None = None, profile_steps: Iterable[int] = (5, 6),
                 telemetry_hz: float = 20.0, sync: bool = False, ranks: str = "all", log_metrics: bool = True) -> None:
        self.out, self.profile_steps, self.telemetry_hz, self.sync = out, tuple(profile_steps), telemetry_hz, sync
        self.ranks, self.log_metrics = ranks, log_metrics
        self.watcher: Watcher | None = None
        self.first_in_callbacks: bool | None = None  # whether the trackers see gcdoctor's log entries

    def _move_to_front(self) -> None:
        """Become the first of the Trainer's callbacks, so trackers logging in on_log see our keys.
        The handler is the caller of this event (CallbackHandler.call_event iterates its list by
        index: moving an element from position k to 0 neither skips nor repeats the others)."""
        if self.first_in_callbacks:
            return
        frame: FrameType | None = sys._getframe(1)
        for _ in range(4):
            frame = frame.f_back if frame is not None else None
            handler = frame.f_locals.get("self") if frame is not None else None
            cbs = getattr(handler, "callbacks", None)
            if isinstance(cbs, list) and any(c is self for c in cbs):
                cbs.remove(self)
                cbs.insert(0, self)
                self.first_in_callbacks = True
                return
        self.first_in_callbacks = False

    def on_init_end(self, args, state, control, **kwargs: Any):
        self._move_to_front()

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs: Any):
        self._move_to_front()
        self.watcher = Watcher(model, optimizer, self.out, profile_steps=self.profile_steps,
                               telemetry_hz=self.telemetry_hz, sync=self.sync, ranks=self.ranks).start()
        if self.watcher.enabled and self.first_in_callbacks is False:
            self.watcher.watch_facts.notes.append(
                "the callback could not move itself before the Trainer's other callbacks: trackers that log "
                "before it do not see gcdoctor's log entries")

    def on_step_begin(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.begin_step()

    def on_step_end(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.end_step()

    def on_log(self, args, state, control, logs=None, **kwargs: Any):
        if self.watcher is None or logs is None:
            return
        if "loss" in logs:
            self.watcher.log_loss(state.global_step - 1, logs["loss"])
        if self.log_metrics:
            logs.update(self.watcher.log_metrics())

    def on_train_end(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.close()
