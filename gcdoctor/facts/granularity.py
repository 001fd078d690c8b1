"""Facts of the granularity probe and of the device launch-cost microbenchmark.

No torch here. Every number has its unit in its name; a value that was not measured is None and
the reason is in `Facts.unavailable` under "granularity.<field>" (or "granularity.launch.<field>").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gcdoctor.facts.sweep import Measurement

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


@dataclass
class LaunchEmulation:
    """`diagnose --emulate-launch-us N`: the granularity probe ran with N microseconds of extra host
    time per dispatched op, on the real device (probes/launch_cost.py, LaunchDelay).

    One delay is charged to each aten op that reaches the dispatcher's Python key (a
    TorchDispatchMode, the one hook every backend has) and is not a view or an allocation, with a
    tensor on the device: the host work a launch costs. A busy-wait of spin_us follows the mode's own
    cost, calibrated so that the launch microbenchmark (one op, one kernel) reads native + N.
    """

    target_us: float = 0.0  # N, extra host time per dispatched op asked for
    unit: str = "dispatched op"
    mode_cost_us: float | None = None  # the dispatch mode's own cost per delayed op (spin 0)
    passthrough_cost_us: float | None = None  # its cost per op let through undelayed (a view)
    spin_us: float | None = None  # busy-wait per delayed op
    native: LaunchCost | None = None  # the microbenchmarks before the emulation was turned on
    readback_extra_us: float | None = None  # launch.launch_us - native.launch_us, measured
    notes: list[str] = field(default_factory=list)


@dataclass
class HostResponse:
    """One profiled step's time as a function of S, extra host milliseconds per step spread over its
    launches (gcdoctor.trace.launch_response): the sum over the step's stretches (each ends where the
    host waits for the device) of the upper envelope of the lines a_ms + b * S."""

    segments: list[list[list[float]]] = field(default_factory=list)  # per stretch, [a_ms, b] lines

    def step_ms(self, extra_ms: float) -> float:
        return sum(max(a + b * extra_ms for a, b in seg) for seg in self.segments if seg)

    def added_ms(self, extra_ms: float) -> float:
        return self.step_ms(extra_ms) - self.step_ms(0.0)


WHATIF_TRACE = "trace"  # the max-plus model of the profiled steps
WHATIF_TOTALS = "totals"  # no trace: step = max(measured step, host time + extra)
WHATIF_HOST = "host"  # the CPU: the host is the device, every extra microsecond adds


@dataclass
class LaunchWhatIf:
    """What this variant's step would take if each launch cost more host time (docs/granularity.md,
    "What-if"). Predicted step = measured step + the response's added time at S, where S is the
    extra host time per step: launches x extra per launch (a costlier device), or delayed ops x extra
    per op (the emulation)."""

    method: str = ""  # trace | totals | host
    launches_per_step: float | None = None  # launch calls that put an op on the device (trace)
    launch_ops_per_step: int | None = None  # ops one emulated delay is charged to (census)
    host_issue_ms: float | None = None  # host time to issue the step, unprofiled, never waiting
    device_busy_ms: float | None = None  # device op time per step (trace)
    blocked_ms: float | None = None  # launch calls blocked on a full launch queue, removed
    profiler_ms: float | None = None  # the profiler's own host cost, removed
    # measured step - host issue time: the host time per step the device's backlog absorbs
    slack_ms: float | None = None
    per_launch: list[HostResponse] = field(default_factory=list)  # one per profiled step
    per_op: list[HostResponse] = field(default_factory=list)  # weights from the census's ops per phase
    # what the step-time prediction of another card scales (gcdoctor/model/steptime.py), per step:
    # device time of the forward+backward's matrix kernels (GEMMs, attention)
    matmul_ms: float | None = None
    other_ms: float | None = None  # device time of the forward+backward's other kernels and copies
    optimizer_device_ms: float | None = None  # device time of the optimizer step
    optimizer_launches: float | None = None  # launches of the optimizer step (the rest: forward+backward)
    optimizer_host_ms: float | None = None  # host issue time of the optimizer step (the rest: forward+backward)

    def added_ms(self, extra_ms: float, per: str = "launch") -> float | None:
        """Step time added by `extra_ms` of host time per step (charged per launch or per op)."""
        if extra_ms <= 0:
            return 0.0
        if self.method == WHATIF_HOST:
            return extra_ms
        if self.method == WHATIF_TOTALS:
            return None if self.slack_ms is None else max(extra_ms - self.slack_ms, 0.0)
        responses = (self.per_op or self.per_launch) if per == "op" else self.per_launch
        if not responses:
            return None
        return sum(r.added_ms(extra_ms) for r in responses) / len(responses)


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
    # host time from the step's start until it waits for the device at the end (unprofiled median)
    host_ms: float | None = None
    # census: ops an emulated launch delay is charged to, by phase (forward, backward, optimizer)
    launch_ops_by_phase: dict[str, int] = field(default_factory=dict)
    passthrough_ops_per_step: int | None = None  # census: ops the delay lets through (views, allocations)
    whatif: LaunchWhatIf | None = None
    # the launch cost (us per launch, absolute) from which the host can no longer keep ahead of the
    # device: host issue time + launches x extra = the measured step
    break_even_launch_us: float | None = None
    # predicted step at each of GranularityFacts.whatif_launch_us
    predicted_step_ms: list[float | None] = field(default_factory=list)
    # time added over the group's "none" at the same launch cost: the checkpointing overhead there
    predicted_overhead_pct: list[float | None] = field(default_factory=list)

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


@dataclass
class GranularityFacts:
    launch: LaunchCost | None = None
    groups: list[GranularityGroup] = field(default_factory=list)
    warmup_steps: int = 0
    measure_steps: int = 0
    checkpoint_api: str = "torch.utils.checkpoint.checkpoint(use_reentrant=False)"
    emulation: LaunchEmulation | None = None  # --emulate-launch-us
    # the profiler's host cost per recorded event (cpu op or runtime call), from the host-bound
    # variants profiled vs unprofiled; removed from the traces before the what-if
    profiler_us_per_event: float | None = None
    # launch costs (us per launch) the what-if table is evaluated at
    whatif_launch_us: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def group(self, name: str) -> GranularityGroup | None:
        return next((g for g in self.groups if g.name == name), None)


# -- the launch-cost what-if (docs/granularity.md, "What-if") -----------------------------------

# launch costs (us per launch) the what-if table is evaluated at, besides the device's own
DEFAULT_WHATIF_LAUNCH_US = (20.0, 50.0, 100.0)
# a variant is host-bound enough to show the profiler's own cost when its device idles this much
# of the step: then profiled minus unprofiled step time is the profiler's host time on the path
PROFILER_CALIBRATION_MIN_IDLE = 0.5
PROFILED_STEPS = 2


def profiler_cost_per_event(g: GranularityFacts, facts: Any) -> float | None:
    """The profiler's host cost per recorded event (cpu op or runtime call), microseconds: the median,
    over the variants whose device idled at least half the step (their step time is host time), of
    (profiled - unprofiled step) / events per profiled step. None when no variant was host-bound."""
    profiled = {p.variant: p for p in getattr(facts, "profiler_overhead", [])}
    costs = []
    for group in g.groups:
        for v in group.variants:
            if v.device_idle_share is None or v.device_idle_share < PROFILER_CALIBRATION_MIN_IDLE or not v.trace_key:
                continue
            p, tm = profiled.get(v.trace_key), facts.trace.get(v.trace_key)
            if p is None or tm is None or p.profiled_step_ms is None or p.unprofiled_step_ms is None:
                continue
            events = ((tm.cpu_op_count or 0) + (tm.runtime_call_count or 0)) / PROFILED_STEPS
            if events > 0:
                costs.append(max(p.profiled_step_ms - p.unprofiled_step_ms, 0.0) * 1e3 / events)
    if not costs:
        return None
    costs.sort()
    mid = len(costs) // 2
    return costs[mid] if len(costs) % 2 else (costs[mid - 1] + costs[mid]) / 2


def base_launch_us(g: GranularityFacts) -> float | None:
    """The launch cost the variants ran at: the device's, or the device's plus the emulated delay."""
    return g.launch.launch_us if g.launch is not None else None


def predict_step_ms(v: GranularityVariant, launch_us: float, base_us: float | None) -> float | None:
    """The variant's step time on a device whose launches cost `launch_us` (us per launch) instead
    of the `base_us` it ran at; None where the what-if has no model."""
    wi = v.whatif
    if wi is None or v.step_ms is None or base_us is None:
        return None
    extra = launch_us - base_us
    if extra <= 0:
        return v.step_ms
    if wi.launches_per_step is None and wi.method != WHATIF_HOST:
        return None
    launches = wi.launches_per_step if wi.launches_per_step is not None else float(wi.launch_ops_per_step or 0)
    added = wi.added_ms(launches * extra / 1e3, per="launch")
    return None if added is None else v.step_ms + added


def emulated_extra_ms(v: GranularityVariant, emu: LaunchEmulation) -> float | None:
    """Extra host time per step of a run under `emu`: each delayed op costs the emulated extra read
    back by the microbenchmark, each op let through the dispatch mode's own cost."""
    extra_us = emu.readback_extra_us if emu.readback_extra_us is not None else emu.target_us
    ops = sum(v.launch_ops_by_phase.values()) if v.launch_ops_by_phase else None
    if ops is None:
        return None
    passed = (v.passthrough_ops_per_step or 0) * (emu.passthrough_cost_us or 0.0)
    return (ops * extra_us + passed) / 1e3


