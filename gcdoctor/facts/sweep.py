"""Facts of the batch-sweep probe: step time and memory per variant and batch size."""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.facts.telemetry import SeriesSummary


@dataclass
class OomInfo:
    """An out-of-memory error, read and classified (gcdoctor.backends.oom says how).

    Bytes come from the allocator's own counters at the failure where the backend has them
    (`source` "allocator"), else from the error message (two decimals of their unit)."""

    spelling: str = ""  # which recogniser matched: caching allocator, CPU allocator, runtime, BLAS, ...
    phase: str | None = None  # forward | backward | optimizer | setup
    request_bytes: int | None = None  # the allocation that failed (the allocator's rounded block)
    allocated_bytes: int | None = None  # handed out to tensors at the failure
    reserved_bytes: int | None = None  # held by the caching allocator at the failure
    reserved_unallocated_bytes: int | None = None  # cached but free: reserved - allocated
    device_total_bytes: int | None = None
    device_free_bytes: int | None = None  # the driver's free memory at the failure
    allowed_bytes: int | None = None  # the --memory-limit in force, if any
    headroom_bytes: int | None = None  # what the process could still get: free, capped by the limit
    kind: str = "unknown"  # fragmentation | mixed | capacity | unknown
    source: str = ""  # allocator | message | allocator+message
    message: str = ""  # the error's first line, as raised


@dataclass
class Measurement:
    """One variant at one batch size: medians of synchronised steps after a warm-up.

    Memory is in bytes as the device allocator counts it (`max_memory_allocated` after a
    peak reset). Model states are summed from the tensors themselves, so they are exact.
    """

    probe: str
    variant: str
    batch_size: int
    seq_len: int
    fits: bool = True
    oom_phase: str | None = None  # forward | backward | optimizer, when fits is False
    error: str | None = None
    oom: OomInfo | None = None  # the OOM read and classified, when fits is False because of one
    step_ms: list[float] = field(default_factory=list)
    step_ms_median: float | None = None
    forward_ms_median: float | None = None  # forward + loss
    backward_ms_median: float | None = None
    optimizer_ms_median: float | None = None
    peak_allocated_bytes: int | None = None  # whole step
    peak_reserved_bytes: int | None = None
    peak_fwd_bwd_allocated_bytes: int | None = None
    peak_optimizer_allocated_bytes: int | None = None
    allocated_before_bytes: int | None = None  # before this measurement built its step: the model alone
    allocated_after_bytes: int | None = None  # after it released its step (OOM or not): back to the above
    baseline_allocated_bytes: int | None = None  # before the forward: params + optimizer states + inputs
    activation_after_forward_bytes: int | None = None  # allocated after forward+loss minus baseline
    param_bytes: int | None = None
    grad_bytes: int | None = None
    optimizer_state_bytes: int | None = None
    tokens_per_s: float | None = None
    model_tflops_per_s: float | None = None
    mfu: float | None = None  # None where the device's peak is unknown
    losses: list[float] = field(default_factory=list)
    predicted_peak_bytes: int | None = None
    telemetry: dict[str, SeriesSummary] = field(default_factory=dict)
    # set when the variant was timed once instead of N times: its first timed step was at least
    # PATHOLOGICAL_RATIO times its baseline variant's median step (why, in words)
    timed_once: str | None = None

    @property
    def model_state_bytes(self) -> int | None:
        parts = (self.param_bytes, self.grad_bytes, self.optimizer_state_bytes)
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]

    @property
    def activation_peak_bytes(self) -> int | None:
        """Peak of the step minus the model states: what activations (and transients) cost."""
        states = self.model_state_bytes
        if states is None or self.peak_allocated_bytes is None:
            return None
        return max(self.peak_allocated_bytes - states, 0)

    @property
    def peak_phase(self) -> str | None:
        a, b = self.peak_fwd_bwd_allocated_bytes, self.peak_optimizer_allocated_bytes
        if a is None or b is None:
            return None
        return "forward+backward" if a >= b else "optimizer step"


@dataclass
class SearchTrial:
    variant: str
    batch_size: int
    fits: bool
    peak_allocated_bytes: int | None = None
    oom_phase: str | None = None
    seconds: float | None = None
    oom_kind: str | None = None  # fragmentation | mixed | capacity | unknown, when it did not fit


@dataclass
class LiveTensor:
    """One block alive at the snapshot's peak (gcdoctor.model.snapshot)."""

    bytes: int = 0
    kind: str = ""  # parameters | gradients | optimizer states | optimizer temporaries | logits and loss |
    # saved activations | temporaries
    frame: str = ""  # the innermost frame that allocated it, file:line function


