"""Facts of the granularity probe and of the device launch-cost microbenchmark (issue 5).

No torch here. Every number has its unit in its name; a value that was not measured is None and
the reason is in `Facts.unavailable` under "granularity.<field>" (or "granularity.launch.<field>").
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.facts.sweep import Measurement

# The "best trade-off" only considers variants that save at least this share of the activation
# memory of the variant without checkpointing: a saving smaller than this is within what the
# allocator's rounding and transient buffers move between runs, and buys no batch size.
BEST_MIN_SAVING_PCT = 10.0
# Time added below this is counted as this much when dividing memory saved by time added, so a
# variant that is (nearly) free does not win by dividing by noise; ties then go to the larger saving.
BEST_MIN_TIME_ADDED_PCT = 1.0


@dataclass
class RegionTiming:
    """One tiny region, forward + backward, with and without checkpoint(use_reentrant=False)."""

    name: str = ""  # "linear", "1 block", "4 blocks", "16 blocks"
    forward_ops: int = 0  # aten ops (views excluded) the region runs in its forward
    recomputed_ops: int = 0  # ... and again in the backward (early stop may skip them all)
    reps: int = 0  # repetitions per timing
    plain_us: float | None = None
    checkpoint_us: float | None = None
    extra_us: float | None = None  # checkpoint - plain - recomputed_ops x launch_us


@dataclass
class LaunchCost:
    """What one kernel launch and one checkpointed region cost on this device, measured.

    launch_us: a 1-element in-place add launched `launches` times between two synchronisations,
    synchronised host wall time divided by `launches` (median of `repeats` loops): the rate at
    which the device retires back-to-back tiny kernels, whichever of host or device is slower.
    enqueue_us: the same loop's host time before the final synchronisation: what the host pays
    per launch call. graph_replay_us_per_op: the same op captured `graph_ops` times in one device
    graph and replayed, per op.
    """

    device_kind: str = ""
    launches: int = 0
    repeats: int = 0
    launch_us: float | None = None
    launch_us_all: list[float] = field(default_factory=list)  # one per repeat
    enqueue_us: float | None = None
    graph_api: str | None = None  # e.g. "torch.cuda.CUDAGraph"
    graph_ops: int = 0
    graph_replays: int = 0
    graph_replay_us_per_op: float | None = None
    # Host cost of checkpoint regions, from tiny regions timed with and without checkpoint: a
    # single F.linear and chains of 1, 4 and 16 Linear -> GELU -> Linear blocks. Each region's
    # extra time, minus its recomputed ops x launch_us, is fitted (least squares) as
    # region_fixed_us + region_per_op_us x (ops the region runs in its forward): the per-region
    # Python and autograd bookkeeping grows with the tensors the region saves, i.e. its ops.
    region_reps: int = 0
    region_points: list[RegionTiming] = field(default_factory=list)
    region_fixed_us: float | None = None
    region_per_op_us: float | None = None
    # the single-Linear region on its own (region_points[0]): one tiny region's cost at a glance
    region_plain_us: float | None = None
    region_checkpoint_us: float | None = None
    region_recomputed_ops: int | None = None
    region_host_us: float | None = None
    seconds: float | None = None  # wall time of the whole microbenchmark
    notes: list[str] = field(default_factory=list)

    def region_cost_us(self, forward_ops: float) -> float | None:
        """Host cost of one region that runs `forward_ops` ops in its forward (the fitted line)."""
        if self.region_fixed_us is None or self.region_per_op_us is None:
            return None
        return self.region_fixed_us + self.region_per_op_us * forward_ops


@dataclass
class GranularityVariant:
    """One checkpointing granularity at the group's batch and sequence length."""

    group: str
    variant: str  # none | layer | every-2 | every-4 | selective-mlp | selective-attn | sub-layer | fine | block | linear
    description: str = ""  # what is wrapped in checkpoint regions
    # the coarser variant this one refines (fine and sub-layer refine layer; linear refines block;
    # the others refine none): the comparison the launch-overhead rule makes; None for "none"
    baseline_variant: str | None = None
    measurement: Measurement | None = None
    # counted while the first (warm-up) step ran: checkpoint calls in the forward, the aten ops
    # (views excluded) the regions ran in the forward, and those run again inside recompute
    # contexts during the backward (0 means nothing was recomputed)
    regions_per_step: int | None = None
    checkpointed_ops_per_step: int | None = None
    recomputed_ops_per_step: int | None = None
    step_ms: float | None = None  # median of the measured steps
    peak_allocated_bytes: int | None = None  # whole step, optimizer step included
    peak_phase: str | None = None  # "forward+backward" or "optimizer step": where the step peaked
    # forward+backward peak minus what was allocated before the forward (parameters, optimizer
    # states, inputs; gradients are None then): activations, gradients as they appear, transients.
    # On a small model at a short sequence the gradients set this peak, not the activations.
    activation_peak_bytes: int | None = None
    # allocated after forward+loss minus before the forward: what the forward keeps for the
    # backward. This is what checkpointing changes, so memory saved is measured on it.
    saved_activation_bytes: int | None = None
    time_added_pct: float | None = None  # vs the group's "none" variant
    memory_saved_bytes: int | None = None  # saved_activation_bytes of "none" minus this one's
    memory_saved_pct: float | None = None  # of the saved_activation_bytes of "none"
    peak_saved_bytes: int | None = None  # peak_allocated_bytes of "none" minus this one's (the step peak)
    # from the profiled steps' trace metrics (None on a CPU-only trace: see unavailable)
    trace_key: str | None = None  # key in Facts.trace
    kernels_per_step: float | None = None
    device_idle_share: float | None = None  # idle / device window, over the profiled steps
    host_wait_idle_share: float | None = None  # of the idle time, the part waiting on a launch
    kernel_mean_us: float | None = None
    kernel_median_us: float | None = None
    short_kernel_share: float | None = None  # kernels shorter than their launch call (HTA)
    recompute_share: float | None = None  # device busy time inside recompute ranges / busy time
    cpu_ops_per_step: float | None = None  # host-side op count, the CPU's stand-in for launches

    @property
    def fits(self) -> bool:
        return self.measurement is not None and self.measurement.fits and self.step_ms is not None


