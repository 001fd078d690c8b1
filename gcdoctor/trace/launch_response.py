"""How a profiled step's time would grow with a costlier launch: the max-plus model of the trace.

The device runs its ops in order; op k starts when the host has launched it and the op before it
has ended. Over one stretch of the step that ends with the host waiting for the device (a
synchronising call), the device finishes at

    max over k of ( h_k + lambda + R_k )

where h_k is when the host finished launching op k (from the stretch's start), lambda the
launch-to-start latency of an idle device and R_k the device time of op k and every op after it
in the stretch. With S extra milliseconds of host time per step spread over the launches (a
share b_k of S before op k), each term becomes the line h_k + lambda + R_k + b_k S, and the
stretch's time is the upper envelope of those lines and of the host's own line (when it reaches
the synchronising call). A step is the sum of its stretches. At S = 0 the envelope is the
device-bound time; as S grows, the lines of late ops (large b_k, small R_k) take over: the host
no longer keeps ahead.

What the host did in the profiled steps is corrected twice before the envelope is taken:
- launch calls that blocked on the device's full launch queue (a launch call much longer than
  the typical one of its name) wait for the device, not for the host: the blocked part is removed;
- the profiler's own cost per recorded host event (measured by the granularity probe from its
  host-bound variants, profiled against unprofiled) is removed, event by event, so the host
  timeline is the unprofiled one.

No torch here. The result is gcdoctor.facts.granularity.HostResponse, one per profiled step.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from gcdoctor.errors import UserError
from gcdoctor.facts.granularity import (WHATIF_HOST, WHATIF_TOTALS, WHATIF_TRACE, GranularityVariant, HostResponse,
                                        LaunchWhatIf, derive_whatif, profiler_cost_per_event)
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.metrics import primary_device
from gcdoctor.trace.load import load_trace
from gcdoctor.trace.tables import HOST_MEM_PAGEABLE, TraceTables

STEP_START = "gcdoctor/forward"
PHASES = ("gcdoctor/forward", "gcdoctor/backward", "gcdoctor/optimizer")
PHASE_NAMES = ("forward", "backward", "optimizer")
# a launch call this much longer than the typical call of its name waited on a full launch queue
# (tens of microseconds is the longest an unblocked launch takes, profiled, on the H200's host)
BLOCKED_EXTRA_NS = 50_000
DEFAULT_LATENCY_NS = 5_000  # launch-call end -> op start on an idle device when none was seen
MAX_LATENCY_NS = 100_000  # ten times the longest idle-device latency in the H200 traces (~10 us)
ROUND_MS, ROUND_B = 5, 6  # digits kept in the facts: 10 ns, one part in a million
# matrix-unit kernels (GEMMs, attention) by name, CUDA and MUSA libraries: their time scales with the
# device's peak FLOP/s; the rest (elementwise, reductions, copies, the optimizer) with its bandwidth
MATMUL_KERNEL = re.compile(r"gemm|nvjet|cutlass|cublas|xmma|wgmma|sdpa|flash|fmha|attention|mublas|mudnn|matmul",
                           re.IGNORECASE)


@dataclass
class StepReading:
    """One profiled step of the trace, read for the launch-cost what-if (times in ms)."""

    step_ms: float  # first forward range -> end of the final synchronising call (profiled)
    host_ms: float  # profiled host time until the final synchronising call
    host_issue_ms: float  # the same, minus blocked launch calls and the profiler's cost
    blocked_ms: float
    profiler_ms: float
    device_busy_ms: float  # sum of the step's device op durations
    launches: int  # launch calls that put an op on the device
    segments: int  # stretches ending in a synchronising call
    latency_us: float
    per_launch: HostResponse
    per_op: HostResponse | None  # weights from the census's op counts per phase, when given
    # the split the step-time prediction of another device scales (gcdoctor/model/steptime.py): device time
    # of the forward+backward's matrix kernels and of the rest, of the optimizer step; launches and
    # host issue time of the forward+backward and of the optimizer step
    matmul_ms: float = 0.0
    other_ms: float = 0.0
    optimizer_device_ms: float = 0.0
    optimizer_launches: int = 0
    optimizer_host_ms: float = 0.0


def _is_sync(name: str) -> bool:
    """Runtime calls after which the host has waited for the device."""
    if "Synchronize" in name:
        return True
    low = name.lower()
    if "async" in low:
        return False
    return "memcpy" in low or low.endswith("free") or "freehost" in low


def _envelope(a: np.ndarray, b: np.ndarray) -> list[list[float]]:
    """Lines a + b*S that are the maximum somewhere on S >= 0 (upper envelope), as [a, b] pairs
    sorted by slope."""
    order = np.lexsort((-a, b))  # by slope, then highest intercept first
    a, b = a[order], b[order]
    keep_a: list[float] = []
    keep_b: list[float] = []
    for ai, bi in zip(a.tolist(), b.tolist()):
        if keep_b and bi == keep_b[-1]:
            continue  # same slope, lower intercept (sorted): never above
        # drop previous lines that ai + bi S dominates on S >= 0
        while keep_b and ai >= keep_a[-1]:
            keep_a.pop()
            keep_b.pop()
        while len(keep_b) >= 2:
            a1, b1, a2, b2 = keep_a[-2], keep_b[-2], keep_a[-1], keep_b[-1]
            # line 2 is useless if line 3 overtakes line 1 no later than line 2 does
            if (ai - a1) * (b2 - b1) >= (a2 - a1) * (bi - b1):
                keep_a.pop()
                keep_b.pop()
            else:
                break
        keep_a.append(ai)
        keep_b.append(bi)
    return [[round(x, ROUND_MS), round(y, ROUND_B)] for x, y in zip(keep_a, keep_b)]


def _phase_of(t: TraceTables, s0: int, s1: int, times: np.ndarray) -> np.ndarray:
    """Index into PHASE_NAMES of the phase range (host) each time lies in, -1 outside all."""
    out = np.full(len(times), -1, dtype=np.int64)
    rng = t.ranges
    names = t.names
    for p, label in enumerate(PHASES):
        ids = [i for i, n in enumerate(names) if n == label]
        if not ids:
            continue
        rows = np.flatnonzero(np.isin(rng.name_id, ids) & ~rng.on_device & (rng.start_ns < s1)
                              & (rng.start_ns + rng.dur_ns > s0))
        for r in rows.tolist():
            a, e = int(rng.start_ns[r]), int(rng.start_ns[r] + rng.dur_ns[r])
            out[(times >= a) & (times < e)] = p
    return out


def read_steps(t: TraceTables, profiler_us_per_event: float = 0.0,
               ops_per_phase: Mapping[str, float] | None = None) -> list[StepReading]:
    """Every gcdoctor training step of the trace (forward range to the synchronising call that ends
    it), read for the launch-cost what-if. Empty when the trace has no device ops or no steps."""
    device = primary_device(t)
    if device is None or not len(t.runtime):
        return []
    names = np.asarray(t.names, dtype=object)
    rng = t.ranges
    fwd_ids = [i for i, n in enumerate(t.names) if n == STEP_START]
    starts = np.sort(rng.start_ns[np.isin(rng.name_id, fwd_ids) & ~rng.on_device])
    if not len(starts):
        return []
    rt = t.runtime
    rt_names = names[rt.name_id]
    sync = np.fromiter((_is_sync(n) for n in rt_names), dtype=bool, count=len(rt))
    ops = t.ops
    on_dev = (ops.device == device) & (ops.launch >= 0)
    pageable_copy = on_dev & (ops.host_mem == HOST_MEM_PAGEABLE)
    # a copy to or from pageable host memory holds the host until the device has done it
    sync[ops.launch[pageable_copy]] = True
    op_rows = np.flatnonzero(on_dev)
    op_launch = ops.launch[op_rows]
    # the host events the profiler's cost is counted per (as TraceMetrics counts them: cpu ops and runtime calls)
    host_times = np.sort(np.concatenate([rt.start_ns, t.cpu_ops.start_ns]))
    out = []
    opt_ids = [i for i, n in enumerate(t.names) if n == PHASES[-1]]
    opt_ends = np.sort((rng.start_ns + rng.dur_ns)[np.isin(rng.name_id, opt_ids) & ~rng.on_device])
    for j, s0 in enumerate(starts.tolist()):
        nxt = int(starts[j + 1]) if j + 1 < len(starts) else iv.POS
        after = opt_ends[(opt_ends > s0) & (opt_ends < nxt)]
        if not len(after):
            continue  # a step cut off by the end of the trace
        final = np.flatnonzero(sync & (rt.start_ns >= after[0]) & (rt.start_ns < nxt))
        if not len(final):
            continue
        fi = int(final[0])
        s1 = int(rt.start_ns[fi] + rt.dur_ns[fi])
        reading = _read_step(t, s0, s1, fi, rt_names, sync, op_rows, op_launch, host_times,
                             profiler_us_per_event, ops_per_phase)
        if reading is not None:
            out.append(reading)
    return out


def _read_step(t: TraceTables, s0: int, s1: int, final: int, rt_names: np.ndarray, sync: np.ndarray,
               op_rows: np.ndarray, op_launch: np.ndarray, host_times: np.ndarray,
               profiler_us_per_event: float, ops_per_phase: Mapping[str, float] | None) -> StepReading | None:
    rt, ops = t.runtime, t.ops
    in_step = (rt.start_ns[op_launch] >= s0) & (rt.start_ns[op_launch] < s1)
    rows, launch = op_rows[in_step], op_launch[in_step]
    if not len(rows):
        return None
    # launch calls of the step's ops, in host order; blocked time of each
    lorder = np.argsort(rt.start_ns[launch], kind="stable")
    rows, launch = rows[lorder], launch[lorder]
    l_start = rt.start_ns[launch].astype(np.float64)
    l_dur = rt.dur_ns[launch].astype(np.float64)
    l_name = rt_names[launch]
    typical = np.empty(len(launch))
    for n in np.unique(l_name):
        m = l_name == n
        typical[m] = np.median(l_dur[m])
    blocked = np.where(~sync[launch] & (l_dur > typical + BLOCKED_EXTRA_NS), l_dur - typical, 0.0)
    cum_blocked = np.cumsum(blocked)  # including the call itself

    def host_clock(t_ns: np.ndarray, upto_blocked: np.ndarray) -> np.ndarray:
        """Unprofiled, unblocked host time at t (ns since the step's start)."""
        events = np.searchsorted(host_times, t_ns, side="left") - np.searchsorted(host_times, s0, side="left")
        return (t_ns - s0) - upto_blocked - profiler_us_per_event * 1e3 * events

    # the device side, in device order
    d_start = ops.start_ns[rows].astype(np.float64)
    d_dur = ops.dur_ns[rows].astype(np.float64)
    # latency of an idle device: ops whose launch call ended after the op before them had ended
    dorder = np.argsort(d_start, kind="stable")
    l_end = (l_start + l_dur)[dorder]
    prev_end = np.concatenate([[-np.inf], np.maximum.accumulate((d_start + d_dur)[dorder])[:-1]])
    idle = l_end >= prev_end
    lat = (d_start[dorder] - l_end)[idle]
    lat = lat[lat >= 0]
    # a latency beyond MAX_LATENCY_NS is a device clock that drifted from the host's (several profiling
    # sessions in one process, docs/references.md section 9), not a launch: capped
    latency = min(float(np.median(lat)) if len(lat) else float(DEFAULT_LATENCY_NS), float(MAX_LATENCY_NS))

    # synchronising calls split the step into stretches
    step_syncs = np.flatnonzero(sync & (rt.start_ns >= s0) & (rt.start_ns <= rt.start_ns[final]))
    sync_starts = rt.start_ns[step_syncs].astype(np.float64)
    sync_ends = (rt.start_ns[step_syncs] + rt.dur_ns[step_syncs]).astype(np.float64)
    seg_of = np.searchsorted(sync_starts, l_start, side="left")  # launches before sync i -> i

    # weights: one per launch, or the census's ops of the launch's phase spread over its launches
    w_launch = np.ones(len(launch))
    w_op = None
    phase = _phase_of(t, s0, s1, l_start.astype(np.int64))
    if ops_per_phase:
        w_op = np.zeros(len(launch))
        for p, name in enumerate(PHASE_NAMES):
            m = phase == p
            if m.any() and ops_per_phase.get(name):
                w_op[m] = float(ops_per_phase[name]) / m.sum()
        if w_op.sum() <= 0:
            w_op = None

    blocked_before_sync = np.array([blocked[l_start < s].sum() for s in sync_starts])
    host_at_sync = host_clock(sync_starts, blocked_before_sync)
    seg_start_host = np.concatenate([[0.0], host_clock(sync_ends[:-1], blocked_before_sync[:-1])]) \
        if len(sync_ends) else np.zeros(1)
    launch_done = host_clock(l_start + l_dur, cum_blocked)

    def response(w: np.ndarray) -> HostResponse:
        total = w.sum()
        cum = np.cumsum(w) / total  # share of the extra host time spent before each launch's end
        segments = []
        for i in range(len(sync_starts)):
            m = seg_of == i
            base = seg_start_host[i]
            share_at_sync = float(cum[seg_of <= i][-1]) if (seg_of <= i).any() else 0.0
            share_at_start = float(cum[seg_of < i][-1]) if (seg_of < i).any() else 0.0
            a = [host_at_sync[i] - base]
            b = [share_at_sync - share_at_start]
            if m.any():
                # ops of this stretch in device order: remaining device time from each op
                idx = np.flatnonzero(m)
                dord = idx[np.argsort(d_start[idx], kind="stable")]
                remaining = np.cumsum(d_dur[dord][::-1])[::-1]
                a += (launch_done[dord] - base + latency + remaining).tolist()
                b += (cum[dord] - share_at_start).tolist()
            segments.append(_envelope(np.asarray(a) / 1e6, np.maximum(np.asarray(b), 0.0)))
        return HostResponse(segments=segments)

    host_ms = (float(rt.start_ns[final]) - s0) / 1e6
    issue_ms = float(host_at_sync[-1]) / 1e6 if len(host_at_sync) else host_ms
    total_blocked = float(blocked[l_start < rt.start_ns[final]].sum()) / 1e6
    opt = phase == PHASE_NAMES.index("optimizer")
    names = np.asarray(t.names, dtype=object)[ops.name_id[rows]]
    mm = np.fromiter((bool(MATMUL_KERNEL.search(n)) for n in names), dtype=bool, count=len(rows)) & ~opt
    first_opt_host = float(launch_done[opt].min() - l_dur[opt][np.argmin(launch_done[opt])]) if opt.any() else None
    return StepReading(
        matmul_ms=float(d_dur[mm].sum()) / 1e6, other_ms=float(d_dur[~mm & ~opt].sum()) / 1e6,
        optimizer_device_ms=float(d_dur[opt].sum()) / 1e6, optimizer_launches=int(opt.sum()),
        optimizer_host_ms=0.0 if first_opt_host is None else max(issue_ms - first_opt_host / 1e6, 0.0),
        step_ms=(s1 - s0) / 1e6, host_ms=host_ms, host_issue_ms=max(issue_ms, 0.0), blocked_ms=total_blocked,
        profiler_ms=max(host_ms - total_blocked - issue_ms, 0.0), device_busy_ms=float(d_dur.sum()) / 1e6,
        launches=len(launch), segments=len(sync_starts), latency_us=latency / 1e3,
        per_launch=response(w_launch), per_op=response(w_op) if w_op is not None else None)


# -- the what-if of a granularity run ----------------------------------------------------------

def variant_whatif(row: GranularityVariant, facts: Any, run_dir: Path | None, per_event_us: float) -> LaunchWhatIf:
    """The launch-cost what-if of one measured variant: from its profiled trace (the max-plus
    response), else from its host and step times (totals), or on the CPU the host itself."""
    ops = sum(row.launch_ops_by_phase.values()) if row.launch_ops_by_phase else None
    wi = LaunchWhatIf(launch_ops_per_step=ops, host_issue_ms=row.host_ms)
    if facts.environment.device_kind == "cpu":
        wi.method, wi.slack_ms = WHATIF_HOST, 0.0
        return wi
    readings: list[StepReading] = []
    tm = facts.trace.get(row.trace_key) if row.trace_key else None
    if tm is not None and tm.source and run_dir is not None and (Path(run_dir) / tm.source).is_file():
        try:
            readings = read_steps(load_trace(Path(run_dir) / tm.source), per_event_us, row.launch_ops_by_phase or None)
        except UserError as exc:
            facts.unavailable[f"granularity.{row.group}.{row.variant}.whatif"] = str(exc)
    if readings:
        n = len(readings)
        wi.method = WHATIF_TRACE
        wi.launches_per_step = sum(r.launches for r in readings) / n
        wi.host_issue_ms = sum(r.host_issue_ms for r in readings) / n
        wi.device_busy_ms = sum(r.device_busy_ms for r in readings) / n
        wi.blocked_ms = sum(r.blocked_ms for r in readings) / n
        wi.profiler_ms = sum(r.profiler_ms for r in readings) / n
        wi.per_launch = [r.per_launch for r in readings]
        for name in ("matmul_ms", "other_ms", "optimizer_device_ms", "optimizer_launches", "optimizer_host_ms"):
            setattr(wi, name, sum(getattr(r, name) for r in readings) / n)
        wi.per_op = [r.per_op for r in readings if r.per_op is not None]
    else:
        wi.method = WHATIF_TOTALS
        wi.launches_per_step = row.kernels_per_step
    if wi.host_issue_ms is not None and row.step_ms is not None:
        wi.slack_ms = max(row.step_ms - wi.host_issue_ms, 0.0)
    return wi


def fill_whatif(facts: Any, run_dir: Path | None) -> None:
    """The what-if of every measured variant of `facts.granularity` (traces read from `run_dir`),
    then the break-even and predicted steps (gcdoctor.facts.granularity.derive_whatif)."""
    g = facts.granularity
    if g is None:
        return
    g.profiler_us_per_event = profiler_cost_per_event(g, facts)
    if g.profiler_us_per_event is None and facts.environment.device_kind != "cpu":
        facts.unavailable["granularity.profiler_us_per_event"] = (
            "no profiled variant was host-bound (device idle at least half the step), so the profiler's own host "
            "cost could not be measured; the what-if keeps it in the host time (it predicts host-bound steps early)")
    for group in g.groups:
        for row in group.variants:
            if row.fits:
                row.whatif = variant_whatif(row, facts, run_dir, g.profiler_us_per_event or 0.0)
    derive_whatif(g)


def fill_missing_whatif(facts: Any, run_dir: Path | None) -> None:
    """For a run recorded before the what-if existed (`gcdoctor analyze RUN_DIR`): the launch-cost
    what-if from its traces and the slower-link what-if from its offload facts, where missing."""
    from gcdoctor.facts.offload import derive_link_whatif
    g = facts.granularity
    if g is not None and g.groups and not any(v.whatif is not None for grp in g.groups for v in grp.variants):
        fill_whatif(facts, run_dir)
    o = facts.offload
    if o is not None and o.variants and not o.whatif_links:
        derive_link_whatif(o, facts.environment.pcie_peak_gbs)
