"""Interval arithmetic on integer nanoseconds, vectorised with numpy.

A `Cover` is the union of a set of intervals (device ops on some streams), kept as sorted,
disjoint segments with prefix sums, so the busy time inside any window is two binary searches.
Its gaps are classified once (host wait / short gap / other, docs/trace-metrics.md) and a
window's idle split is read from prefix sums plus at most two clipped gaps per window interval.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

I64 = np.int64
NEG = np.iinfo(np.int64).min // 4  # "minus infinity" that survives subtraction
POS = np.iinfo(np.int64).max // 4

HOST_WAIT, SHORT_GAP, OTHER = 0, 1, 2


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted disjoint segments (touching ones merge)."""
    if not len(starts):
        return np.zeros(0, I64), np.zeros(0, I64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], reach[last]


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def intersect(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two lists of sorted disjoint intervals."""
    if not len(a0) or not len(b0):
        return np.zeros(0, I64), np.zeros(0, I64)
    lo = np.searchsorted(b1, a0, side="right")  # first b ending after a starts
    hi = np.searchsorted(b0, a1, side="left")  # first b starting at/after a ends
    n = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(len(a0)), n)
    offset = np.repeat(np.cumsum(n) - n, n)  # index of each pair's first pair
    bi = np.repeat(lo, n) + (np.arange(int(n.sum())) - offset)
    s = np.maximum(a0[ai], b0[bi])
    e = np.minimum(a1[ai], b1[bi])
    keep = e > s
    return s[keep], e[keep]


def index_inside(sorted_t: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Indices of the sorted times that lie in one of the sorted disjoint intervals [w0, w1)."""
    if not len(w0) or not len(sorted_t):
        return np.zeros(0, dtype=np.int64)
    lo = np.searchsorted(sorted_t, w0, side="left")
    hi = np.searchsorted(sorted_t, w1, side="left")
    n = hi - lo
    if len(n) == 1:
        return np.arange(lo[0], hi[0])
    offset = np.repeat(np.cumsum(n) - n, n)
    return np.repeat(lo, n) + (np.arange(int(n.sum())) - offset)


def inside(t: np.ndarray, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """Mask of the times t that lie in one of the sorted disjoint intervals [w0, w1)."""
    if not len(w0):
        return np.zeros(len(t), dtype=bool)
    k = np.searchsorted(w0, t, side="right") - 1
    kc = np.maximum(k, 0)
    return (k >= 0) & (t < w1[kc])


@dataclass
class IdleSplit:
    busy_ns: int
    window_ns: int
    host_wait_ns: int
    short_gap_ns: int
    other_ns: int

    @property
    def idle_ns(self) -> int:
        return self.window_ns - self.busy_ns


class Cover:
    """Union of op intervals, with each gap between segments classified by the op that ends it.

    starts/ends: the ops; launch_ns: start of each op's launch call (NEG when it has none, which
    never counts as a host wait); short_ns: gaps shorter than this that are not host waits are
    short gaps.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray, launch_ns: np.ndarray, short_ns: int,
                 tags: np.ndarray | None = None):
        """tags: a value per op (the launch thread), kept for the op opening each segment (next_tag)."""
        self.short_ns = short_ns
        self.next_tag = None
        n = len(starts)
        if n:
            # ties at the same start: the op launched first decides (the least host wait)
            order = np.lexsort((launch_ns, starts))
            s = starts[order]
            reach = np.maximum.accumulate(ends[order])
            new = np.empty(n, dtype=bool)
            new[0] = True
            np.greater(s[1:], reach[:-1], out=new[1:])
            first = np.flatnonzero(new)
            del new
            last = np.empty(len(first), dtype=np.int64)
            last[:-1] = first[1:] - 1
            last[-1] = n - 1
            m = len(first)
            # gaps: g[k] = (end of segment k-1, start of segment k), k = 0..m; the first starts at
            # NEG, the last ends at POS. The segments are views of them (s = g1[:-1], e = g0[1:]).
            self.g0 = np.empty(m + 1, I64)
            self.g0[0] = NEG
            np.take(reach, last, out=self.g0[1:])
            del reach, last
            self.g1 = np.empty(m + 1, I64)
            self.g1[-1] = POS
            np.take(s, first, out=self.g1[:-1])
            del s
            nl = np.empty(m + 1, I64)
            nl[-1] = NEG
            np.take(launch_ns[order], first, out=nl[:-1])  # launch of the op opening each segment
            self.next_index = order[first]  # that op's index in the input arrays
            if tags is not None:
                self.next_tag = tags[order][first]
        else:
            self.g0 = np.array([NEG], I64)
            self.g1 = np.array([POS], I64)
            nl = np.array([NEG], I64)
            self.next_index = np.zeros(0, I64)
            if tags is not None:
                self.next_tag = np.zeros(0, I64)
        self.s, self.e, self.next_launch = self.g1[:-1], self.g0[1:], nl[:-1]
        lengths = self.e - self.s
        self.cum = np.empty(len(lengths) + 1, I64)
        self.cum[0] = 0
        np.cumsum(lengths, out=self.cum[1:])
        del lengths
        glen = self.g1 - self.g0
        cls = np.full(len(glen), OTHER, dtype=np.int8)
        host = nl > self.g0
        cls[(glen < short_ns) & ~host] = SHORT_GAP
        cls[host] = HOST_WAIT
        cls[0] = cls[-1] = OTHER  # never fully inside a window; clipped separately
        self.gap_cls = cls
        inner = glen[1:-1]
        self.gap_cum = []
        for c in (HOST_WAIT, SHORT_GAP, OTHER):
            cum = np.zeros(max(len(glen) - 1, 1), I64)
            np.cumsum(np.where(cls[1:-1] == c, inner, 0), out=cum[1:len(inner) + 1])
            self.gap_cum.append(cum)
        self.gap_next_launch = nl

    def upto(self, t: np.ndarray) -> np.ndarray:
        """Busy time in (-inf, t] for each t."""
        t = np.asarray(t, dtype=I64)
        if not len(self.s):
            return np.zeros(t.shape, I64)
        k = np.searchsorted(self.s, t, side="right") - 1
        kc = np.maximum(k, 0)
        part = np.clip(t - self.s[kc], 0, self.e[kc] - self.s[kc])
        return np.where(k >= 0, self.cum[kc] + part, 0)

    def busy(self, w0: np.ndarray, w1: np.ndarray) -> int:
        return int((self.upto(w1) - self.upto(w0)).sum()) if len(w0) else 0

    def overlap_each(self, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Busy time inside each interval [s, e)."""
        return self.upto(e) - self.upto(s)

    def split(self, w0: np.ndarray, w1: np.ndarray) -> IdleSplit:
        """Busy time and classified idle time inside the sorted disjoint window intervals."""
        w0 = np.asarray(w0, dtype=I64)
        w1 = np.asarray(w1, dtype=I64)
        window = int((w1 - w0).sum())
        busy = self.busy(w0, w1)
        if not len(w0):
            return IdleSplit(0, 0, 0, 0, 0)
        out = np.zeros(3, dtype=I64)
        # A gap is classified by the op that ends it when that op starts inside the window
        # interval (g1 < w1); a gap running to the interval's end is trailing: "other".
        # interior gaps (k = 1..m-1) with w0 <= g0 and g1 < w1
        lo = np.searchsorted(self.g0, w0, side="left")  # first gap starting at/after w0
        hi = np.searchsorted(self.g1, w1, side="left")  # first gap ending at/after w1
        lo_i = np.clip(lo, 1, len(self.g0) - 1)
        hi_i = np.clip(hi, 1, len(self.g0) - 1)
        cnt = hi_i > lo_i
        for c in range(3):
            pc = self.gap_cum[c]
            out[c] += int(np.where(cnt, pc[hi_i - 1] - pc[lo_i - 1], 0).sum())
        # gap containing w0 in its interior (starts before w0): clipped on the left
        j = np.searchsorted(self.g0, w0, side="left") - 1  # last gap starting before w0
        jc = np.maximum(j, 0)
        has = (j >= 0) & (self.g1[jc] > w0)
        g1 = self.g1[jc]
        ends_inside = has & (g1 < w1)
        length = np.where(ends_inside, g1 - w0, 0)
        host = ends_inside & (self.gap_next_launch[jc] > w0)
        short = ends_inside & ~host & (length < self.short_ns)
        out[HOST_WAIT] += int(length[host].sum())
        out[SHORT_GAP] += int(length[short].sum())
        out[OTHER] += int(length[ends_inside & ~host & ~short].sum())
        # a window interval wholly inside one gap: no op at all
        out[OTHER] += int(np.where(has & ~ends_inside, w1 - w0, 0).sum())
        # the gap reaching w1, starting at/after w0: clipped on the right, no next op inside
        r = np.searchsorted(self.g1, w1, side="left")  # first gap ending at/after w1
        rc = np.minimum(r, len(self.g0) - 1)
        rhas = (r < len(self.g0)) & (self.g0[rc] < w1) & (self.g0[rc] >= w0)
        out[OTHER] += int(np.where(rhas, w1 - self.g0[rc], 0).sum())
        return IdleSplit(busy, window, int(out[HOST_WAIT]), int(out[SHORT_GAP]), int(out[OTHER]))