@dataclass
class GranularityGroup:
    """Variants of one workload compared at equal settings: the chosen model, or a synthetic stack
    of Linear(h,h) -> GELU -> Linear(h,h) blocks at one hidden size."""

    name: str  # model | synthetic-large | synthetic-small
    description: str = ""
    hidden_size: int = 0
    tokens_per_step: int = 0  # batch x sequence
    batch_size: int = 0
    seq_len: int = 0
    n_layers: int = 0  # decoder layers or synthetic blocks
    dtype: str = ""
    variants: list[GranularityVariant] = field(default_factory=list)

    def get(self, variant: str) -> GranularityVariant | None:
        return next((v for v in self.variants if v.variant == variant), None)

    def best_tradeoff(self, min_saving_pct: float = BEST_MIN_SAVING_PCT,
                      min_time_pct: float = BEST_MIN_TIME_ADDED_PCT) -> GranularityVariant | None:
        """The checkpointing variant with the most activation memory saved per percent of step time
        added, among those saving at least `min_saving_pct` of the activations; time added below
        `min_time_pct` counts as `min_time_pct`. None when no variant qualifies."""
        best, best_key = None, None
        for v in self.variants:
            if v.variant == "none" or not v.fits or v.memory_saved_pct is None or v.time_added_pct is None:
                continue
            if v.memory_saved_pct < min_saving_pct or v.memory_saved_bytes is None:
                continue
            key = (v.memory_saved_bytes / max(v.time_added_pct, min_time_pct), v.memory_saved_bytes)
            if best_key is None or key > best_key:
                best, best_key = v, key
        return best


@dataclass
class GranularityFacts:
    launch: LaunchCost | None = None
    groups: list[GranularityGroup] = field(default_factory=list)
    warmup_steps: int = 0
    measure_steps: int = 0
    checkpoint_api: str = "torch.utils.checkpoint.checkpoint(use_reentrant=False)"
    notes: list[str] = field(default_factory=list)

    def group(self, name: str) -> GranularityGroup | None:
        return next((g for g in self.groups if g.name == name), None)
