"""One training step, measured honestly, optionally under torch.profiler with labelled regions.

The step is what gcdoctor measures everywhere: forward, loss, backward, optimizer step, then
`zero_grad(set_to_none=True)`. Phases are labelled with `record_function` ("gcdoctor/forward",
"gcdoctor/loss", "gcdoctor/backward", "gcdoctor/optimizer"); checkpointed regions get
"gcdoctor/ckpt-forward/<n>" and "gcdoctor/recompute/<n>" through checkpoint's `context_fn`.
"""
from __future__ import annotations

import gc
import gzip
import itertools
import os
import shutil
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.profiler import record_function

from gcdoctor.backends.base import Backend

LABEL_PREFIX = "gcdoctor/"


# -- checkpointing ---------------------------------------------------------------------------

def labelled_context_fn(name: str = "layer") -> Callable[[], tuple[Any, Any]]:
    """A `context_fn` for `torch.utils.checkpoint.checkpoint(use_reentrant=False)` that labels the
    forward and the recomputation of each checkpointed region, numbered in call order per step."""
    counter = itertools.count()

    def context_fn():
        n = next(counter)
        return (record_function(f"{LABEL_PREFIX}ckpt-forward/{name}{n}"),
                record_function(f"{LABEL_PREFIX}recompute/{name}{n}"))

    return context_fn


def enable_layer_checkpointing(model: Any, every_n_layers: int = 1, labelled: bool = True,
                               extra_kwargs: dict[str, Any] | None = None) -> str:
    """Turn on transformers' layer-level checkpointing with the API current for the installed
    version (`activation_checkpointing_enable` from 5.24, `gradient_checkpointing_enable`
    before). Returns a description of the call, for the facts."""
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if labelled:
        kwargs["context_fn"] = labelled_context_fn()
    kwargs.update(extra_kwargs or {})
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs, every_n_layers=every_n_layers)
        api = "activation_checkpointing_enable"
    else:
        try:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs, every_n_layers=every_n_layers)
        except TypeError:  # transformers 4.x has no every_n_layers
            if every_n_layers != 1:
                raise
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        api = "gradient_checkpointing_enable"
    shown = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k != "context_fn")
    return f"{api}({shown}{', every_n_layers=%d' % every_n_layers if every_n_layers != 1 else ''})"


OPTIMIZER_IMPLS: dict[str, dict[str, Any]] = {"adamw": {"foreach": True}, "adamw-forloop": {"foreach": False},
                   "adamw-fused": {"fused": True}}


def make_optimizer(params: Any, name: str) -> torch.optim.Optimizer:
    """AdamW keeps exp_avg and exp_avg_sq in the parameters' dtype; foreach=True everywhere so the
    CPU and the GPU run the same implementation (and the same transient memory). "adamw-forloop"
    (foreach=False) and "adamw-fused" (fused=True) are the optimizer probe's alternatives."""
    params = [p for p in params if p.requires_grad]
    if name in OPTIMIZER_IMPLS:
        return torch.optim.AdamW(params, lr=1e-4, **OPTIMIZER_IMPLS[name])
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4, foreach=True)
    raise ValueError(f"unknown optimizer {name!r}")


def tensor_bytes(tensors: Any) -> int:
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            t = getattr(t, "_local_tensor", t)  # a sharded DTensor: this rank's shard
            st = t.untyped_storage()
            if st.data_ptr() not in seen:
                seen.add(st.data_ptr())
                total += st.nbytes()
    return total


def optimizer_state_bytes(opt: torch.optim.Optimizer) -> int:
    return tensor_bytes(v for state in opt.state.values() for v in state.values() if isinstance(v, torch.Tensor))


# -- one step ------------------------------------------------------------------------------

@dataclass
class StepRecord:
    step_ms: float  # synchronised wall time of the whole step
    forward_ms: float | None  # forward + loss, device time between events
    backward_ms: float | None
    optimizer_ms: float | None
    loss: float
    peak_allocated_bytes: int | None
    peak_fwd_bwd_allocated_bytes: int | None
    peak_optimizer_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    baseline_allocated_bytes: int | None
    activation_after_forward_bytes: int | None
    host_ms: float | None = None  # host time until the step waits for the device at its end
    t_start: float = 0.0  # time.monotonic(), the telemetry clock
    t_end: float = 0.0
    phase_times: dict[str, tuple[float, float]] = field(default_factory=dict)  # monotonic, host side


