"""Metrics computed from a profiler trace (filled in by gcdoctor.trace).

Every metric's exact definition is in docs/trace-metrics.md. Times are microseconds computed from
nanosecond-exact timestamps; shares are fractions in [0, 1]. A device metric that could not be
measured is None and `device_unavailable` says why (e.g. a CPU-only trace).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CopyStats:
    """Memory copies of one direction (or memsets) that start inside a window."""

    count: int = 0
    time_us: float = 0.0  # sum of the copies' durations
    bytes: int = 0
    bandwidth_gbs: float | None = None  # bytes / time_us, 1 GB = 1e9 bytes; None when time is 0
    pageable_count: int = 0  # host side in pageable memory (the name says "Pageable")
    pageable_bytes: int = 0
    pageable_time_us: float = 0.0
    pinned_count: int = 0  # host side in page-locked memory (the name says "Pinned")
    pinned_bytes: int = 0
    pinned_time_us: float = 0.0
    overlap_us: float = 0.0  # copy time during which a kernel ran on any stream of the device


@dataclass
class StreamMetrics:
    """Busy and idle time of one device stream inside a window."""

    device: int = 0
    stream: int = 0
    op_count: int = 0  # kernels + memcpy + memset starting inside the window
    kernel_count: int = 0
    busy_us: float = 0.0
    idle_us: float = 0.0  # window time minus busy time on this stream
    idle_host_wait_us: float = 0.0
    idle_short_gap_us: float = 0.0
    idle_other_us: float = 0.0


# HostIdle causes, in the order a report lists them
IDLE_CAUSES = ("sync", "setup", "dispatch", "data", "python", "unrecorded", "queued")


@dataclass
class HostIdle:
    """Device idle time of a window split by what the host was doing during each gap
    (docs/trace-metrics.md, "Host-side causes of device idle"). The window is host time (the step
    ranges), not the first-to-last device op. Every idle nanosecond is in exactly one cause."""

    window_us: float = 0.0  # host time of the window
    busy_us: float = 0.0  # device busy inside it (any op, any stream of the device)
    idle_us: float = 0.0  # window_us - busy_us = the sum of the causes below
    sync_us: float = 0.0  # drained by a synchronising call (.item(), .cpu(), synchronize, event waits)
    setup_us: float = 0.0  # host inside allocator / module-loading / initialisation calls
    dispatch_us: float = 0.0  # host inside ops or launch calls: dispatching work (launch-bound)
    data_us: float = 0.0  # host inside a DataLoader range (`enumerate(DataLoader)#...`)
    python_us: float = 0.0  # host outside any recorded op (Python, data loading without its range)
    unrecorded_us: float = 0.0  # the launching thread has no host events in the trace: unknown
    queued_us: float = 0.0  # next op already issued when the device went idle: a device-side wait
    gap_count: int = 0  # idle gaps inside the window
    host_gap_count: int = 0  # of which the host had not yet issued the next op
    host_gap_median_us: float | None = None  # median length of those
    short_host_gap_count: int = 0  # of which shorter than the short-gap threshold
    sync_count: int = 0  # gaps that a synchronising call drained
    sync_calls: dict[str, float] = field(default_factory=dict)  # runtime call -> us of sync idle
    sync_ops: dict[str, float] = field(default_factory=dict)  # outermost cpu op around the call -> us
    setup_calls: dict[str, float] = field(default_factory=dict)  # allocator/setup call -> us of its idle
    steps: int = 0  # profiler steps the window aggregates (0: not step-based)
    # evidence the verdicts need (docs/trace-metrics.md, "Evidence floors")
    op_count: int = 0  # device ops (kernels, copies, memsets) starting inside the window
    kernel_count: int = 0  # of which kernels
    joined_op_count: int = 0  # of which joined to their launch call (correlation)
    launch_call_count: int = 0  # launch-type runtime calls starting inside the window
    unmatched_launch_count: int = 0  # of which no device op in the trace carries the correlation
    graph_launch_count: int = 0  # cudaGraphLaunch / hipGraphLaunch calls inside the window (graph replay)
    # the largest piece of idle the host caused: a one-off (first allocation, first launch,
    # autotuning) when it holds most of the host-caused idle
    largest_gap_us: float = 0.0
    largest_gap_cause: str = ""  # the cause holding most of that gap
    largest_gap_what: str = ""  # the op or runtime call the host was in at the gap's largest part
    after_sync_us: float = 0.0  # host-caused idle (not sync) in gaps a synchronisation had drained
    sync_call_us: float = 0.0  # host time inside synchronising calls (union) inside the window
    # what the synchronisations cost: sync_us plus the host work after them that the device's
    # own work would have hidden had the host run ahead (at most busy_us - (window - sync_call_us))
    sync_exposed_us: float = 0.0
    queued_ops: dict[str, float] = field(default_factory=dict)  # op closing a queued gap -> us
    queued_streams: int = 0  # streams the device ran ops on inside the window
    comm_us: float = 0.0  # collective (NCCL/RCCL) kernel time inside the window (union)
    comm_exposed_us: float = 0.0  # of which no other op of the device ran beside it
    too_little: str = ""  # why the window cannot carry a host verdict ("" when it can)

    def share(self, cause: str) -> float | None:
        """A cause's idle time over the window."""
        return getattr(self, f"{cause}_us") / self.window_us if self.window_us else None

    @property
    def host_us(self) -> float:
        """Idle the host caused (every cause but queued and unrecorded)."""
        return self.sync_us + self.setup_us + self.dispatch_us + self.data_us + self.python_us


