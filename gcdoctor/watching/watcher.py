"""Watch the user's own training loop: per-step time and its phases (data wait, forward, backward,
optimizer), the memory peak of each phase, loss and telemetry, what the model says about its
checkpointing, and a few profiled steps analysed like diagnose's, written to a run directory as
it goes.

    import gcdoctor
    with gcdoctor.watch(model, optimizer, out="runs/my-job") as w:
        for batch in loader:
            with w.step() as s:
                loss = model(**batch).loss
                loss.backward()
                optimizer.step(); optimizer.zero_grad()
                s.loss = loss

Then `gcdoctor analyze runs/my-job` judges it, and `gcdoctor monitor --run runs/my-job` shows it
live. Unprofiled steps are never synchronised: phase and step boundaries are device events (a
model forward pre/post hook and an optimizer step pre/post hook record them) read once they have
completed, memory peaks are the caching allocator's host-side counters, and the loss is copied to
pinned host memory without blocking, so watching does not change what it measures
(bench/watch_overhead.py measures the overhead). Profiled steps run under torch.profiler with
`ProfilerStep#N` ranges (from the previous step's end, so the batch's loading is inside) and the
probes' phase labels; their recomputation is found with or without labels (gcdoctor.trace.recompute).

In a distributed job (torch.distributed initialised, or torchrun's RANK/WORLD_SIZE), `ranks="all"`
writes one run directory per rank (`out/rank-<r>`), `ranks="0"` watches rank 0 only;
`gcdoctor analyze out` merges the ranks.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch
from torch.profiler import record_function

from gcdoctor.run.capture import LABEL_PREFIX
from gcdoctor.run.events import EventBus, RunFinished, RunStarted, StepMeasured, TelemetrySampled
from gcdoctor.facts import Facts, ModelInfo, RunSettings
from gcdoctor.facts.watch import CheckpointingSettings, WatchFacts, WatchRecompute, WatchStep
from gcdoctor.run.rundir import RunDirectory, default_run_dir

if TYPE_CHECKING:
    from gcdoctor.telemetry import TelemetrySampler

SAVE_EVERY_S = 10.0
DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# the memory model's optimizers: Adam and AdamW keep two moments per parameter, plain SGD none
OPTIMIZER_MODELS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd"}


@dataclass
class _Pending:
    record: WatchStep
    marks: list[tuple[str, Any]]  # (mark, device event), the previous step's end first
    loss_host: torch.Tensor | None


@dataclass
class _StepState:
    """The step being recorded: its marks (phase boundaries) and what the forwards saw."""

    t_start: float
    wall_start: float
    marks: list[tuple[str, Any]] = field(default_factory=list)
    phase_peaks: dict[str, int] = field(default_factory=dict)
    forwards: int = 0
    tokens: int = 0
    reserved_peak: int = 0
    loss: Any = None  # the model output's `loss`, when it has one (HF models given labels)


class StepHandle:
    """What `with watcher.step() as s` gives: set `s.loss` to the step's loss (tensor or float)."""

    def __init__(self) -> None:
        self.loss: Any = None


