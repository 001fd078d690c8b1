"""Facts of a distributed diagnose (FSDP2 / DeepSpeed ZeRO-3 over N ranks): who the ranks were,
every rank's numbers of every measurement, the collectives and communication time of every
rank's profiled steps, and the sharding probe's variants. No torch here.

Rank 0's run directory holds these facts for all ranks; `sweep`, `granularity` and the other probe
facts beside them are rank 0's own (every rank measures the same thing; the per-rank rows here
say how far apart they were).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.facts.sweep import Measurement
from gcdoctor.facts.telemetry import SeriesSummary

# where a collective was issued, by the gcdoctor label around it on the host
PHASES = ("forward", "backward", "recompute", "optimizer", "other")
KINDS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "other")


@dataclass
class RankInfo:
    rank: int
    local_rank: int = 0
    host: str = ""
    device: str = ""  # cuda:1, cpu
    device_name: str = ""
    run_dir: str = ""  # relative to rank 0's run directory ("." for rank 0)


@dataclass
class RankMeasurement:
    """One rank's numbers of one measurement (probe, variant, batch), as that rank measured them."""

    probe: str
    variant: str
    batch_size: int
    rank: int
    fits: bool = True
    oom_phase: str | None = None
    step_ms_median: float | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    param_bytes: int | None = None  # this rank's shards
    grad_bytes: int | None = None
    optimizer_state_bytes: int | None = None
    telemetry: dict[str, SeriesSummary] = field(default_factory=dict)
    profiled: bool = False  # the measurement also profiled its variant (a sweep's profile-only point)

    @property
    def model_state_bytes(self) -> int | None:
        parts = (self.param_bytes, self.grad_bytes, self.optimizer_state_bytes)
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]


@dataclass
class CollectiveCount:
    """Calls of one kind of collective per profiled step, by where the host issued them."""

    kind: str
    per_step: float = 0.0
    by_phase: dict[str, float] = field(default_factory=dict)  # PHASES -> calls per step


@dataclass
class CommMetrics:
    """Communication of one rank's profiled steps of one variant (docs/distributed.md)."""

    key: str  # the profile key: "sweep/gc", "sharding/fsdp2/gc"
    rank: int
    source: str = ""  # the trace, relative to rank 0's run directory
    steps: int = 0  # profiled steps the per-step figures divide by
    collectives: dict[str, CollectiveCount] = field(default_factory=dict)  # by KINDS
    # device side (None with `device_unavailable` set on a CPU/gloo trace), microseconds per step
    device_unavailable: str | None = None
    comm_kernel_count: float | None = None  # per step (a mean over the steps)
    comm_busy_us: float | None = None  # union of the communication kernels
    comm_exposed_us: float | None = None  # communication with no compute kernel running beside it
    comm_overlap_compute_us: float | None = None  # comm_busy - comm_exposed
    comm_overlap_recompute_us: float | None = None  # communication while the recompute's kernels ran
    recompute_busy_us: float | None = None  # device time of the recompute's kernels
    busy_us: float | None = None  # all device work
    step_us: float | None = None  # wall time of a profiled step (the host's step label)
    comm_kernel_names: list[str] = field(default_factory=list)  # the most frequent, at most 5
    host_comm_us: float | None = None  # gloo: time of the collectives' own work ranges on the host

    def calls(self, kind: str, phase: str | None = None) -> float:
        c = self.collectives.get(kind)
        if c is None:
            return 0.0
        return c.per_step if phase is None else c.by_phase.get(phase, 0.0)

    @property
    def exposed_share(self) -> float | None:
        """Exposed communication over the step's wall time."""
        if self.comm_exposed_us is None or not self.step_us:
            return None
        return self.comm_exposed_us / self.step_us


@dataclass
class ShardVariant:
    """One variant of the sharding probe (an experiment at the probe batch)."""

    name: str  # "fsdp2/gc", "fsdp2-keep/no_gc", "zero3/gc", ...
    description: str = ""
    strategy: str = "fsdp2"
    reshard_after_forward: bool = True
    checkpoint_impl: str = ""  # transformers | checkpoint_wrapper | deepspeed | "" (no checkpointing)
    gc: bool = False
    applied: str = ""  # what gcdoctor called
    setup_s: float | None = None
    skipped: str | None = None  # why it did not run
    measurement: Measurement | None = None  # rank 0's
    trace_key: str | None = None  # its CommMetrics key

    @property
    def ran(self) -> bool:
        return self.measurement is not None and self.measurement.fits and self.measurement.step_ms_median is not None


@dataclass
class DistributedFacts:
    world_size: int = 1
    backend: str = ""  # nccl | gloo
    launcher: str = ""  # torchrun (gcdoctor diagnose --nproc N starts it) | the user's launcher
    strategy: str = "fsdp2"  # how the sweep shards: fsdp2 | zero3
    reshard_after_forward: bool = True
    checkpoint_impl: str = "transformers"  # the sweep's checkpointing under FSDP2
    applied: dict[str, str] = field(default_factory=dict)  # sweep variant -> what gcdoctor called
    ranks: list[RankInfo] = field(default_factory=list)
    measurements: list[RankMeasurement] = field(default_factory=list)  # every rank, every measurement
    comm: list[CommMetrics] = field(default_factory=list)  # every rank, every profiled variant
    probe_batch: int | None = None
    variants: list[ShardVariant] = field(default_factory=list)  # the sharding probe
    notes: list[str] = field(default_factory=list)

    def rows(self, probe: str, variant: str, batch: int) -> list[RankMeasurement]:
        """One row per rank: its first measurement of (probe, variant, batch) that was not only a
        profiling run, else the first of any."""
        out: dict[int, RankMeasurement] = {}
        for r in sorted((r for r in self.measurements if r.probe == probe and r.variant == variant
                         and r.batch_size == batch), key=lambda r: r.profiled):
            out.setdefault(r.rank, r)
        return [out[k] for k in sorted(out)]

    def comm_of(self, key: str) -> list[CommMetrics]:
        return sorted((c for c in self.comm if c.key == key), key=lambda c: c.rank)

    def variant(self, name: str) -> ShardVariant | None:
        return next((v for v in self.variants if v.name == name), None)