@dataclass
class TraceMetrics:
    """Host- and device-side metrics of one trace window (the whole trace, a profiler step, or
    all ranges of one label such as `gcdoctor/recompute/*`)."""

    source: str = ""  # trace file (relative to the run directory when inside one)
    window: str = "all"  # "all", "step:<n>", or a label name ("forward", "recompute", ...)
    device_kind: str | None = None  # cuda | musa | ... | None (CPU-only trace)
    wall_us: float | None = None  # host time covered by the window (union of its CPU ranges)
    window_source: str = ""  # how the window was located (docs/trace-metrics.md, "Windows")
    range_count: int = 0  # CPU ranges (steps, labelled ranges) merged into this window

    # host side
    cpu_op_count: int | None = None  # cpu_op events starting inside the window
    cpu_busy_us: float | None = None  # per thread, time inside some cpu_op; summed over threads
    runtime_call_count: int | None = None  # *_runtime and *_driver calls starting inside the window
    runtime_call_us: float | None = None
    sync_call_us: float | None = None  # runtime calls whose name contains "Synchronize"

    # device side
    device_unavailable: str | None = None  # why the device metrics below are None
    device: int | None = None  # device index (trace pid) the metrics describe
    device_window_us: float | None = None  # device time span(s) of the window
    busy_us: float | None = None  # union of kernel/memcpy/memset intervals, all streams
    idle_us: float | None = None  # device_window_us - busy_us
    busy_share: float | None = None
    idle_host_wait_us: float | None = None  # launch of the next op issued after the device went idle
    idle_short_gap_us: float | None = None  # other gaps shorter than short_gap_threshold_us
    idle_other_us: float | None = None
    short_gap_threshold_us: float = 30.0  # HTA's consecutive_kernel_delay default
    kernel_count: int | None = None
    kernel_time_us: float | None = None  # sum of kernel durations (overlaps counted twice)
    kernel_mean_us: float | None = None
    kernel_median_us: float | None = None
    kernel_p10_us: float | None = None
    kernel_p90_us: float | None = None
    launched_kernel_count: int | None = None  # kernels joined to their launch call by correlation
    short_kernel_share: float | None = None  # of joined kernels, those shorter than their launch call
    launch_latency_median_us: float | None = None  # launch call end -> kernel start
    launch_latency_p90_us: float | None = None
    memcpy: dict[str, CopyStats] = field(default_factory=dict)  # by direction: HtoD, DtoH, DtoD, PtoP, ...
    memset: CopyStats | None = None
    copy_time_us: float | None = None  # all memcpy time
    copy_overlap_us: float | None = None  # memcpy time overlapped by kernels on any stream
    copy_overlap_share: float | None = None
    recompute_busy_us: float | None = None  # busy time inside recompute ranges and this window
    recompute_share: float | None = None  # recompute_busy_us / busy_us
    streams: list[StreamMetrics] = field(default_factory=list)
    host_idle: HostIdle | None = None  # device idle over the window's host time, by host cause
    # step windows: "steady" or "warm-up"; the trace window ("all"): which steps are which
    step_phase: str | None = None  # a step window: "warm-up", "steady" or "empty" (no device work: left out)
    steady_steps: list[int] = field(default_factory=list)
    warmup_steps: list[int] = field(default_factory=list)
    setup_only: bool | None = None  # the trace holds one-time setup and no steady-state step
    setup_reason: str = ""
    notes: list[str] = field(default_factory=list)
    # events of the trace left out as impossible or unplaceable (no ts, ts 0 among real timestamps,
    # a duration of days...): their count, and the count by reason; every window of one trace says it
    dropped_events: int = 0
    dropped: dict[str, int] = field(default_factory=dict)


@dataclass
class RankRow:
    """One rank of a folder of per-rank traces, over its steady-state steps."""

    rank: int = 0
    source: str = ""  # trace file name
    steps: int = 0  # steady steps judged
    step_ms: float | None = None  # median steady step (ProfilerStep range)
    idle_share: float | None = None  # device idle over the steady window
    host_idle_share: float | None = None  # of which the host caused (sync, setup, dispatch, data, python)
    comm_ms: float | None = None  # device time per step in collective kernels (nccl, all_reduce, ...)
    own_ms: float | None = None  # per step: device busy minus collectives, plus host-caused idle
    note: str = ""  # why the rank has no numbers


