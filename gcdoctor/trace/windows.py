"""Trace windows: the whole trace, each profiler step, and each gcdoctor label.

A window has host intervals (where its CPU ranges are) and device intervals (where the device
ran the work launched inside them). Device intervals come from correlation: an op belongs to a
CPU range when its launch call started inside the range, on any thread, so backward kernels
launched from the autograd thread land in the caller's `gcdoctor/backward` range
(docs/references.md section 5). Definitions: docs/trace-metrics.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from gcdoctor.trace import intervals as iv
from gcdoctor.trace.tables import TraceTables

LABEL_PREFIX = "gcdoctor/"
TORCH_OPTIMIZER = re.compile(r"^Optimizer\.step#")
# label windows first in this order, then the rest alphabetically
LABEL_ORDER = ("forward", "loss", "backward", "recompute", "optimizer")


@dataclass
class Window:
    name: str
    source: str  # how it was located: trace | profiler_step | labels | gpu_annotation | torch_optimizer
    host0: np.ndarray  # sorted disjoint host intervals [host0, host1)
    host1: np.ndarray
    dev0: np.ndarray  # sorted disjoint device intervals, empty when no device work was found
    dev1: np.ndarray
    range_count: int = 0


def _empty() -> np.ndarray:
    return np.zeros(0, dtype=np.int64)


class _LaunchIndex:
    """Joined ops sorted by the start of their launch call, to find the ops launched inside any
    set of CPU intervals with two binary searches per interval."""

    def __init__(self, launch_ts: np.ndarray, op_s: np.ndarray, op_e: np.ndarray):
        order = np.argsort(launch_ts, kind="stable")
        self.launch = launch_ts[order]
        self.s = np.append(op_s[order], 0)  # a sentinel keeps reduceat's indices in range
        self.e = np.append(op_e[order], 0)

    def spans(self, r0: np.ndarray, r1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each sorted disjoint CPU interval, [first start, last end] of the ops launched
        inside it (intervals without ops dropped), merged into disjoint device intervals."""
        if not len(r0) or not len(self.launch):
            return _empty(), _empty()
        lo = np.searchsorted(self.launch, r0, side="left")
        hi = np.searchsorted(self.launch, r1, side="left")
        keep = hi > lo
        if not keep.any():
            return _empty(), _empty()
        idx = np.stack([lo[keep], hi[keep]], axis=1).ravel()
        first = np.minimum.reduceat(self.s, idx)[::2]
        last = np.maximum.reduceat(self.e, idx)[::2]
        return iv.merge(first, last)


