"""Facts of a watched user training run (gcdoctor.watch, the Trainer callback, `gcdoctor watch --`).

Per step: the step time and its phases (data wait, forward, backward, optimizer, the rest),
the peak memory of each phase; per run: what the model says about its checkpointing, what the
profiled steps show of the recomputation (with or without labels), the memory model's view of
the model states and of the peak without checkpointing, and, in a distributed run, the rank.
No torch here: recorded runs are re-judged anywhere.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

PHASES = ("data", "forward", "backward", "optimizer", "other")
# what the step summaries take medians of: the phases, and the host's wait between steps
STEP_PARTS = ("host_wait", *PHASES)


@dataclass
class WatchStep:
    index: int
    step_ms: float | None = None  # device time from the previous step's end to this one's (events), or synced wall
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    loss: float | None = None
    t_start: float | None = None  # time.monotonic(), the telemetry clock
    t_end: float | None = None
    profiled: bool = False
    # the step's phases, device time between device events (host time on the CPU), ms:
    # data: from the previous step's end to this step's first forward (the batch: loading, copy);
    # forward: inside the model's forward (the loss too when the model computes it, as HF models do);
    # backward: from a forward's end to the next forward or the optimizer step (a loss computed
    # outside the model, and the backward); optimizer: inside optimizer.step(); other: after it
    # to the step's end (zero_grad, the LR scheduler, logging)
    data_ms: float | None = None
    # host clock, from the previous step's end to this one's start (the loop outside the step:
    # fetching the batch, Python); unlike data_ms it excludes the device draining earlier work
    host_wait_ms: float | None = None
    forward_ms: float | None = None
    backward_ms: float | None = None
    optimizer_ms: float | None = None
    other_ms: float | None = None
    micro_batches: int = 0  # forwards with grad enabled in this step (gradient accumulation)
    tokens: int | None = None  # batch x sequence of the forwards' inputs, summed
    # phase -> peak allocated inside it (forward, backward, optimizer, other; the first forward's
    # includes the batch's copy to the device from the step's start)
    phase_peak_bytes: dict[str, int] = field(default_factory=dict)
    peak_phase: str | None = None  # the phase of the step's memory peak

    def phase_ms(self, phase: str) -> float | None:
        """A STEP_PARTS entry's time: a phase, or host_wait."""
        return getattr(self, f"{phase}_ms")


@dataclass
class CheckpointingSettings:
    """What the model (and the libraries around it) report about its activation checkpointing."""

    enabled: bool | None = None  # None: nothing reported (the trace may still show recomputation)
    api: str = ""  # transformers | checkpoint_wrapper | composable | deepspeed | none reported
    layers_checkpointed: int | None = None  # repeated decoder layers checkpointed
    layers_total: int | None = None  # repeated decoder layers of the model
    layer_indices: list[int] = field(default_factory=list)  # which ones (0-based, in module order)
    use_reentrant: bool | None = None  # None: not reported (torch's default is True up to 2.4's warning)
    offload: bool | None = None  # activations saved for the recompute offloaded to the host
    kwargs: dict[str, str] = field(default_factory=dict)  # the checkpoint function's keyword arguments, as text
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """'4/4 layers, use_reentrant=False' or 'off' or 'not reported'."""
        if self.enabled is None:
            return "not reported"
        if not self.enabled:
            return "off"
        parts = []
        if self.layers_checkpointed is not None and self.layers_total:
            parts.append(f"{self.layers_checkpointed}/{self.layers_total} layers")
        if self.use_reentrant is not None:
            parts.append(f"use_reentrant={self.use_reentrant}")
        if self.offload:
            parts.append("offloaded to the host")
        return ", ".join(parts) or "on"


@dataclass
class WatchRecompute:
    """Recomputation in the watched run's profiled steps, per steady profiled step."""

    found: bool = False
    source: str = ""  # labels (gcdoctor/recompute ranges) | recompute_inferred (found without labels)
    method: str = ""  # how it was found without labels (gcdoctor.trace.recompute METHOD_*)
    kind: str = ""  # reentrant | non-reentrant | mixed
    regions_per_step: float | None = None
    description: str = ""
    trace: str = ""  # the facts.trace key it was read from
    time_basis: str = ""  # device (busy time of the device) | host (CPU: op time is host time)
    steps: int = 0  # profiled steps it was measured over
    recompute_ms: float | None = None  # per step
    forward_ms: float | None = None  # per step, the model's forward (same basis)
    step_ms: float | None = None  # per step, the whole step (same basis: device busy, or host wall)
    share: float | None = None  # recompute_ms / step_ms
    # the analytic extra forward: what recomputing the checkpointed layers once should cost
    layer_forward_fraction: float | None = None  # checkpointed layers' share of the forward FLOPs
    expected_recompute_ms: float | None = None  # forward_ms x layer_forward_fraction

    @property
    def overhead_pct(self) -> float | None:
        """What the recomputation adds to the step: recompute / (step - recompute), in percent."""
        if self.recompute_ms is None or not self.step_ms or self.step_ms <= self.recompute_ms:
            return None
        return 100.0 * self.recompute_ms / (self.step_ms - self.recompute_ms)

    @property
    def vs_expected(self) -> float | None:
        """Measured recompute over the analytic extra forward (1.0: exactly one forward again)."""
        if self.recompute_ms is None or not self.expected_recompute_ms:
            return None
        return self.recompute_ms / self.expected_recompute_ms