def distributed_rank() -> tuple[int | None, int | None]:
    """(rank, world size) of this process: torch.distributed's when initialised, else torchrun's
    environment (set before init), else (None, None)."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        return (int(rank), int(world)) if rank is not None and world is not None else (None, None)
    except ValueError:
        return None, None


def _phase_of(prev: str, mark: str, forwards_seen: int) -> str | None:
    """The phase the interval ending at `mark` (started at `prev`) belongs to (facts/watch.py)."""
    if mark == "begin":
        return "data"
    if mark == "fwd0":
        return "backward" if forwards_seen else "data"
    if mark == "fwd1":
        return "forward"
    if mark == "opt0":
        return "backward" if forwards_seen else None
    if mark == "opt1":
        return "optimizer"
    if mark == "end":
        return {"opt1": "other", "fwd1": "backward"}.get(prev)
    return None


class Watcher:
    """Records a user's training steps. Use as a context manager, or call start()/close().

    profile_steps: step indices to profile (default 5 and 6); telemetry_hz: 0 turns telemetry
    off; sync: synchronise each step (the default reads device events instead); ranks: "all" (a
    run directory per rank) or "0" (rank 0 only); memory: "auto" (device allocator counters; none
    on the CPU), "count" (also on the CPU, counting storages: exact but slow), "off".
    """

    def __init__(self, model: Any = None, optimizer: Any = None, out: str | Path | None = None,
                 device: str | torch.device | None = None, profile_steps: Iterable[int] = (5, 6),
                 telemetry_hz: float = 20.0, sync: bool = False, tokens_per_step: int | None = None,
                 label_phases: bool = True, ranks: str | int = "all", memory: str = "auto") -> None:
        from gcdoctor.backends import get_backend
        self.model, self.optimizer = model, optimizer
        self.rank, self.world_size = distributed_rank()
        self.enabled = not (str(ranks) == "0" and self.rank not in (None, 0))
        if device is None and model is not None:
            device = next((p.device for p in model.parameters()), torch.device("cpu"))
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.backend = get_backend(f"{dev.type}:{dev.index or 0}" if dev.type != "cpu" else "cpu")
        self.events_ok = self.backend.kind != "cpu"
        self.sync = sync or not self.events_ok
        self.memory = memory if memory in ("count", "off") else ("auto" if self.backend.kind != "cpu" else "off")
        self.profile_steps = sorted(set(profile_steps))
        self.telemetry_hz, self.label_phases = telemetry_hz, label_phases
        self.sampler: TelemetrySampler | None = None
        self._closed = False
        self.trace_paths: list[Path] = []
        if not self.enabled:
            return
        name = type(model).__name__ if model is not None else "job"
        out = Path(out or default_run_dir("watch", name))
        if self.world_size and self.world_size > 1 and str(ranks) != "0":
            out = out / f"rank-{self.rank}"
        self.rundir = RunDirectory(out)
        self.bus = EventBus()
        self.bus.subscribe(self.rundir.on_event)
        self.facts = Facts(environment=self.backend.describe(), settings=RunSettings(
            command="watch", started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            warmup_steps=1, measure_steps=0, probes=["watch"]))
        self.watch_facts = WatchFacts(timing="sync" if self.sync else "events", tokens_per_step=tokens_per_step,
                                      rank=self.rank, world_size=self.world_size)
        self.facts.watch = self.watch_facts
        self._describe_model()
        self._index = 0
        self._pending: list[_Pending] = []
        self._prev_end: Any = None  # the previous step's end mark: a device event, or perf_counter on the CPU
        self._prev_wall: float | None = None  # its synchronised host time (sync mode)
        self._prev_host: float | None = None  # the host clock when the previous step ended (no sync)
        self._step: _StepState | None = None
        self._prof: Any = None
        self._prof_first = 0  # the first step of the open (or last) profiled stretch
        self._prof_step_rf: Any = None
        self._hooks: list[Any] = []
        self._phase_rf: Any = None
        self._tracking: Any = None
        self._lock = threading.Lock()
        self._last_save = time.monotonic()
        self._t0 = time.monotonic()
        self._described_gc = False
        self._tele: dict[str, list[float]] = {}  # series -> [sum, count] since the last log_metrics()
        self._logged_upto = 0  # steps already summarised by log_metrics()

    def _describe_model(self) -> None:
        m, w = self.model, self.watch_facts
        if m is None:
            return
        params = list(m.parameters())
        w.model_name = getattr(getattr(m, "config", None), "_name_or_path", None) or type(m).__name__
        w.n_params = sum(p.numel() for p in params)
        w.param_dtype = str(params[0].dtype).replace("torch.", "") if params else None
        cfg = getattr(m, "config", None)
        if cfg is not None and getattr(cfg, "hidden_size", None):
            self.facts.model = ModelInfo(
                name=w.model_name, source="watched", architecture=getattr(cfg, "model_type", ""),
                n_layers=getattr(cfg, "num_hidden_layers", 0) or 0,
                n_layers_full=getattr(cfg, "num_hidden_layers", 0) or 0,
                hidden_size=cfg.hidden_size, intermediate_size=getattr(cfg, "intermediate_size", 0) or 0,
                n_heads=getattr(cfg, "num_attention_heads", 0) or 0,
                n_kv_heads=getattr(cfg, "num_key_value_heads", 0) or 0,
                vocab_size=getattr(cfg, "vocab_size", 0) or 0, n_params=w.n_params, dtype=w.param_dtype or "",
                attn_implementation=str(getattr(cfg, "_attn_implementation", "")))
        self.facts.settings.dtype = DTYPE_NAMES.get(w.param_dtype or "", w.param_dtype or "")

    # lifecycle ----------------------------------------------------------------------------
    def start(self) -> "Watcher":
        if not self.enabled:
            return self
        self.rundir.write_json("config.json", {"command": "watch", "profile_steps": self.profile_steps,
                                               "telemetry_hz": self.telemetry_hz, "sync": self.sync,
                                               "rank": self.rank, "world_size": self.world_size})
        w = self.watch_facts
        self.bus.emit(RunStarted(str(self.rundir.path), "watch", {
            "model": w.model_name, "params": w.n_params, "dtype": w.param_dtype,
            "gradient_checkpointing": w.gradient_checkpointing}, self.facts.environment.__dict__))
        self._install_hooks()
        if self.memory == "count" and self.model is not None:
            self.backend.track(p for p in self.model.parameters())
        if not self.telemetry_hz:
            self.facts.unavailable["telemetry"] = "telemetry off (telemetry_hz=0)"
            self.save()
            return self
        try:
            from gcdoctor.telemetry import TelemetrySampler, open_sources
            index = self.backend.index if self.backend.kind != "cpu" else None
            sampler = TelemetrySampler(open_sources(self.backend.kind, index), rate_hz=self.telemetry_hz,
                                       on_sample=self._on_sample, stream_path=self.rundir.file("telemetry.csv"))
            self.sampler = sampler
            sampler.start()
        except Exception as exc:  # noqa: BLE001 - telemetry is optional; the watch goes on without it
            self.facts.unavailable["telemetry"] = f"telemetry could not start: {exc}"
        self.save()
        return self

    def _on_sample(self, t: float, values: dict[str, float | None]) -> None:
        self.bus.emit(TelemetrySampled(t, values))
        for k, v in values.items():
            if v is not None and k.endswith(("pcie_rx_gbs", "pcie_tx_gbs", "util_pct")):
                acc = self._tele.setdefault(k, [0.0, 0])
                acc[0] += v
                acc[1] += 1

    def __enter__(self) -> "Watcher":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(interrupted=exc_type is KeyboardInterrupt, error=None if exc is None else repr(exc))

    def close(self, interrupted: bool = False, error: str | None = None) -> Path | None:
        """Finish pending steps, stop telemetry and profiling, analyse traces, write the report."""
        if self._closed or not self.enabled:
            self._closed = True
            return None if not self.enabled else self.rundir.path
        self._closed = True
        if self._step is not None:  # a step begun and never ended (an exception inside it)
            self._step = None
            self._exit_tracking()
        self._stop_profiler()
        self._remove_hooks()
        self.backend.synchronize()
        self._resolve(block=True)
        if self.sampler is not None:
            self.sampler.stop()
            self.facts.telemetry = self.sampler.facts()
            self.facts.telemetry.path = "telemetry.csv"
        self._finish_facts()
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
        """Start a step (the model's first forward of a step starts one too, if none is open)."""
        if not self.enabled or self._closed or self._step is not None:
            return
        self._open_step()

    def _open_step(self) -> _StepState:
        if self._index in self.profile_steps and self._prof is None:
            self._start_profiler(self._index)
        st = self._step = _StepState(time.monotonic(), time.perf_counter())
        if self.memory == "count":
            self._enter_tracking()
        self._mark("begin")
        return st

    def end_step(self, loss: Any = None) -> None:
        if not self.enabled or self._closed:
            return
        st = self._step if self._step is not None else self._open_step()
        self._mark("end")
        self._step = None
        self._exit_tracking()
        if loss is None:
            loss = st.loss
        rec = WatchStep(index=self._index, t_start=st.t_start, profiled=self._prof is not None,
                        micro_batches=st.forwards, tokens=st.tokens or None)
        if self._prev_host is not None:
            rec.host_wait_ms = round((st.wall_start - self._prev_host) * 1e3, 4)
        if st.phase_peaks:
            rec.phase_peak_bytes = dict(st.phase_peaks)
            rec.peak_phase = max(st.phase_peaks, key=st.phase_peaks.__getitem__)
            rec.peak_allocated_bytes = st.phase_peaks[rec.peak_phase]
            rec.peak_reserved_bytes = st.reserved_peak or None
        marks = ([("prev", self._prev_end)] if self._prev_end is not None else []) + st.marks
        if self.sync:
            self.backend.synchronize()
            now = time.perf_counter()
            rec.step_ms = (now - (self._prev_wall if self._prev_wall is not None else st.wall_start)) * 1e3
            self._prev_wall = now
            rec.loss = _loss_value(loss)
        rec.t_end = time.monotonic()
        self.watch_facts.steps.append(rec)
        if self.sync:
            self._phases(rec, marks)
            self._emit(rec)
        else:
            loss_host = None
            if isinstance(loss, torch.Tensor):
                loss_host = torch.empty((), dtype=torch.float32, pin_memory=True)
                loss_host.copy_(loss.detach().float(), non_blocking=True)
            elif loss is not None:
                rec.loss = float(loss)
            self._pending.append(_Pending(rec, marks, loss_host))
            self._resolve(block=False)
        self._prev_end, self._prev_host = st.marks[-1][1], time.perf_counter()
        if self._prof is not None:
            self.watch_facts.profiled_steps.append(self._index)
            self._close_phase()
            self._close_profiler_step()
            if self._index + 1 in self.profile_steps:
                self._open_profiler_step(self._index + 1)
            else:
                self._stop_profiler()
        elif self._index + 1 in self.profile_steps:
            self._start_profiler(self._index + 1)  # from this step's end: the next batch's loading is traced
        self._index += 1
        if not self._described_gc:
            self._describe_checkpointing()
        if time.monotonic() - self._last_save > SAVE_EVERY_S:
            self.save()

    def log_loss(self, step_index: int, loss: float) -> None:
        """Attach a loss known later (e.g. the Trainer's logged average) to a recorded step."""
        if not self.enabled:
            return
        for rec in reversed(self.watch_facts.steps):
            if rec.index == step_index:
                rec.loss = float(loss)
                return

    def log_metrics(self) -> dict[str, float]:
        """What happened since the last call, for a tracker's log (`gcdoctor/...` keys): medians of
        the steps resolved since then, their peak memory, the recompute share once the profiled
        steps are analysed, and the telemetry's PCIe and utilisation means."""
        if not self.enabled:
            return {}
        self._resolve(block=False)
        done = [s for s in self.watch_facts.steps[self._logged_upto:] if s.step_ms is not None or self.sync]
        if done:
            self._logged_upto = self.watch_facts.steps.index(done[-1]) + 1
        out: dict[str, float] = {}
        unprofiled = [s for s in done if not s.profiled] or done
        for key, attr in (("step_ms", "step_ms"), ("data_ms", "data_ms"), ("forward_ms", "forward_ms"),
                          ("backward_ms", "backward_ms"), ("optimizer_ms", "optimizer_ms")):
            xs = [getattr(s, attr) for s in unprofiled if getattr(s, attr) is not None]
            if xs:
                out[f"gcdoctor/{key}"] = round(statistics.median(xs), 3)
        peaks = [s.peak_allocated_bytes for s in done if s.peak_allocated_bytes is not None]
        if peaks:
            out["gcdoctor/peak_allocated_gib"] = round(max(peaks) / 2**30, 3)
        rc = self.watch_facts.recompute
        if rc is not None and rc.share is not None:
            out["gcdoctor/recompute_share"] = round(rc.share, 4)
        for k, (total, n) in list(self._tele.items()):
            if n:
                out[f"gcdoctor/{k}"] = round(total / n, 3)
        self._tele.clear()
        return out

    # internals ----------------------------------------------------------------------------
    def _clock(self) -> Any:
        """A point in time: a device event recorded now (the host clock on the CPU)."""
        if self.events_ok:
            ev = getattr(torch, self.backend.kind).Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _mark(self, name: str) -> None:
        """A phase boundary: a device event (host clock on the CPU), and the memory peak of the
        phase that ends here (read and reset on the host: the allocator's own counters)."""
        st = self._step
        if st is None:
            return
        ev = self._clock()
        prev = st.marks[-1][0] if st.marks else "prev"
        if self.memory != "off":
            # one stats read per phase end; the first forward's start is not one (the batch's copy
            # to the device goes with the forward), so a step reads 4 times (2 more per micro-batch)
            if st.marks and not (name == "fwd0" and not st.forwards):
                phase = _phase_of(prev, name, st.forwards) or "other"
                peak, reserved = self._peaks()
                if peak is not None:
                    st.phase_peaks[phase] = max(st.phase_peaks.get(phase, 0), peak)
                if reserved is not None:
                    st.reserved_peak = max(st.reserved_peak, reserved)
            if not (name == "fwd0" and not st.forwards):
                self.backend.reset_peak()  # host-side counters of the caching allocator: no synchronisation
        st.marks.append((name, ev))
        if name == "fwd1":
            st.forwards += 1

    def _peaks(self) -> tuple[int | None, int | None]:
        """(peak allocated, peak reserved) since the last reset, from one read of the allocator's
        statistics (max_memory_allocated and max_memory_reserved would each build all of them)."""
        mod = getattr(self.backend, "mod", None)
        nested = getattr(mod, "memory_stats_as_nested_dict", None)
        if nested is not None:
            st = nested(self.backend.index)
            return st["allocated_bytes"]["all"]["peak"], st["reserved_bytes"]["all"]["peak"]
        return self.backend.max_memory_allocated(), self.backend.max_memory_reserved()

    def _phases(self, rec: WatchStep, marks: list[tuple[str, Any]]) -> None:
        """Phase times of a finished step from its marks (all events complete)."""
        sums: dict[str, float] = {}
        forwards = 0
        for (a, ta), (b, tb) in zip(marks, marks[1:]):
            phase = _phase_of(a, b, forwards)
            if b == "fwd1":
                forwards += 1
            if phase is None:
                continue
            ms = ta.elapsed_time(tb) if self.events_ok else (tb - ta) * 1e3
            sums[phase] = sums.get(phase, 0.0) + ms
        first = marks[0][0]
        for phase in ("data", "forward", "backward", "optimizer", "other"):
            if phase == "data" and first != "prev":
                continue  # no previous step to measure the wait from
            if phase in ("forward", "backward") and not forwards:
                continue
            if phase == "optimizer" and not any(m == "opt1" for m, _ in marks):
                continue
            setattr(rec, f"{phase}_ms", round(sums.get(phase, 0.0), 4))
        if not self.sync:  # from the previous step's end, else (no previous) from this one's start
            rec.step_ms = marks[0][1].elapsed_time(marks[-1][1])

    def _resolve(self, block: bool) -> None:
        """Read the timings of steps whose end events have completed (all of them if block)."""
        while self._pending:
            p = self._pending[0]
            end_ev = p.marks[-1][1]
            if not block and not end_ev.query():
                return
            if block:
                end_ev.synchronize()
            self._phases(p.record, p.marks)
            if p.loss_host is not None:
                p.record.loss = float(p.loss_host)
            self._pending.pop(0)
            self._emit(p.record)

    def _emit(self, rec: WatchStep) -> None:
        self.bus.emit(StepMeasured("watch", "train", self.watch_facts.batch_size or 0, rec.index, rec.step_ms or 0.0,
                                   "profile" if rec.profiled else "watch", rec.loss, rec.peak_allocated_bytes))

    def _enter_tracking(self) -> None:
        opt = getattr(self.optimizer, "optimizer", self.optimizer)
        state = getattr(opt, "state", {}) if opt is not None else {}
        self.backend.track(v for s in state.values() for v in s.values() if isinstance(v, torch.Tensor))
        self._tracking = self.backend.tracking()
        self._tracking.__enter__()

    def _exit_tracking(self) -> None:
        if self._tracking is not None:
            self._tracking.__exit__(None, None, None)
            self._tracking = None

    # hooks: phase boundaries in every step, labels in profiled ones -------------------------
    def _install_hooks(self) -> None:
        m = self.model
        if m is not None:
            self._hooks.append(m.register_forward_pre_hook(self._forward_pre, with_kwargs=True))
            self._hooks.append(m.register_forward_hook(self._forward_post))
        # wrappers (accelerate's AcceleratedOptimizer, DeepSpeed's) keep the torch optimizer inside
        opt = self.optimizer
        while opt is not None and not hasattr(opt, "_optimizer_step_pre_hooks") and hasattr(opt, "optimizer"):
            opt = opt.optimizer
        if opt is not None and hasattr(opt, "_optimizer_step_pre_hooks"):
            self._hooks.append(opt.register_step_pre_hook(lambda *a: self._optimizer_boundary("opt0")))
            self._hooks.append(opt.register_step_post_hook(lambda *a: self._optimizer_boundary("opt1")))
            self.name_optimizer(opt)
        w = self.watch_facts
        w.phases_from = "+".join(x for x, ok in (("model", m is not None), ("optimizer", opt is not None)) if ok)

    def name_optimizer(self, opt: Any) -> None:
        self.watch_facts.optimizer = type(opt).__name__
        self.facts.settings.optimizer = type(opt).__name__.lower()
        d = getattr(opt, "defaults", None) or {}
        self.watch_facts.optimizer_impl = ("fused" if d.get("fused") else "forloop" if d.get("foreach") is False
                                           else "foreach" if "foreach" in d else "")
        from gcdoctor.model.allocator import alloc_conf_env
        self.watch_facts.alloc_conf = os.environ.get(alloc_conf_env(self.facts.environment.device_kind))

    def _forward_pre(self, module: Any, args: tuple, kwargs: dict) -> None:
        if not (torch.is_grad_enabled() and getattr(module, "training", True)):
            return  # evaluation or generation inside the loop: not a training forward
        if self._step is None:
            self.begin_step()
        if self._step is None:
            return
        if self.memory == "count":  # the batch was made outside the counted step
            self.backend.track(t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor))
        self._mark("fwd0")
        shape = _batch_shape(args, kwargs)
        if shape is not None:
            self._step.tokens += shape[0] * shape[1]
            w = self.watch_facts
            if w.batch_size is None:
                w.batch_size, w.seq_len = shape
                self.facts.settings.seq_len = shape[1]
        if self._prof is not None and self.label_phases:
            self._enter_phase("forward")

    def _forward_post(self, module: Any, args: tuple, output: Any) -> None:
        st = self._step
        if st is None or not st.marks or st.marks[-1][0] != "fwd0":
            return
        self._mark("fwd1")
        loss = getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor) and loss.dim() == 0:
            st.loss = loss.detach()
        if self._prof is not None and self.label_phases:
            self._enter_phase("backward")

    def _optimizer_boundary(self, name: str) -> None:
        if self._step is None:
            return
        self._mark(name)
        if self._prof is not None and self.label_phases:
            if name == "opt0":
                self._enter_phase("optimizer")
            else:
                self._close_phase()

    def _enter_phase(self, name: str) -> None:
        self._close_phase()
        self._phase_rf = record_function(LABEL_PREFIX + name)
        self._phase_rf.__enter__()

    def _close_phase(self) -> None:
        if self._phase_rf is not None:
            self._phase_rf.__exit__(None, None, None)
            self._phase_rf = None

    def _remove_hooks(self) -> None:
        self._close_phase()
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # profiling ------------------------------------------------------------------------------
    def _start_profiler(self, first: int) -> None:
        """Profile from step `first` on; ProfilerStep#first opens now (a step's end, or its start)."""
        self.backend.synchronize()
        self._prof = torch.profiler.profile(activities=self.backend.profiler_activities(), record_shapes=False,
                                            with_stack=False, profile_memory=False)
        self._prof.__enter__()
        self._prof_first = first
        self._open_profiler_step(first)

    def _open_profiler_step(self, n: int) -> None:
        # the range torch's profiler writes with a schedule: the trace tools' step windows
        self._prof_step_rf = record_function(f"ProfilerStep#{n}")
        self._prof_step_rf.__enter__()

    def _close_profiler_step(self) -> None:
        if self._prof_step_rf is not None:
            self._prof_step_rf.__exit__(None, None, None)
            self._prof_step_rf = None

    def _stop_profiler(self) -> None:
        if self._prof is None:
            return
        self._close_phase()
        self._close_profiler_step()
        self.backend.synchronize()
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        first = self._prof_first
        done = [i for i in self.watch_facts.profiled_steps if i >= first]
        if not done:  # stopped before the first profiled step ran (the run ended)
            return
        last = done[-1]
        raw = self.rundir.file(f"traces/watch-steps-{first}-{last}.json")
        prof.export_chrome_trace(str(raw))
        import gzip
        import shutil
        gz = raw.with_suffix(".json.gz")
        with open(raw, "rb") as src, gzip.open(gz, "wb", compresslevel=5) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(raw)
        self.trace_paths.append(gz)
        self._analyse_trace(gz)
        # the next step's wait starts now, not at the last step's end: exporting took host time
        self._prev_end, self._prev_wall = self._clock(), time.perf_counter()
        self._prev_host = self._prev_wall

    # what the run was ------------------------------------------------------------------------
    def _describe_checkpointing(self) -> None:
        self._described_gc = True
        if self.model is None:
            return
        cs = describe_checkpointing(self.model)
        self.watch_facts.checkpointing = cs
        self.watch_facts.gradient_checkpointing = cs.enabled

    def _analyse_trace(self, path: Path) -> None:
        """Trace metrics of a profiled stretch (right after it, so the Trainer's logs get the
        recompute share), keyed 'watch/<trace name>' and 'watch/<trace name>|<window>'."""
        try:
            from gcdoctor import trace
            from gcdoctor.facts.trace import TraceKey
            from gcdoctor.trace.recompute import find_recompute
        except ImportError:
            return
        key = "watch/" + path.name.replace(".json.gz", "")
        try:
            tables = trace.load_trace(path)
            metrics = trace.compute_metrics(tables, source=str(path.relative_to(self.rundir.path)))
        except Exception as exc:  # noqa: BLE001 - a trace we cannot read must not lose the run
            self.facts.unavailable[f"trace.{key}"] = str(exc)
            return
        for window, tm in metrics.items():
            self.facts.trace[str(TraceKey(key, window))] = tm
        rec = metrics.get("recompute")
        found = find_recompute(tables) if rec is not None else None  # labelled too: the form it shows
        n = sum(1 for i in self.watch_facts.profiled_steps if i >= self._prof_first)
        self.watch_facts.recompute = recompute_facts(key, metrics, found, self.watch_facts.recompute, n)

    def _finish_facts(self) -> None:
        """What is known once the steps are in: settings, the memory model of the watched model,
        activations vs model states, the recompute against the analytic extra forward."""
        w, st = self.watch_facts, self.facts.settings
        st.measure_steps = len(w.counted())
        forwards = [s.micro_batches for s in w.steps if s.micro_batches]
        w.micro_batches = int(statistics.median(forwards)) if forwards else None
        if w.tokens_per_step is None:
            toks = [s.tokens for s in w.steps if s.tokens]
            w.tokens_per_step = int(statistics.median(toks)) if toks else None
        if not self._described_gc:
            self._describe_checkpointing()
        if w.recompute is None and self.trace_paths:
            w.recompute = WatchRecompute(found=False, trace="watch/" + self.trace_paths[0].name.replace(".json.gz", ""))
        w.device_memory_bytes = self.backend.total_memory()
        self.facts.unavailable["watch.ranks"] = self._ranks_note()
        spec, why = _spec_of(self.model)
        if spec is None:
            self.facts.unavailable["memory_model"] = why
            return
        if w.recompute is not None and w.seq_len:
            _expected_recompute(w.recompute, spec, w.seq_len, w.checkpointing.layers_checkpointed)
        self._model_memory(w, spec)

    def _ranks_note(self) -> str:
        """Why this run directory holds no cross-rank comparison."""
        if not (self.world_size and self.world_size > 1):
            return "a single-process run: no ranks to compare"
        return (f"rank {self.rank} of {self.world_size}: `gcdoctor analyze` of "
                "the folder above the rank-<r> directories compares the ranks")

    def _model_memory(self, w: WatchFacts, spec: Any) -> None:
        """The memory model's prediction for the watched model and batch shape, and the part of the
        measured peak it leaves to activations (or why there is no prediction)."""
        optimizer = OPTIMIZER_MODELS.get(w.optimizer.lower())
        dtype = DTYPE_NAMES.get(w.param_dtype or "")
        kind = self.backend.kind
        if not (w.batch_size and w.seq_len):
            self.facts.unavailable["memory_model"] = ("no batch shape seen (no input_ids or inputs_embeds in the "
                                                      "forwards)")
            return
        if optimizer is None or dtype is None or kind not in ("cuda", "musa", "cpu"):
            self.facts.unavailable["memory_model"] = (
                f"the memory model covers AdamW/Adam/SGD, bf16/fp16/fp32 on cuda/musa/cpu; this run is "
                f"{w.optimizer or 'no optimizer'}, {w.param_dtype}, {kind}")
            return
        from gcdoctor.model.fitting import memory_model_facts
        mm = memory_model_facts(spec, w.seq_len, dtype, optimizer, kind,
                                points=[("no_gc", w.batch_size), ("gc", w.batch_size)],
                                capacity_bytes=self.backend.memory_limit() or w.device_memory_bytes)
        gc_layers, total = w.checkpointing.layers_checkpointed, w.checkpointing.layers_total
        if gc_layers is not None and total and gc_layers not in (0, total):
            mm.notes.append(f"the model's 'gc' point checkpoints every decoder layer; this run checkpoints "
                            f"{gc_layers} of {total}")
        if w.micro_batches and w.micro_batches > 1:
            mm.notes.append(f"predicted for one micro-batch of {w.batch_size}; the step runs {w.micro_batches}")
        self.facts.memory_model = mm
        w.model_state_bytes = mm.model_state_bytes
        peak = w.peak_allocated_bytes
        if peak is not None:
            w.activation_peak_bytes = peak - mm.model_state_bytes


