"""Hugging Face Trainer integration: `Trainer(..., callbacks=[GcdoctorCallback(out="runs/x")])`.

Each optimizer step of the Trainer (gradient accumulation included) is one watched step; the
Trainer's logged loss is attached to the step it was logged at.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from transformers import TrainerCallback

from gcdoctor.watcher import Watcher


class GcdoctorCallback(TrainerCallback):
    def __init__(self, out: str | Path | None = None, profile_steps: Iterable[int] = (5, 6),
                 telemetry_hz: float = 20.0, sync: bool = False) -> None:
        self.out, self.profile_steps, self.telemetry_hz, self.sync = out, tuple(profile_steps), telemetry_hz, sync
        self.watcher: Watcher | None = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs: Any):
        self.watcher = Watcher(model, optimizer, self.out, profile_steps=self.profile_steps,
                               telemetry_hz=self.telemetry_hz, sync=self.sync).start()

    def on_step_begin(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.begin_step()

    def on_step_end(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.end_step()

    def on_log(self, args, state, control, logs=None, **kwargs: Any):
        if self.watcher is not None and logs and "loss" in logs:
            self.watcher.log_loss(state.global_step - 1, logs["loss"])

    def on_train_end(self, args, state, control, **kwargs: Any):
        if self.watcher is not None:
            self.watcher.close()