def predict_emulated_step_ms(native: GranularityVariant, emu: LaunchEmulation) -> float | None:
    """The step time the native run's facts predict for the same variant under `emu` (per-op weights
    from the census, the max-plus response of the native trace)."""
    wi = native.whatif
    extra = emulated_extra_ms(native, emu)
    if wi is None or native.step_ms is None or extra is None:
        return None
    added = wi.added_ms(extra, per="op")
    return None if added is None else native.step_ms + added


def derive_whatif(g: GranularityFacts, launch_us: tuple[float, ...] | list[float] = DEFAULT_WHATIF_LAUNCH_US) -> None:
    """Break-even launch cost, predicted step and checkpointing overhead at `launch_us` of every variant."""
    base = base_launch_us(g)
    g.whatif_launch_us = [float(x) for x in launch_us]
    for group in g.groups:
        none = group.get("none")
        none_pred = [predict_step_ms(none, x, base) if none is not None and none.fits else None
                     for x in g.whatif_launch_us]
        for v in group.variants:
            wi = v.whatif
            if wi is None or not v.fits:
                continue
            if base is not None and wi.slack_ms is not None:
                launches = wi.launches_per_step
                if wi.method == WHATIF_HOST or wi.slack_ms == 0:
                    v.break_even_launch_us = base
                elif launches:
                    v.break_even_launch_us = base + 1e3 * wi.slack_ms / launches
            v.predicted_step_ms = [predict_step_ms(v, x, base) for x in g.whatif_launch_us]
            v.predicted_overhead_pct = [
                100.0 * (p / n - 1.0) if p is not None and n else None for p, n in zip(v.predicted_step_ms, none_pred)]


