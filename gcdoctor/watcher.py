"""Watch the user's own training loop: per-step time, peak memory, loss and telemetry, plus a few
profiled steps with the same labels as the probes, written to a run directory as it goes.

    import gcdoctor
    with gcdoctor.watch(model, optimizer, out="runs/my-job") as w:
        for batch in loader:
            with w.step() as s:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step(); optimizer.zero_grad()
                s.loss = loss

Then `gcdoctor analyze runs/my-job` judges it, and `gcdoctor monitor --run runs/my-job` shows it
live. Unprofiled steps are never synchronised: step boundaries are device events read once they
have completed, and the loss is copied to pinned host memory without blocking, so watching does
not change what it measures (bench/watch_overhead.py measures the overhead).
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import torch
from torch.profiler import record_function

from gcdoctor.capture import LABEL_PREFIX
from gcdoctor.events import EventBus, RunFinished, RunStarted, StepMeasured, TelemetrySampled
from gcdoctor.facts import Facts, ModelInfo, RunSettings
from gcdoctor.facts.watch import WatchFacts, WatchStep
from gcdoctor.rundir import RunDirectory, default_run_dir

SAVE_EVERY_S = 10.0


@dataclass
class _Pending:
    record: WatchStep
    end_event: Any
    start_event: Any
    loss_host: torch.Tensor | None


class StepHandle:
    """What `with watcher.step() as s` gives: set `s.loss` to the step's loss (tensor or float)."""

    def __init__(self) -> None:
        self.loss: Any = None