def _expected_recompute(rc: WatchRecompute, spec: Any, seq_len: int, gc_layers: int | None) -> None:
    """The analytic extra forward of the checkpointed layers: the layers the model says it
    checkpoints, else one per region the trace shows."""
    n_ckpt = gc_layers if gc_layers else min(spec.n_layers, round(rc.regions_per_step or 0))
    fraction = spec.layer_forward_share(seq_len, n_ckpt)
    rc.layer_forward_fraction = fraction
    if rc.forward_ms is not None:
        rc.expected_recompute_ms = round(rc.forward_ms * fraction, 4)


def recompute_facts(key: str, metrics: dict[str, Any], found: Any, prev: WatchRecompute | None,
                    n_profiled: int | None = None) -> WatchRecompute:
    """Recompute of one profiled stretch, per profiled step (added to `prev` from an earlier stretch).
    Per ProfilerStep window; a trace without them (an older watcher's) counts `n_profiled` steps."""
    steps = [m for k, m in metrics.items() if k.startswith("step:")]
    n = len(steps)
    if not n and n_profiled and "all" in metrics:
        steps, n = [metrics["all"]], n_profiled
    rec, fwd = metrics.get("recompute"), metrics.get("forward")
    device = all(m.device_unavailable is None for m in steps) and bool(steps)
    out = prev if prev is not None else WatchRecompute(trace=key)
    if not n:
        return out
    r_us, s_us, f_us = _stretch_us(steps, rec, fwd, device)
    total = out.steps + n
    def avg(old: float | None, new_sum_us: float) -> float:
        new = new_sum_us / 1e3
        return round(((old or 0.0) * out.steps + new) / total, 4)
    recompute_ms, step_ms = avg(out.recompute_ms, r_us), avg(out.step_ms, s_us)
    out.recompute_ms, out.step_ms = recompute_ms, step_ms
    if f_us is not None:
        out.forward_ms = avg(out.forward_ms, f_us)
    out.steps, out.time_basis = total, "device" if device else "host"
    out.share = recompute_ms / step_ms if step_ms else None
    if rec is not None:
        out.found = True
        out.source = rec.window_source
        regions = (out.regions_per_step or 0.0) * (total - n) + rec.range_count
        out.regions_per_step = round(regions / total, 2)
        if rec.window_source == "labels":
            out.method, out.description = "labels", f"{rec.range_count} gcdoctor/recompute ranges"
            if found is not None:
                out.kind = found.kind
        elif found is not None:
            out.method, out.kind, out.description = found.method, found.kind, found.describe()
    return out