@dataclass
class RankSummary:
    """Across the ranks of `gcdoctor analyze DIR`: who is slow, and how far apart the ranks are."""

    ranks: list[RankRow] = field(default_factory=list)
    step_ms_median: float | None = None
    step_ms_spread_pct: float | None = None  # (max - min) / median of the ranks' step times
    idle_share_spread: float | None = None  # max - min of the ranks' idle shares
    straggler_rank: int | None = None  # the rank with the most own work per step (the others wait for it)
    straggler_own_ms: float | None = None
    own_ms_median: float | None = None
    note: str = ""


# -- addressing windows --------------------------------------------------------------------------

STEP_PREFIX = "step:"
STEADY_WINDOW, WARMUP_WINDOW = "steady", "warm-up"


@dataclass(frozen=True)
class TraceKey:
    """The address of one trace window in `Facts.trace`: the run that made the trace ("<probe>/
    <variant>" of a diagnose or watch run; None for a bare trace) and the window ("all", "steady",
    "warm-up", "step:<n>", or a label: "forward", "recompute", "recompute/*").

    facts.json keeps the string form (`str(key)`): "sweep/gc", "sweep/gc|step:3", "all", "step:3"."""

    run: str | None = None
    window: str = "all"

    @classmethod
    def parse(cls, key: str) -> "TraceKey":
        run, sep, window = key.partition("|")
        if sep:
            return cls(run, window or "all")
        if "/" in key and not key.endswith("/*"):
            return cls(key, "all")
        return cls(None, key)

    def __str__(self) -> str:
        if self.run is None:
            return self.window
        return self.run if self.window == "all" else f"{self.run}|{self.window}"

    @property
    def probe(self) -> str:
        """'offload' of 'offload/gc|forward'; 'trace' for a bare trace."""
        return self.run.split("/", 1)[0] if self.run else "trace"

    @property
    def step(self) -> int | None:
        if self.window.startswith(STEP_PREFIX):
            try:
                return int(self.window[len(STEP_PREFIX):])
            except ValueError:
                return None
        return None

    def at(self, window: str) -> "TraceKey":
        """The same run's window `window`."""
        return TraceKey(self.run, window)


def trace_runs(trace: dict[str, TraceMetrics]) -> list[TraceKey]:
    """The whole-trace key of every trace in the facts: one per profiled run variant, or the bare
    trace's "all"."""
    return [k for k in map(TraceKey.parse, trace) if k.window == "all"]


def trace_window(trace: dict[str, TraceMetrics], run: TraceKey, window: str) -> TraceMetrics | None:
    return trace.get(str(run.at(window)))


def step_count(trace: dict[str, TraceMetrics], run: TraceKey) -> int | None:
    """Profiler steps of a run's trace (None: no step windows)."""
    n = sum(1 for k in map(TraceKey.parse, trace) if k.run == run.run and k.step is not None)
    return n or None


@dataclass
class JudgedWindow:
    """What the host rules judge for one trace: its steady-state window ("steady" where the trace has
    profiler steps, else the whole trace), or why there is nothing to judge."""

    run: TraceKey
    key: TraceKey | None  # the window judged; None: nothing to judge (see why)
    metrics: TraceMetrics | None
    steps: int | None  # steady steps aggregated (None: the trace has no step markers)
    why: str = ""  # why nothing is judged, or what was left out (warm-up)

    @property
    def idle(self) -> HostIdle | None:
        return None if self.metrics is None else self.metrics.host_idle


def judged_window(trace: dict[str, TraceMetrics], run: TraceKey) -> JudgedWindow:
    """The one definition, shared by every host rule, of which window of a trace is steady state."""
    whole = trace.get(str(run))
    if whole is None:
        return JudgedWindow(run, None, None, None, "no trace metrics")
    if whole.device_unavailable:
        return JudgedWindow(run, None, None, None, whole.device_unavailable)
    if whole.setup_only:
        return JudgedWindow(run, None, None, None, f"the trace holds only one-time setup: {whole.setup_reason}")
    steady = trace_window(trace, run, STEADY_WINDOW)
    if steady is not None and steady.host_idle is not None:
        jw = JudgedWindow(run, run.at(STEADY_WINDOW), steady, steady.host_idle.steps or None, whole.setup_reason)
    elif step_count(trace, run):  # steps, but none steady (facts from before steady windows existed)
        jw = JudgedWindow(run, run, whole, step_count(trace, run), "")
    elif whole.host_idle is None:
        return JudgedWindow(run, None, None, None, "no host-side idle split in the trace metrics")
    else:
        jw = JudgedWindow(run, run, whole, None, "")
    h = jw.idle
    if h is not None and h.too_little:
        return JudgedWindow(run, None, None, jw.steps, f"{TOO_LITTLE}: {h.too_little}")
    return jw


TOO_LITTLE = "too little device work to judge"