class Watcher:
    """Records a user's training steps. Use as a context manager, or call start()/close()."""

    def __init__(self, model: Any = None, optimizer: Any = None, out: str | Path | None = None,
                 device: str | torch.device | None = None, profile_steps: Iterable[int] = (5, 6),
                 telemetry_hz: float = 20.0, sync: bool = False, tokens_per_step: int | None = None,
                 label_phases: bool = True) -> None:
        from gcdoctor.backends import get_backend
        self.model, self.optimizer = model, optimizer
        if device is None and model is not None:
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.backend = get_backend(f"{dev.type}:{dev.index or 0}" if dev.type != "cpu" else "cpu")
        self.events_ok = self.backend.kind != "cpu"
        self.sync = sync or not self.events_ok
        self.profile_steps = sorted(set(profile_steps))
        self.telemetry_hz, self.label_phases = telemetry_hz, label_phases
        name = type(model).__name__ if model is not None else "job"
        self.rundir = RunDirectory(out or default_run_dir("watch", name))
        self.bus = EventBus()
        self.bus.subscribe(self.rundir.on_event)
        self.facts = Facts(environment=self.backend.describe(), settings=RunSettings(
            command="watch", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds")))
        self.facts.watch = WatchFacts(timing="sync" if self.sync else "events", tokens_per_step=tokens_per_step)
        self._describe_model()
        self.sampler = None
        self._index = 0
        self._pending: list[_Pending] = []
        self._prev_end: Any = None
        self._prev_wall: float | None = None
        self._step_start: tuple[float, float, Any] | None = None
        self._prof: Any = None
        self._prof_first: int | None = None
        self._hooks: list[Any] = []
        self._phase_rf: Any = None
        self._lock = threading.Lock()
        self._last_save = time.monotonic()
        self._t0 = time.monotonic()
        self._closed = False
        self.trace_paths: list[Path] = []

    def _describe_model(self) -> None:
        m, w = self.model, self.facts.watch
        if m is None:
            return
        params = list(m.parameters())
        w.model_name = getattr(getattr(m, "config", None), "_name_or_path", None) or type(m).__name__
        w.n_params = sum(p.numel() for p in params)
        w.param_dtype = str(params[0].dtype).replace("torch.", "") if params else None
        for attr in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers >= 5.24 first
            if hasattr(type(m), attr):
                w.gradient_checkpointing = bool(getattr(m, attr))
                break
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "hidden_size", None):
            self.facts.model = ModelInfo(
                name=w.model_name, source="watched", architecture=getattr(cfg, "model_type", ""),
                n_layers=getattr(cfg, "num_hidden_layers", 0) or 0, n_layers_full=getattr(cfg, "num_hidden_layers", 0) or 0,
                hidden_size=cfg.hidden_size, intermediate_size=getattr(cfg, "intermediate_size", 0) or 0,
                n_heads=getattr(cfg, "num_attention_heads", 0) or 0, n_kv_heads=getattr(cfg, "num_key_value_heads", 0) or 0,
                vocab_size=getattr(cfg, "vocab_size", 0) or 0, n_params=w.n_params, dtype=w.param_dtype or "",
                attn_implementation=str(getattr(cfg, "_attn_implementation", "")))

    # lifecycle ----------------------------------------------------------------------------
    def start(self) -> "Watcher":
        self.rundir.write_json("config.json", {"command": "watch", "profile_steps": self.profile_steps,
                                               "telemetry_hz": self.telemetry_hz, "sync": self.sync})
        w = self.facts.watch
        self.bus.emit(RunStarted(str(self.rundir.path), "watch", {
            "model": w.model_name, "params": w.n_params, "dtype": w.param_dtype,
            "gradient_checkpointing": w.gradient_checkpointing}, self.facts.environment.__dict__))
        if not self.telemetry_hz:
            self.facts.unavailable["telemetry"] = "telemetry off (telemetry_hz=0)"
            self.save()
            return self
        try:
            from gcdoctor.telemetry import TelemetrySampler, open_sources
            index = self.backend.index if self.backend.kind != "cpu" else None
            bus = self.bus
            self.sampler = TelemetrySampler(open_sources(self.backend.kind, index), rate_hz=self.telemetry_hz,
                                            on_sample=lambda t, v: bus.emit(TelemetrySampled(t, v)),
                                            stream_path=self.rundir.file("telemetry.csv"))
            self.sampler.start()
        except Exception as exc:  # noqa: BLE001 - telemetry is optional; the watch goes on without it
            self.facts.unavailable["telemetry"] = f"telemetry could not start: {exc}"
        self.save()
        return self

    def __enter__(self) -> "Watcher":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(interrupted=exc_type is KeyboardInterrupt, error=None if exc is None else repr(exc))

    def close(self, interrupted: bool = False, error: str | None = None) -> Path:
        """Finish pending steps, stop telemetry and profiling, analyse traces, write the report."""
        if self._closed:
            return self.rundir.path
        self._closed = True
        self._stop_profiler()
        self.backend.synchronize()
        self._resolve(block=True)
        if self.sampler is not None:
            self.sampler.stop()
            self.facts.telemetry = self.sampler.facts()
            self.facts.telemetry.path = "telemetry.csv"
        self._analyse_traces()
        st = self.facts.settings
        st.finished_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        st.wall_s = round(time.monotonic() - self._t0, 1)
        st.interrupted, st.error = interrupted, error
        self.save()
        from gcdoctor.engine import evaluate
        from gcdoctor.report import write_reports
        verdicts = evaluate(self.facts)
        report = write_reports(self.rundir.path, self.facts, verdicts)
        self.bus.emit(RunFinished(str(self.rundir.path), interrupted, error, str(report)))
        self.rundir.close()
        return self.rundir.path

    def save(self) -> None:
        with self._lock:
            self.facts.save(self.rundir.file("facts.json"))
        self._last_save = time.monotonic()

    # steps --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self):
        handle = StepHandle()
        self.begin_step()
        try:
            yield handle
        finally:
            self.end_step(handle.loss)

    def begin_step(self) -> None:
        if self._index in self.profile_steps and self._prof is None:
            self._start_profiler()
        ev = None
        if not self.sync and self._prev_end is None:
            ev = self._event()  # the very first step has no previous end to start from
        self._step_start = (time.monotonic(), time.perf_counter(), ev)

    def end_step(self, loss: Any = None) -> None:
        t_start, wall_start, start_ev = self._step_start or (time.monotonic(), time.perf_counter(), None)
        rec = WatchStep(index=self._index, t_start=t_start, profiled=self._prof is not None)
        b = self.backend
        if self.sync:
            b.synchronize()
            rec.step_ms = (time.perf_counter() - (self._prev_wall if self._prev_wall is not None else wall_start)) * 1e3
            self._prev_wall = time.perf_counter()
            rec.loss = _loss_value(loss)
            end_ev = None
        else:
            end_ev = self._event()
        rec.t_end = time.monotonic()
        if b.kind != "cpu":
            rec.peak_allocated_bytes, rec.peak_reserved_bytes = b.max_memory_allocated(), b.max_memory_reserved()
            b.reset_peak()  # host-side bookkeeping of the caching allocator: no synchronisation
        self.facts.watch.steps.append(rec)
        if self.sync:
            self._emit(rec)
        else:
            loss_host = None
            if isinstance(loss, torch.Tensor):
                loss_host = torch.empty((), dtype=torch.float32, pin_memory=True)
                loss_host.copy_(loss.detach().float(), non_blocking=True)
            elif loss is not None:
                rec.loss = float(loss)
            self._pending.append(_Pending(rec, end_ev, start_ev if start_ev is not None else self._prev_end, loss_host))
            self._prev_end = end_ev
            self._resolve(block=False)
        if self._prof is not None:
            self.facts.watch.profiled_steps.append(self._index)
            if self._index + 1 not in self.profile_steps:
                self._stop_profiler()
        self._index += 1
        if time.monotonic() - self._last_save > SAVE_EVERY_S:
            self.save()

    def log_loss(self, step_index: int, loss: float) -> None:
        """Attach a loss known later (e.g. the Trainer's logged average) to a recorded step."""
        for rec in reversed(self.facts.watch.steps):
            if rec.index == step_index:
                rec.loss = float(loss)
                return

    # internals ----------------------------------------------------------------------------
    def _event(self):
        ev = getattr(torch, self.backend.kind).Event(enable_timing=True)
        ev.record()
        return ev

    def _resolve(self, block: bool) -> None:
        """Read the timings of steps whose end events have completed (all of them if block)."""
        while self._pending:
            p = self._pending[0]
            if not block and not p.end_event.query():
                return
            if block:
                p.end_event.synchronize()
            if p.start_event is not None:
                p.record.step_ms = p.start_event.elapsed_time(p.end_event)
            if p.loss_host is not None:
                p.record.loss = float(p.loss_host)
            self._pending.pop(0)
            self._emit(p.record)

    def _emit(self, rec: WatchStep) -> None:
        self.bus.emit(StepMeasured("watch", "train", 0, rec.index, rec.step_ms or 0.0,
                                   "profile" if rec.profiled else "watch", rec.loss, rec.peak_allocated_bytes))

    def _start_profiler(self) -> None:
        self.backend.synchronize()
        self._prof = torch.profiler.profile(activities=self.backend.profiler_activities(), record_shapes=False,
                                            with_stack=False, profile_memory=False)
        self._prof.__enter__()
        self._prof_first = self._index
        if self.label_phases:
            self._install_labels()

    def _stop_profiler(self) -> None:
        if self._prof is None:
            return
        self._remove_labels()
        self.backend.synchronize()
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        first, last = self._prof_first, self._index
        raw = self.rundir.file(f"traces/watch-steps-{first}-{last}.json")
        prof.export_chrome_trace(str(raw))
        import gzip
        import os
        import shutil
        gz = raw.with_suffix(".json.gz")
        with open(raw, "rb") as src, gzip.open(gz, "wb", compresslevel=5) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(raw)
        self.trace_paths.append(gz)
        self._prev_end = None  # the profiled stretch was synchronised: restart the event chain
        self._prev_wall = None

    def _install_labels(self) -> None:
        """Label forward, backward (+loss) and optimizer ranges of profiled steps via hooks."""
        def enter(name):
            self._close_phase()
            self._phase_rf = record_function(LABEL_PREFIX + name)
            self._phase_rf.__enter__()

        if self.model is not None:
            self._hooks.append(self.model.register_forward_pre_hook(lambda *a: enter("forward")))
            self._hooks.append(self.model.register_forward_hook(lambda *a: enter("backward")))
        # wrappers (accelerate's AcceleratedOptimizer, DeepSpeed's) keep the torch optimizer inside
        opt = getattr(self.optimizer, "optimizer", self.optimizer)
        if opt is not None and hasattr(opt, "_optimizer_step_pre_hooks"):
            self._hooks.append(opt.register_step_pre_hook(lambda *a: enter("optimizer")))
            self._hooks.append(opt.register_step_post_hook(lambda *a: self._close_phase()))

    def _close_phase(self) -> None:
        if self._phase_rf is not None:
            self._phase_rf.__exit__(None, None, None)
            self._phase_rf = None

    def _remove_labels(self) -> None:
        self._close_phase()
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def _analyse_traces(self) -> None:
        try:
            from gcdoctor import trace
            from gcdoctor.facts.trace import TraceKey
        except ImportError:
            return
        for path in self.trace_paths:
            key = "watch/" + path.name.replace(".json.gz", "")
            try:
                metrics = trace.compute_metrics(trace.load_trace(path))
            except Exception as exc:  # noqa: BLE001 - a trace we cannot read must not lose the run
                self.facts.unavailable[f"trace.{key}"] = str(exc)
                continue
            for window, tm in metrics.items():
                tm.source = str(path.relative_to(self.rundir.path))
                self.facts.trace[str(TraceKey(key, window))] = tm


def _loss_value(loss: Any) -> float | None:
    if loss is None:
        return None
    if isinstance(loss, torch.Tensor):
        return float(loss.detach().float())
    return float(loss)


def watch(model: Any = None, optimizer: Any = None, out: str | Path | None = None, **kwargs: Any) -> Watcher:
    """Create a Watcher for the user's own training loop (see the module docstring)."""
    return Watcher(model, optimizer, out, **kwargs)