def _stretch_us(steps: list[Any], rec: Any, fwd: Any, device: bool) -> tuple[float, float, float | None]:
    """(recompute, whole steps, forward) microseconds of a profiled stretch: device busy time, or on
    a CPU-only trace host time (ops run on the host thread: their host time is their compute time)."""
    if device:
        r_us = sum(m.recompute_busy_us or 0.0 for m in steps)
        s_us = sum(m.busy_us or 0.0 for m in steps)
        f_us = fwd.busy_us if fwd is not None and fwd.busy_us is not None else None
    else:
        r_us = (rec.wall_us or 0.0) if rec is not None else 0.0
        s_us = sum(m.wall_us or 0.0 for m in steps)
        f_us = fwd.wall_us if fwd is not None else None
    return r_us, s_us, f_us


def describe_checkpointing(model: Any) -> CheckpointingSettings:
    """What the model and the libraries around it say about its checkpointing: transformers'
    `gradient_checkpointing` layers and their checkpoint function's keywords, torch.distributed's
    `checkpoint_wrapper` modules and composable `checkpoint`, DeepSpeed's configuration."""
    import functools
    cs = CheckpointingSettings()
    layers, flagged, funcs = [], [], []
    layer_types: tuple[type, ...]
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
        layer_types = (GradientCheckpointingLayer,)
    except ImportError:
        layer_types = ()
    has_flag = False
    for mod in model.modules():
        if isinstance(mod, layer_types):
            layers.append(mod)
        if hasattr(mod, "gradient_checkpointing"):
            has_flag = True
            if mod.gradient_checkpointing:
                flagged.append(mod)
                f = getattr(mod, "_gradient_checkpointing_func", None)
                if f is not None:
                    funcs.append(f)
    if has_flag:
        cs.api = "transformers"
        cs.enabled = bool(flagged)
        if layers:
            cs.layers_total = len(layers)
            cs.layer_indices = [i for i, m in enumerate(layers) if getattr(m, "gradient_checkpointing", False)]
            cs.layers_checkpointed = len(cs.layer_indices)
        if funcs:
            f = funcs[0]
            kw = dict(f.keywords) if isinstance(f, functools.partial) else {}
            base = f.func if isinstance(f, functools.partial) else f
            cs.offload = "checkpoint_func" in getattr(base, "__qualname__", "")  # transformers' offload wrapper
            _keywords(cs, kw)
            name = getattr(base, "__module__", "") or ""
            if "deepspeed" in name:  # its checkpoint() is a reentrant autograd.Function
                cs.api = "deepspeed"
                cs.use_reentrant = getattr(base, "__name__", "") != "non_reentrant_checkpoint"
    wrapped = _checkpoint_wrappers(model, layers)
    if wrapped is not None and not cs.enabled:
        cs.api, cs.enabled = wrapped[0], True
        cs.layers_checkpointed, cs.use_reentrant = wrapped[1], wrapped[2]
        if layers:
            cs.layers_total = len(layers)
        _keywords(cs, wrapped[3])
    if cs.enabled is None:
        cs.api = "none reported"
        cs.notes.append("the model reports no checkpointing (transformers' flags, checkpoint_wrapper, the "
                        "composable checkpoint); the profiled steps' trace shows whether anything recomputes")
    return cs


