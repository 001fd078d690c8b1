"""Metrics of trace windows: device busy/idle and its causes, kernels and launches, copies,
recompute share, host time. Exact definitions: docs/trace-metrics.md.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gcdoctor.facts.trace import CopyStats, StreamMetrics, TraceMetrics
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.tables import (
    COPY_DIRECTIONS, HOST_MEM_PAGEABLE, HOST_MEM_PINNED, KERNEL, MEMCPY, MEMSET, TraceTables,
)
from gcdoctor.trace.hostidle import HostIdleAnalyzer, classify_steps
from gcdoctor.trace.windows import STEADY, WARMUP, Window, WindowFinder, find_windows

SHORT_GAP_US = 30.0  # HTA's consecutive_kernel_delay default (docs/references.md section 5)
CPU_ONLY = "the trace has no device events (a CPU-only profile)"
RANGE_PROFILER_ONLY = ("the trace holds CUPTI range-profiler ranges (cuda_profiler_range) but no per-kernel "
                       "timing: it was recorded with the range profiler, which measures counters over ranges, not "
                       "kernels; record with ProfilerActivity.CUDA for kernel timing")
# a trace without step markers is called setup when this share of its device window idles in setup
# calls: one-time setup then dominates and nothing separates a steady state from it (the H200 setup
# recording: 20%; steady training steps: 0-6%, samples/traces/h200-host)
SETUP_ONLY_SHARE = 0.15


def device_unavailable_reason(t: TraceTables) -> str:
    """Why a trace without device ops has no device metrics, in its own terms."""
    if t.profiler_ranges:
        return RANGE_PROFILER_ONLY
    if len(t.runtime):
        return ("the trace has runtime calls but no device events (kernel, memcpy, memset): the device "
                "activities were not recorded")
    return CPU_ONLY


def _us(ns: float | int | None) -> float | None:
    return None if ns is None else float(ns) / 1000.0


def _pct_us(values_ns: np.ndarray, q: float) -> float:
    """Percentile (numpy's default linear interpolation), rounded to the nanosecond, in us."""
    return round(float(np.percentile(values_ns, q))) / 1000.0


def primary_device(t: TraceTables) -> int | None:
    """The device (trace pid) with the most op time; the metrics describe that one."""
    if not len(t.ops):
        return None
    devs, inv = np.unique(t.ops.device, return_inverse=True)
    return int(devs[np.argmax(np.bincount(inv, weights=t.ops.dur_ns))])


class _DeviceView:
    """The ops of one device, with the covers every window reuses."""

    def __init__(self, t: TraceTables, device: int, short_ns: int):
        ops = t.ops
        self.mask = ops.device == device
        m = self.mask
        one = bool(m.all())  # one device (the usual trace): the columns themselves, no copies

        def pick(col: np.ndarray) -> np.ndarray:
            return col if one else col[m]

        self.kind = pick(ops.kind)
        self.s = pick(ops.start_ns)
        self.d = pick(ops.dur_ns)
        self.e = self.s + self.d
        self.stream = pick(ops.stream)
        self.nbytes = pick(ops.nbytes)
        self.copy_dir = pick(ops.copy_dir)
        self.host_mem = pick(ops.host_mem)
        launch = pick(ops.launch)
        self.joined = launch >= 0
        rt = t.runtime
        self.l_start = np.full(len(launch), iv.NEG, dtype=np.int64)
        self.l_dur = np.zeros(len(launch), dtype=np.int64)
        if len(rt):
            self.l_start[self.joined] = rt.start_ns[launch[self.joined]]
            self.l_dur[self.joined] = rt.dur_ns[launch[self.joined]]
        l_tid = np.full(len(launch), -1, dtype=np.int64)
        if len(rt):
            l_tid[self.joined] = rt.tid[launch[self.joined]]
        self.all = iv.Cover(self.s, self.e, self.l_start, short_ns, tags=l_tid)
        k = self.kind == KERNEL
        self.kernels = iv.Cover(self.s[k], self.e[k], self.l_start[k], short_ns)
        self.streams = {}
        for st in np.unique(self.stream).tolist():
            sm = self.stream == st
            self.streams[st] = iv.Cover(self.s[sm], self.e[sm], self.l_start[sm], short_ns)


def _copy_stats(v: _DeviceView, sel: np.ndarray) -> CopyStats:
    """Stats of the ops at indices `sel`."""
    d = v.d[sel]
    b = np.maximum(v.nbytes[sel], 0)
    hm = v.host_mem[sel]
    time_ns = int(d.sum())
    nbytes = int(b.sum())
    pg, pn = hm == HOST_MEM_PAGEABLE, hm == HOST_MEM_PINNED
    return CopyStats(
        count=len(sel), time_us=time_ns / 1000.0, bytes=nbytes,
        bandwidth_gbs=nbytes / time_ns if time_ns > 0 else None,  # bytes/ns = GB/s
        pageable_count=int(pg.sum()), pageable_bytes=int(b[pg].sum()), pageable_time_us=int(d[pg].sum()) / 1000.0,
        pinned_count=int(pn.sum()), pinned_bytes=int(b[pn].sum()), pinned_time_us=int(d[pn].sum()) / 1000.0,
        overlap_us=int(v.kernels.overlap_each(v.s[sel], v.e[sel]).sum()) / 1000.0)


def _device_metrics(m: TraceMetrics, v: _DeviceView, w: Window, recompute: Window | None) -> None:
    if not len(w.dev0):
        m.device_unavailable = "no device work was launched inside this window"
        return
    split = v.all.split(w.dev0, w.dev1)
    m.device_window_us = _us(split.window_ns)
    m.busy_us = _us(split.busy_ns)
    m.idle_us = _us(split.idle_ns)
    m.busy_share = split.busy_ns / split.window_ns if split.window_ns else None
    m.idle_host_wait_us = _us(split.host_wait_ns)
    m.idle_short_gap_us = _us(split.short_gap_ns)
    m.idle_other_us = _us(split.other_ns)

    within = iv.index_inside(v.s, w.dev0, w.dev1)  # ops starting inside the window
    kind = v.kind[within]
    k = within[kind == KERNEL]
    kd = v.d[k]
    m.kernel_count = len(k)
    m.kernel_time_us = _us(int(kd.sum()))
    if len(kd):
        m.kernel_mean_us = round(float(kd.mean())) / 1000.0
        m.kernel_median_us = _pct_us(kd, 50)
        m.kernel_p10_us = _pct_us(kd, 10)
        m.kernel_p90_us = _pct_us(kd, 90)
    kj = k[v.joined[k]]
    m.launched_kernel_count = len(kj)
    if len(kj):
        m.short_kernel_share = float((v.d[kj] < v.l_dur[kj]).mean())
        latency = v.s[kj] - (v.l_start[kj] + v.l_dur[kj])
        m.launch_latency_median_us = _pct_us(latency, 50)
        m.launch_latency_p90_us = _pct_us(latency, 90)

    cp = within[kind == MEMCPY]
    cdir = v.copy_dir[cp]
    for i, direction in enumerate(COPY_DIRECTIONS):
        sel = cp[cdir == i]
        if len(sel):
            m.memcpy[direction] = _copy_stats(v, sel)
    ms = within[kind == MEMSET]
    if len(ms):
        m.memset = _copy_stats(v, ms)
    copy_ns = int(v.d[cp].sum())
    overlap_ns = int(v.kernels.overlap_each(v.s[cp], v.e[cp]).sum())
    m.copy_time_us = _us(copy_ns)
    m.copy_overlap_us = _us(overlap_ns)
    m.copy_overlap_share = overlap_ns / copy_ns if copy_ns else None

    if recompute is not None and len(recompute.dev0):
        r0, r1 = iv.intersect(w.dev0, w.dev1, recompute.dev0, recompute.dev1)
        rb = v.all.busy(r0, r1)
        m.recompute_busy_us = _us(rb)
        m.recompute_share = rb / split.busy_ns if split.busy_ns else None

    streams = v.stream[within]
    kernel_streams = v.stream[k]
    for st in np.unique(streams).tolist():
        ss = v.streams[st].split(w.dev0, w.dev1)
        m.streams.append(StreamMetrics(
            device=m.device or 0, stream=st, op_count=int((streams == st).sum()),
            kernel_count=int((kernel_streams == st).sum()),
            busy_us=ss.busy_ns / 1000.0, idle_us=ss.idle_ns / 1000.0, idle_host_wait_us=ss.host_wait_ns / 1000.0,
            idle_short_gap_us=ss.short_gap_ns / 1000.0, idle_other_us=ss.other_ns / 1000.0))


class _HostView:
    """Per-thread unions of cpu_op intervals, and the runtime calls."""

    def __init__(self, t: TraceTables):
        c = t.cpu_ops
        self.cpu_s = c.start_ns
        self.threads = []
        for tid in np.unique(c.tid):
            sel = c.tid == tid
            self.threads.append(iv.Cover(c.start_ns[sel], c.start_ns[sel] + c.dur_ns[sel],
                                         np.full(int(sel.sum()), iv.NEG, dtype=np.int64), 0))
        rt = t.runtime
        self.rt_s, self.rt_d = rt.start_ns, rt.dur_ns
        names = t.names
        sync_ids = np.array([i for i, n in enumerate(names) if "Synchronize" in n], dtype=np.int64)
        self.rt_sync = np.isin(rt.name_id, sync_ids) if len(rt) else np.zeros(0, dtype=bool)


def _host_metrics(m: TraceMetrics, h: _HostView, w: Window) -> None:
    m.wall_us = _us(int((w.host1 - w.host0).sum())) if len(w.host0) else None
    m.cpu_op_count = len(iv.index_inside(h.cpu_s, w.host0, w.host1))
    m.cpu_busy_us = _us(sum(c.busy(w.host0, w.host1) for c in h.threads))
    r = iv.index_inside(h.rt_s, w.host0, w.host1)
    m.runtime_call_count = len(r)
    m.runtime_call_us = _us(int(h.rt_d[r].sum()))
    m.sync_call_us = _us(int(h.rt_d[r[h.rt_sync[r]]].sum()))


def available_windows(tables: TraceTables) -> list[str]:
    """Names of the windows compute_metrics can report for this trace."""
    return [w.name for w in find_windows(tables, primary_device(tables))]  # (steady/warm-up: compute_metrics)


def compute_metrics(tables: TraceTables, windows: Iterable[str] | None = None, *,
                    short_gap_us: float = SHORT_GAP_US, source: str | None = None) -> dict[str, TraceMetrics]:
    """Metrics per window, keyed by window name: "all", "step:<n>", and one per gcdoctor label
    ("forward", "backward", "optimizer", "recompute", ...). `windows` limits the result to those
    names ("steps" stands for every step window); unknown names are ignored."""
    t = tables
    dev = primary_device(t)
    finder = WindowFinder(t, dev)
    found = find_windows(t, dev, finder)
    short_ns = int(round(short_gap_us * 1000))
    view = _DeviceView(t, dev, short_ns) if dev is not None else None
    analyzer = HostIdleAnalyzer(t, dev, short_ns, busy=view.all) if view is not None else None
    steps = t.profiler_steps()
    steady, warm, why = _split_steps(analyzer, steps)
    if steps and steady:
        found.insert(1, finder.step_group(STEADY, "steady_steps", [steps[n] for n in steady]))
    if warm:
        found.insert(1, finder.step_group(WARMUP, "warmup_steps", [steps[n] for n in warm]))
    recompute = next((w for w in found if w.name == "recompute"), None)
    if windows is not None:
        want = set(windows)
        found = [w for w in found if w.name in want or ("steps" in want and w.name.startswith("step:"))]
    host = _HostView(t)
    src = source if source is not None else str(t.path)
    notes = _notes(t, dev)
    steady_iv = _steady_intervals(steps, steady)
    out: dict[str, TraceMetrics] = {}
    for w in found:
        m = TraceMetrics(source=src, window=w.name, device_kind=t.device_kind, window_source=w.source,
                         range_count=w.range_count, short_gap_threshold_us=short_gap_us, notes=list(notes),
                         dropped_events=sum(t.dropped.values()), dropped=dict(t.dropped))
        _host_metrics(m, host, w)
        if view is None or analyzer is None:  # (both are, or neither)
            m.device_unavailable = device_unavailable_reason(t)
        else:
            m.device = dev
            _device_metrics(m, view, w, recompute)
            m.host_idle = _host_idle(analyzer, w, steady_iv, len(steady) if w.name == STEADY else
                                     len(warm) if w.name == WARMUP else 0, bool(steps))
        _step_fields(m, w, steps, steady, warm, why)
        out[w.name] = m
    return out


def _split_steps(analyzer: HostIdleAnalyzer | None,
                 steps: dict[int, tuple[int, int]]) -> tuple[list[int], list[int], str]:
    """(steady steps, warm-up steps, why): every step is steady when there is no device to judge by."""
    if steps and analyzer is not None:
        return classify_steps(analyzer, steps)
    return list(steps), [], ""


def _notes(t: TraceTables, dev: int | None) -> list[str]:
    notes = []
    if dev is not None and len(np.unique(t.ops.device)) > 1:
        notes.append(f"the trace has {len(np.unique(t.ops.device))} devices; device metrics describe "
                     f"device {dev}, the one with the most op time")
    dropped = t.dropped_note()
    if dropped:
        notes.append(dropped)
    return notes


def _steady_intervals(steps: dict[int, tuple[int, int]], steady: list[int]) -> tuple[np.ndarray, np.ndarray] | None:
    if not (steps and steady):
        return None
    return iv.merge(np.array([steps[n][0] for n in steady], dtype=np.int64),
                    np.array([steps[n][1] for n in steady], dtype=np.int64))


def _step_fields(m: TraceMetrics, w: Window, steps: dict[int, tuple[int, int]], steady: list[int], warm: list[int],
                 why: str) -> None:
    """A step window's phase; the whole trace's steady and warm-up steps and whether it is setup only."""
    if w.source == "profiler_step":
        n = int(w.name.split(":", 1)[1])
        m.step_phase = "warm-up" if n in warm else "steady" if n in steady or not steps else "empty"
    if w.name == "all":
        m.steady_steps, m.warmup_steps = steady, warm
        _setup_only(m, steps, steady, why)


def _host_idle(an: HostIdleAnalyzer, w: Window, steady_iv: tuple[np.ndarray, np.ndarray] | None, steps: int,
               has_steps: bool):
    """The host-cause split of a window's idle over its host intervals; label windows count only
    their time inside the steady-state steps (when the trace has steps). The whole trace is read
    over its whole span, host events included: the host's work before the first device op
    (initialisation, the first allocation) is idle the device waits through, and a one-off
    (HostIdle.largest_gap_us) when one gap holds it."""
    h0, h1 = w.host0, w.host1
    if w.source in ("labels", "gpu_annotation", "torch_optimizer", "recompute_inferred") and steady_iv is not None:
        h0, h1 = iv.intersect(h0, h1, *steady_iv)
    return an.analyze(h0, h1, steps)


def _setup_only(m: TraceMetrics, steps: dict, steady: list[int], why: str) -> None:
    if steps:
        m.setup_only = not steady
        if not steady:
            m.setup_reason = f"every profiled step is warm-up or one-time setup ({why})"
        elif why:
            m.setup_reason = f"warm-up reported apart: {why}"
        return
    h = m.host_idle
    if h is None or not h.window_us:
        return
    share = h.setup_us / h.window_us
    m.setup_only = share >= SETUP_ONLY_SHARE
    if m.setup_only:
        m.setup_reason = (f"no profiler steps, and {100 * share:.0f}% of the traced time the device idles while "
                          "the host is in allocator, module-loading or initialisation calls: one-time setup, with "
                          "no step markers to separate a steady state from it")