@dataclass
class EmulationCheck:
    """One variant of an emulated run against what the native run's facts predict for it."""

    group: str
    variant: str
    target_us: float  # --emulate-launch-us
    readback_extra_us: float | None  # what the microbenchmark read back over native
    launch_ops_per_step: int | None  # native census
    emulated_launch_ops_per_step: int | None  # the emulated run's census (the same program: equal)
    native_step_ms: float | None
    predicted_step_ms: float | None
    measured_step_ms: float | None
    method: str = ""  # the native variant's what-if method

    @property
    def error_pct(self) -> float | None:
        if self.predicted_step_ms is None or not self.measured_step_ms:
            return None
        return 100.0 * (self.predicted_step_ms / self.measured_step_ms - 1.0)


def emulation_check(native: GranularityFacts, emulated: GranularityFacts) -> list[EmulationCheck]:
    """Predicted (from `native`) against measured (in `emulated`) step time, variant by variant."""
    emu = emulated.emulation
    if emu is None:
        raise ValueError("the second run has no emulated launch cost (--emulate-launch-us)")
    out = []
    for group in emulated.groups:
        ngroup = native.group(group.name)
        for v in group.variants:
            n = ngroup.get(v.variant) if ngroup is not None else None
            out.append(EmulationCheck(
                group=group.name, variant=v.variant, target_us=emu.target_us, readback_extra_us=emu.readback_extra_us,
                launch_ops_per_step=sum(n.launch_ops_by_phase.values()) if n is not None and n.launch_ops_by_phase else None,
                emulated_launch_ops_per_step=sum(v.launch_ops_by_phase.values()) if v.launch_ops_by_phase else None,
                native_step_ms=n.step_ms if n is not None else None,
                predicted_step_ms=predict_emulated_step_ms(n, emu) if n is not None else None,
                measured_step_ms=v.step_ms if v.fits else None,
                method=n.whatif.method if n is not None and n.whatif is not None else ""))
    return out