def _keywords(cs: CheckpointingSettings, kw: dict[str, Any]) -> None:
    if "use_reentrant" in kw:
        cs.use_reentrant = bool(kw["use_reentrant"])
    cs.kwargs = {k: (getattr(v, "__qualname__", None) or repr(v)) if callable(v) else repr(v) for k, v in kw.items()}


def _checkpoint_wrappers(model: Any, layers: list) -> tuple[str, int, bool | None, dict] | None:
    """(api, modules checkpointed, use_reentrant, keywords) of torch.distributed's checkpointing."""
    count, reentrant, kw, api = 0, None, {}, ""
    get_registry: Callable[[Any], Any] | None
    try:
        from torch.distributed._composable.contract import _get_registry
        get_registry = _get_registry
    except Exception:  # noqa: BLE001 - private API: absent or moved
        get_registry = None
    for mod in model.modules():
        impl = getattr(mod, "checkpoint_impl", None)
        if impl is not None and hasattr(mod, "_checkpoint_wrapped_module"):
            count += 1
            api = "checkpoint_wrapper"
            reentrant = "NO_REENTRANT" not in str(impl)
            fn = getattr(mod, "checkpoint_fn", None)
            kw = dict(getattr(fn, "keywords", {}) or {})
            kw.pop("use_reentrant", None)
            continue
        try:
            reg = (get_registry(mod) or {}) if get_registry is not None else {}
        except Exception:  # noqa: BLE001 - private API: changed
            reg = {}
        if "checkpoint" in reg:
            count += 1
            api, reentrant = "composable", False
    return (api, count, reentrant, kw) if count else None