class _PhaseClock:
    """Device events where the backend has them, else synchronised host clocks."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        mod = getattr(torch, backend.kind, None) if backend.kind != "cpu" else None
        self.event_cls = getattr(mod, "Event", None) if mod is not None else None
        self.marks: list[Any] = []

    def mark(self) -> None:
        if self.event_cls is not None:
            ev = self.event_cls(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        out = []
        for a, b in zip(self.marks, self.marks[1:]):
            out.append(a.elapsed_time(b) if self.event_cls is not None else (b - a) * 1e3)
        return out


class TrainingStep:
    """A causal-LM training step on fixed random tokens (labels = inputs, no padding mask)."""

    def __init__(self, model: Any, backend: Backend, batch_size: int, seq_len: int,
                 optimizer: str = "adamw", seed: int = 0,
                 forward: Callable[[Any, torch.Tensor], torch.Tensor] | None = None,
                 optimizer_obj: Any = None, backward: Callable[[torch.Tensor], None] | None = None,
                 optimizer_step: Callable[[], None] | None = None) -> None:
        self.model = model
        self.backend = backend
        self.batch_size, self.seq_len = batch_size, seq_len
        vocab = model.config.vocab_size if hasattr(model, "config") else 32000
        gen = torch.Generator().manual_seed(seed)
        self.input_ids: torch.Tensor | None = torch.randint(vocab, (batch_size, seq_len), generator=gen).to(backend.device)
        self.optimizer = optimizer_obj if optimizer_obj is not None else (
            make_optimizer(model.parameters(), optimizer) if optimizer_step is None else None)
        self._forward = forward or _causal_lm_loss
        self._backward = backward or (lambda loss: loss.backward())
        self._optimizer_step = optimizer_step or self._default_optimizer_step
        self.phase = "setup"  # the phase running now: tells where an OOM happened

    def _default_optimizer_step(self) -> None:
        assert self.optimizer is not None  # made in __init__ whenever this step is used (release() drops it)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self) -> StepRecord:
        b = self.backend
        b.synchronize()
        clock = _PhaseClock(b)
        phases: dict[str, tuple[float, float]] = {}
        b.reset_peak()
        baseline = b.memory_allocated()
        t0 = time.monotonic()
        w0 = time.perf_counter()
        clock.mark()
        self.phase = "forward"
        assert self.input_ids is not None  # only release() drops them, after the step's last run
        with record_function(LABEL_PREFIX + "forward"):
            loss = self._forward(self.model, self.input_ids)
        clock.mark()
        t1 = time.monotonic()
        after_fwd = b.memory_allocated()
        self.phase = "backward"
        with record_function(LABEL_PREFIX + "backward"):
            self._backward(loss)
        clock.mark()
        t2 = time.monotonic()
        peak_fb = b.max_memory_allocated()
        reserved_fb = b.max_memory_reserved()
        b.reset_peak()
        self.phase = "optimizer"
        with record_function(LABEL_PREFIX + "optimizer"):
            self._optimizer_step()
        clock.mark()
        host_ms = (time.perf_counter() - w0) * 1e3
        b.synchronize()
        step_ms = (time.perf_counter() - w0) * 1e3
        t3 = time.monotonic()
        self.phase = "done"
        peak_opt = b.max_memory_allocated()
        reserved_opt = b.max_memory_reserved()
        phases = {"forward": (t0, t1), "backward": (t1, t2), "optimizer": (t2, t3)}
        fwd, bwd, opt = clock.intervals_ms()
        peaks = [p for p in (peak_fb, peak_opt) if p is not None]
        reserved = [r for r in (reserved_fb, reserved_opt) if r is not None]
        return StepRecord(
            step_ms=step_ms, forward_ms=fwd, backward_ms=bwd, optimizer_ms=opt, loss=float(loss.detach()),
            peak_allocated_bytes=max(peaks) if peaks else None, peak_fwd_bwd_allocated_bytes=peak_fb,
            peak_optimizer_allocated_bytes=peak_opt, peak_reserved_bytes=max(reserved) if reserved else None,
            baseline_allocated_bytes=baseline,
            activation_after_forward_bytes=None if after_fwd is None or baseline is None else after_fwd - baseline,
            host_ms=host_ms, t_start=t0, t_end=t3, phase_times=phases,
        )

    def release(self) -> None:
        """Drop optimizer state, grads and inputs (after an OOM or at the end of a measurement)."""
        if self.optimizer is not None:
            self.optimizer.state.clear()
        for p in self.model.parameters():
            p.grad = None
        self.optimizer = None
        self.input_ids = None


def _causal_lm_loss(model: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """Forward, then the library's own loss (it upcasts logits to fp32), labelled separately."""
    out = model(input_ids=input_ids, use_cache=False)
    with record_function(LABEL_PREFIX + "loss"):
        loss_fn = getattr(model, "loss_function", None)
        if loss_fn is not None:
            return loss_fn(logits=out.logits, labels=input_ids, vocab_size=model.config.vocab_size)
        logits = out.logits[:, :-1].float()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1))


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def free_memory(backend: Backend) -> None:
    gc.collect()
    backend.empty_cache()


# -- profiling ------------------------------------------------------------------------------

def profile_steps(step: TrainingStep, n_steps: int, trace_path: str | Path) -> tuple[list[StepRecord], Path]:
    """Run `n_steps` under torch.profiler (device activities of the backend, no stacks, no shapes:
    both bloat traces and distort timing) and write a gzipped Chrome trace for Perfetto."""
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    records: list[StepRecord] = []
    activities = step.backend.profiler_activities()
    raw = trace_path.with_suffix("") if trace_path.suffix == ".gz" else trace_path
    # a schedule makes torch write one ProfilerStep#N range per step (the host rules read them; torch 2.11
    # on CUDA writes none without one); the trace is exported when its one active window closes
    sched = torch.profiler.schedule(wait=0, warmup=0, active=n_steps, repeat=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        with torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False,
                                    profile_memory=False, schedule=sched,
                                    on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(n_steps):
                records.append(step.run())
                prof.step()
    if trace_path.suffix == ".gz":
        with open(raw, "rb") as src, gzip.open(trace_path, "wb", compresslevel=5) as dst:
            shutil.copyfileobj(src, dst)
        os.unlink(raw)
    return records, trace_path