class WindowFinder:
    """Locates the windows of one trace for one device."""

    def __init__(self, t: TraceTables, device: int | None):
        self.t = t
        ops = t.ops
        op_mask = ops.device == device
        self.device = device
        self.op_s = ops.start_ns[op_mask]
        self.op_e = (ops.start_ns + ops.dur_ns)[op_mask]
        launch = ops.launch[op_mask]
        joined = launch >= 0
        launch_ts = t.runtime.start_ns[launch[joined]] if len(t.runtime) else _empty()
        self.launches = _LaunchIndex(launch_ts, self.op_s[joined], self.op_e[joined])
        rng = t.ranges
        names = np.asarray(t.names, dtype=object)
        self.range_names = names[rng.name_id] if len(rng) else np.zeros(0, dtype=object)

    def _by_correlation(self, r0: np.ndarray, r1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.launches.spans(r0, r1)

    def whole(self) -> Window:
        span = self.t.span_ns()
        h0, h1 = (np.array([span[0]]), np.array([span[1]])) if span else (_empty(), _empty())
        if len(self.op_s):
            d0, d1 = np.array([self.op_s.min()]), np.array([self.op_e.max()])
        else:
            d0, d1 = _empty(), _empty()
        return Window("all", "trace", h0, h1, d0, d1, 1)

    def steps(self) -> list[Window]:
        """One window per ProfilerStep#N range."""
        out = []
        for n, (a, b) in self.t.profiler_steps().items():
            h0, h1 = np.array([a]), np.array([b])
            d0, d1 = self._by_correlation(h0, h1)
            out.append(Window(step_window(n), "profiler_step", h0, h1, d0, d1, 1))
        return out

    def step_group(self, name: str, source: str, spans: list[tuple[int, int]]) -> Window:
        """One window over several profiler steps (the steady-state steps, the warm-up steps)."""
        h0, h1 = iv.merge(np.array([a for a, _ in spans], dtype=np.int64), np.array([b for _, b in spans], dtype=np.int64))
        d0, d1 = self._by_correlation(h0, h1)
        return Window(name, source, h0, h1, d0, d1, len(spans))

    def recompute_hook(self) -> Window | None:
        """Recompute found without `gcdoctor/recompute` labels (gcdoctor.trace.recompute, where
        present: it returns host intervals of the recomputation in an unlabelled checkpointing
        trace, or None)."""
        try:
            from gcdoctor.trace import recompute  # written alongside: finding unlabelled recompute
        except ImportError:
            return None
        found = getattr(recompute, "recompute_host_intervals", None)
        spans = found(self.t) if found is not None else None
        if spans is None or not len(spans[0]):
            return None
        h0, h1 = iv.merge(np.asarray(spans[0], dtype=np.int64), np.asarray(spans[1], dtype=np.int64))
        d0, d1 = self._by_correlation(h0, h1)
        return Window("recompute", "recompute_inferred", h0, h1, d0, d1, len(h0))

    def labels(self) -> list[Window]:
        """One window per gcdoctor label base: `gcdoctor/<a>` and `gcdoctor/<a>/<anything>` ranges
        together make window `<a>`; where both forms exist, `<a>/*` holds the indexed ones alone."""
        rng = self.t.ranges
        groups: dict[str, dict[str, list[int]]] = {}
        for i, n in enumerate(self.range_names):
            if n.startswith(LABEL_PREFIX):
                parts = n[len(LABEL_PREFIX):].split("/", 1)
                base = parts[0]
                if not base:
                    continue
                g = groups.setdefault(base, {"plain_cpu": [], "idx_cpu": [], "plain_dev": [], "idx_dev": []})
                if rng.on_device[i] and rng.pid[i] != self.device:
                    continue  # another device's annotation
                side = "dev" if rng.on_device[i] else "cpu"
                g[("idx_" if len(parts) > 1 else "plain_") + side].append(i)
        out = []
        for base in sorted(groups, key=lambda b: (LABEL_ORDER.index(b) if b in LABEL_ORDER else 99, b)):
            g = groups[base]
            out.append(self._label_window(base, g["plain_cpu"] + g["idx_cpu"], g["plain_dev"] + g["idx_dev"]))
            if g["plain_cpu"] and g["idx_cpu"]:
                out.append(self._label_window(f"{base}/*", g["idx_cpu"], g["idx_dev"]))
        if "optimizer" not in groups:
            idx = [i for i, n in enumerate(self.range_names)
                   if not rng.on_device[i] and TORCH_OPTIMIZER.match(n)]
            if idx:
                w = self._label_window("optimizer", idx, [])
                w.source = "torch_optimizer"
                out.append(w)
        return out

    def _label_window(self, name: str, cpu_idx: list[int], dev_idx: list[int]) -> Window:
        rng = self.t.ranges
        ci = np.asarray(cpu_idx, dtype=np.int64)
        h0, h1 = iv.merge(rng.start_ns[ci], rng.start_ns[ci] + rng.dur_ns[ci]) if len(ci) else (_empty(), _empty())
        d0, d1 = self._by_correlation(h0, h1)
        source = "labels"
        if not len(d0) and dev_idx:  # no launch joined to these ranges: use the device annotations
            di = np.asarray(dev_idx, dtype=np.int64)
            d0, d1 = iv.merge(rng.start_ns[di], rng.start_ns[di] + rng.dur_ns[di])
            source = "gpu_annotation"
        return Window(name, source, h0, h1, d0, d1, len(ci) if len(ci) else len(dev_idx))


STEP_PREFIX = "step:"
STEADY, WARMUP = "steady", "warm-up"


def step_window(n: int) -> str:
    """The window name of profiler step n (its part of a TraceKey)."""
    return f"{STEP_PREFIX}{n}"


def find_windows(t: TraceTables, device: int | None, finder: WindowFinder | None = None) -> list[Window]:
    """The windows of a trace, with device intervals of `device` (None: CPU-only)."""
    f = finder if finder is not None else WindowFinder(t, device)
    labels = f.labels()
    if not any(w.name == "recompute" for w in labels):
        rec = f.recompute_hook()
        if rec is not None:
            labels.append(rec)
    return [f.whole(), *f.steps(), *labels]