def _batch_shape(args: tuple, kwargs: dict) -> tuple[int, int] | None:
    """(batch, sequence) of a forward's input: input_ids, else inputs_embeds, else the first tensor."""
    t = kwargs.get("input_ids")
    if t is None:
        e = kwargs.get("inputs_embeds")
        if isinstance(e, torch.Tensor) and e.dim() == 3:
            return int(e.shape[0]), int(e.shape[1])
        t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    if isinstance(t, torch.Tensor) and t.dim() >= 2:
        return int(t.shape[0]), int(t.shape[1])
    return None


def _spec_of(model: Any) -> tuple[Any, str]:
    """The memory model's spec of a watched transformers model, or (None, why not)."""
    from gcdoctor.errors import UserError
    from gcdoctor.model.registry import spec_from_config
    cfg = getattr(model, "config", None)
    if model is None or cfg is None or not hasattr(cfg, "to_dict"):
        return None, "the watched model has no transformers config: the memory model needs one"
    try:
        return spec_from_config(cfg.to_dict(), name=getattr(cfg, "_name_or_path", "") or type(model).__name__,
                                source="watched"), ""
    except UserError as exc:
        return None, f"the memory model cannot describe this model ({exc})"


def _loss_value(loss: Any) -> float | None:
    if loss is None:
        return None
    if isinstance(loss, torch.Tensor):
        return float(loss.detach().float())
    return float(loss)


def watch(model: Any = None, optimizer: Any = None, out: str | Path | None = None, **kwargs: Any) -> Watcher:
    """Create a Watcher for the user's own training loop (see the module docstring)."""
    return Watcher(model, optimizer, out, **kwargs)