@dataclass
class RankSummary:
    """One rank of a distributed watched run (gcdoctor analyze of a folder of rank-* run directories)."""

    rank: int = 0
    run_dir: str = ""
    steps: int = 0
    step_ms_median: float | None = None
    phase_ms_median: dict[str, float] = field(default_factory=dict)  # STEP_PARTS: host_wait, data, forward, ...
    peak_allocated_bytes: int | None = None


@dataclass
class WatchFacts:
    """Per-step records of the user's own job, as measured by the watcher."""

    model_name: str | None = None
    n_params: int | None = None
    param_dtype: str | None = None
    gradient_checkpointing: bool | None = None  # what the model reports, where it does
    timing: str = "events"  # events (no synchronisation) | sync (synchronised wall clock) | host
    tokens_per_step: int | None = None
    steps: list[WatchStep] = field(default_factory=list)
    profiled_steps: list[int] = field(default_factory=list)
    overhead_note: str = ""
    notes: list[str] = field(default_factory=list)
    # what the run really was
    batch_size: int | None = None  # of one forward (a micro-batch)
    seq_len: int | None = None
    micro_batches: int | None = None  # forwards per optimizer step
    optimizer: str = ""  # the optimizer's class (AdamW, SGD, DeepSpeedCPUAdam, ...)
    optimizer_impl: str = ""  # a torch optimizer's implementation: fused | foreach | forloop ("" unknown)
    alloc_conf: str | None = None  # the job's PYTORCH_CUDA_ALLOC_CONF (PYTORCH_MUSA_ALLOC_CONF); None: unset
    phases_from: str = ""  # hooks the phases came from: "model+optimizer", "optimizer", "" (none)
    checkpointing: CheckpointingSettings = field(default_factory=CheckpointingSettings)
    recompute: WatchRecompute | None = None
    # memory: from the memory model of the watched model (facts.memory_model) and the steps' peaks
    model_state_bytes: int | None = None  # predicted params + grads + optimizer states
    activation_peak_bytes: int | None = None  # measured peak minus the predicted model states
    device_memory_bytes: int | None = None  # the device's memory (total_memory), for headroom
    # distributed
    rank: int | None = None
    world_size: int | None = None
    ranks: list[RankSummary] = field(default_factory=list)  # filled when analyze merges rank directories

    def counted(self, skip_profiled: bool = True, skip_first: int = 1) -> list[WatchStep]:
        """The steps medians are taken over: after the first, not profiled."""
        return [s for s in self.steps[skip_first:] if not (skip_profiled and s.profiled)]

    def step_times(self, skip_profiled: bool = True, skip_first: int = 1) -> list[float]:
        return [s.step_ms for s in self.counted(skip_profiled, skip_first) if s.step_ms is not None]

    @property
    def step_ms_median(self) -> float | None:
        xs = self.step_times()
        return statistics.median(xs) if xs else None

    def phase_ms_median(self, phase: str) -> float | None:
        xs = [v for s in self.counted() if (v := s.phase_ms(phase)) is not None]
        return statistics.median(xs) if xs else None

    @property
    def peak_allocated_bytes(self) -> int | None:
        xs = [s.peak_allocated_bytes for s in self.steps if s.peak_allocated_bytes is not None]
        return max(xs) if xs else None

    @property
    def peak_phase(self) -> str | None:
        """The phase of the largest peak over all steps."""
        best = max((s for s in self.steps if s.peak_allocated_bytes is not None and s.peak_phase),
                   key=lambda s: s.peak_allocated_bytes or 0, default=None)
        return best.peak_phase if best else None

    def settings_text(self) -> str:
        """What the run was, in one line: 'batch 2 x seq 2048, bfloat16, AdamW, 20 steps (5, 6 profiled),
        checkpointing 4/4 layers, use_reentrant=False'."""
        parts = []
        if self.batch_size and self.seq_len:
            mb = f" x {self.micro_batches} micro-batches" if self.micro_batches and self.micro_batches > 1 else ""
            parts.append(f"batch {self.batch_size} x seq {self.seq_len}{mb}")
        if self.param_dtype:
            parts.append(self.param_dtype)
        if self.optimizer:
            parts.append(self.optimizer)
        prof = f" ({', '.join(map(str, self.profiled_steps))} profiled)" if self.profiled_steps else ""
        parts.append(f"{len(self.steps)} steps{prof}")
        parts.append(f"checkpointing {self.checkpointing.text()}")
        if self.world_size and self.world_size > 1:
            parts.append(f"rank {self.rank} of {self.world_size}")
        return ", ".join(parts)