@dataclass
class SnapshotFacts:
    """What was alive at a recorded step's allocated peak, by kind, and its largest tensors
    (`diagnose --memory-snapshot`; gcdoctor.model.snapshot reads the allocator's trace)."""

    path: str = ""  # the pickle, relative to the run directory (open at pytorch.org/memory_viz)
    variant: str = ""
    batch_size: int = 0
    peak_bytes: int = 0  # requested bytes alive at the peak, as the trace replays it
    peak_index: int = 0  # the trace event at which it peaks
    entries: int = 0  # trace events recorded
    by_kind_bytes: dict[str, int] = field(default_factory=dict)
    largest: list[LiveTensor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class SweepFacts:
    """Checkpointing off ('no_gc') and layer-level on ('gc') over batch sizes."""

    gc_api: str = ""  # e.g. "activation_checkpointing_enable(use_reentrant=False)"
    searched: bool = True  # False when --batch-sizes fixed the list
    fixed_by: str = ""  # when not searched: "--batch-sizes", or "cpu-default" (the CPU without --memory-limit)
    max_batch: dict[str, int | None] = field(default_factory=dict)  # per variant; None = not found
    max_batch_capped: dict[str, bool] = field(default_factory=dict)  # search hit --max-batch
    trials: list[SearchTrial] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    target_batch: int | None = None
    # how each variant's boundary was searched: "model-guided" (the allocator replay's predicted
    # largest batch and its neighbour first) or "doubling" (from 1, then bisection)
    strategy: dict[str, str] = field(default_factory=dict)
    predicted_max_batch: dict[str, int | None] = field(default_factory=dict)  # what guided it
    search_ooms: dict[str, int] = field(default_factory=dict)  # trials that ran out of memory
    search_seconds: dict[str, float] = field(default_factory=dict)  # per variant, model build to release
    wall_s: float | None = None  # the whole probe
    snapshot: SnapshotFacts | None = None  # --memory-snapshot: the peak point's live tensors

    def get(self, variant: str, batch_size: int) -> Measurement | None:
        for m in self.measurements:
            if m.variant == variant and m.batch_size == batch_size and m.fits:
                return m
        return None

    def common_batches(self, a: str = "no_gc", b: str = "gc") -> list[int]:
        """Batch sizes measured (and fitting) for both variants: the only fair comparisons."""
        sa = {m.batch_size for m in self.measurements if m.variant == a and m.fits and m.step_ms_median}
        sb = {m.batch_size for m in self.measurements if m.variant == b and m.fits and m.step_ms_median}
        return sorted(sa & sb)


@dataclass
class FreshRun:
    """One fresh process (the allocator probe's worker, gcdoctor/run/worker.py) measuring batches in the order given."""

    variant: str = ""  # no_gc | gc
    allocator: str = ""  # default | expandable
    alloc_conf: str = ""  # PYTORCH_CUDA_ALLOC_CONF as the process saw it
    batches: list[int] = field(default_factory=list)  # in the order measured
    measurements: list[Measurement] = field(default_factory=list)
    context_bytes: int | None = None  # device memory outside the allocator, read after its steps
    wall_s: float | None = None  # the process, from start to exit
    run_dir: str = ""  # its own run directory, relative to this run's
    error: str | None = None  # why it gave no result, if it gave none


@dataclass
class AllocatorBoundary:
    """The largest batch of one variant under one allocator, as a training job meets it: a fresh
    process whose first step is that batch."""

    variant: str = ""
    allocator: str = ""  # default | expandable
    largest_batch: int | None = None  # measured to fit fresh (None: none measured fits)
    first_oom_batch: int | None = None  # the batch above it measured not to fit (None: not measured)
    first_oom_kind: str | None = None  # fragmentation | mixed | capacity | unknown
    exact: bool = False  # both the fit and the OOM one above it were measured
    tokens_per_s: float | None = None  # at largest_batch
    step_ms: float | None = None
    mfu: float | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    predicted: int | None = None  # the allocator replay's prediction for a fresh process
    in_process: int | None = None  # the sweep's boundary, found after other batches in one process
    # default allocator only: the sweep's boundary does not hold when it is the first batch
    order_moves_boundary: bool | None = None


@dataclass
class AllocatorFacts:
    """The boundary per variant and allocator, measured in fresh processes (probes/allocator.py)."""

    runs: list[FreshRun] = field(default_factory=list)
    boundaries: list[AllocatorBoundary] = field(default_factory=list)
    steps: int = 0  # measured steps per point (after one warm-up)
    # device memory gcdoctor's own process held while its fresh processes ran (its CUDA context and
    # cache): a training job alone on the card has this much more
    parent_device_bytes: int | None = None

    def get(self, variant: str, allocator: str) -> AllocatorBoundary | None:
        for b in self.boundaries:
            if b.variant == variant and b.allocator == allocator:
                return b
        return None

    def reliable_batch(self, variant: str) -> int | None:
        """What a training job can rely on with the default allocator: the largest batch that
        fits when it is the first one the process runs."""
        b = self.get(variant, "default")
        return None if b is None else b.largest_batch


@dataclass
class OptimizerFacts:
    """The optimizer step's peak and what other AdamW implementations make of it, at one batch
    with layer checkpointing (probes/optimizer.py). `measurements[i].variant` is the optimizer:
    "adamw" (foreach, what every other probe measures), "adamw-forloop" (foreach=False),
    "adamw-fused" (fused=True)."""

    batch_size: int = 0
    checkpointing: str = "gc"  # the variant measured
    measurements: list[Measurement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # optimizer -> why it was not measured
    predicted_peak_bytes: dict[str, int] = field(default_factory=dict)  # optimizer -> the memory model's peak

    def get(self, optimizer: str) -> Measurement | None:
        for m in self.measurements:
            if m.variant == optimizer and m.fits:
                return m
        return None
