"""Device idle time by what the host was doing: the host-side causes of a starving device.

For each idle gap of the device inside a window's host intervals (a profiler step, the steady
steps together), the gap is attributed, nanosecond by nanosecond, to one cause:

- sync: the device went idle while the host sat in a synchronising call (cudaStreamSynchronize
  after `.item()`, `.cpu()`, `torch.cuda.synchronize()`, event waits, blocking copies): the queue
  drained and the whole gap waits for the host to refill it, except where the host then sits in
  a DataLoader range or setup calls: that time is data or setup. Also host time inside such a call.
- setup: the host inside allocator, module-loading or initialisation calls (cudaMalloc, cudaFree,
  cuModuleLoad*, cuLibraryLoad*, device and stream creation, ...).
- data: the host inside a DataLoader range (`enumerate(DataLoader)#...`).
- dispatch: the host inside an op (aten dispatch) or a launch call, or the launch latency of the
  op that ends the gap: the host is busy issuing work (launch/dispatch-bound).
- python: the host outside any recorded op: Python, or data loading that has no range.
- unrecorded: the thread that launches the work has no host events at all in the trace.
- queued: the op that ends the gap had been issued before the gap began: the device waited on
  something else (an event, another stream, a peer), not on the host.

The host state is read on the thread that launched the op ending the gap (correlation), else on
the main thread (the one with the most op time). Definitions: docs/trace-metrics.md.
"""
from __future__ import annotations

import re

import numpy as np

from gcdoctor.facts.trace import HostIdle
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.tables import TraceTables

SYNC, SETUP, DATA, DISPATCH, PYTHON, UNRECORDED, QUEUED = range(7)
CAUSE_NAMES = ("sync", "setup", "data", "dispatch", "python", "unrecorded", "queued")
# runtime call classes (RT_*), from the call's name across vendors (cuda*/cu*, hip*, musa*, ze*/ur* for XPU)
RT_OTHER, RT_SYNC, RT_SETUP, RT_LAUNCH = 0, 1, 2, 3
_SYNC_NAME = re.compile(r"synchroni[sz]e|queuefinish|eventwait|hostsynchron|memcpy(?!.*async)(?!.*peerasync)|"
                        r"streamwaitvalue.*host", re.I)
_NOT_SYNC = re.compile(r"async|streamwaitevent|query", re.I)
_SETUP_NAME = re.compile(
    r"malloc|free|alloc|hostregister|hostunregister|module|library|getfunction|getkernel|memcreate|memmap|"
    r"memunmap|memrelease|memaddress|memsetaccess|getstreampriorityrange|getdeviceproperties|getdevicecount|"
    r"streamcreate|eventcreate|streamdestroy|eventdestroy|ctxcreate|primaryctx|^cuinit|funcgetattributes|"
    r"funcsetattribute|graphinstantiate|registerfatbinary|registerfunction|setdevice(?!flags)", re.I)
_LAUNCH_NAME = re.compile(r"launch|memcpy|memset|enqueue|append|graphlaunch", re.I)
DATALOADER_PREFIX = "enumerate(DataLoader)"
SYNC_TOLERANCE_NS = 5_000  # host and device clocks agree to about a microsecond; a sync returning
# within 5 us before the device went idle still drained it
CHUNK = 1 << 14  # gap pieces attributed at a time (bounds the temporaries)
NO_OP = "(no op: torch.cuda.synchronize(), an event wait or a library call)"


def runtime_class(name: str) -> int:
    if _SETUP_NAME.search(name):
        return RT_SETUP
    if _SYNC_NAME.search(name) and not _NOT_SYNC.search(name):
        return RT_SYNC
    if _LAUNCH_NAME.search(name):
        return RT_LAUNCH
    return RT_OTHER


def _distinct_sorted(a: np.ndarray) -> int:
    """Number of distinct values of a sorted array (np.unique without its sort)."""
    return int(len(a) and 1 + np.count_nonzero(a[1:] != a[:-1]))


class _Thread:
    """The host state of one thread over time: elementary intervals between breakpoints, each with
    the highest-priority state that covers it, and prefix sums of time per state."""

    def __init__(self, covers: list[tuple[np.ndarray, np.ndarray]], default: int):
        # merged first: only the edges of each state's union are breakpoints (nested ops add none)
        covers = [iv.merge(s, e) for s, e in covers]
        pts = [np.array([iv.NEG, iv.POS], dtype=np.int64)] + [np.concatenate([s, e]) for s, e in covers if len(s)]
        p = np.sort(np.concatenate(pts))  # sorted distinct breakpoints (np.unique hashes: slower here)
        p = p[np.concatenate([[True], p[1:] != p[:-1]])]
        state = np.full(len(p), default, dtype=np.int8)
        decided = np.zeros(len(p), dtype=bool)
        for code, (s, e) in zip((SETUP, SYNC, DATA, DISPATCH), covers):
            if not len(s):
                continue
            ss, ee = np.sort(s), np.sort(e)
            cov = (np.searchsorted(ss, p, side="right") - np.searchsorted(ee, p, side="right")) > 0
            new = cov & ~decided
            state[new] = code
            decided |= cov
        # runs of one state merged (nested ops make many breakpoints inside one state)
        keep = np.concatenate([[True], state[1:] != state[:-1]])
        p, state = p[keep], state[keep]
        self.p, self.state = p, state
        lengths = np.append(np.diff(p), 0)
        self.cum = np.zeros((7, len(p) + 1), dtype=np.int64)
        for c in range(7):
            self.cum[c, 1:] = np.cumsum(np.where(state == c, lengths, 0))

    def split(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Time per state summed over the intervals [a, b): an array of 7 (no (7, n) temporaries)."""
        out = np.zeros(7, dtype=np.int64)
        if not len(a):
            return out
        last = len(self.p) - 1
        ka = np.clip(np.searchsorted(self.p, a, side="right") - 1, 0, last)
        kb = np.clip(np.searchsorted(self.p, b, side="right") - 1, 0, last)
        for c in np.unique(self.state).tolist():
            row = self.cum[c]
            out[c] = int((row[kb] - row[ka]).sum())
            sb, sa = self.state[kb] == c, self.state[ka] == c
            out[c] += int((b[sb] - self.p[kb[sb]]).sum()) - int((a[sa] - self.p[ka[sa]]).sum())
        return out


class HostIdleAnalyzer:
    """Built once per trace and device; `analyze(w0, w1)` splits the idle of any host intervals."""

    def __init__(self, t: TraceTables, device: int | None, short_ns: int, busy: iv.Cover | None = None):
        """`busy`: the union of the device's ops where the caller has it already (saves memory)."""
        self.t = t
        self.short_ns = short_ns
        rt = t.runtime
        names = t.names
        cls_by_name = {}
        self.rt_cls = np.zeros(len(rt), dtype=np.int8)
        if len(rt):
            uniq = np.unique(rt.name_id)
            for nid in uniq.tolist():
                cls_by_name[nid] = runtime_class(names[nid])
            lut = np.zeros(int(uniq.max()) + 1, dtype=np.int8)
            for nid, c in cls_by_name.items():
                lut[nid] = c
            self.rt_cls = lut[rt.name_id]
        self.rt_s, self.rt_e = rt.start_ns, rt.start_ns + rt.dur_ns
        c = t.cpu_ops
        self.cpu_tids = np.unique(c.tid) if len(c) else np.zeros(0, dtype=np.int64)
        self.main_tid = None
        if len(c):
            tids, inv = np.unique(c.tid, return_inverse=True)
            self.main_tid = int(tids[np.argmax(np.bincount(inv, weights=c.dur_ns))])
        elif len(rt):
            tids, inv = np.unique(rt.tid, return_inverse=True)
            self.main_tid = int(tids[np.argmax(np.bincount(inv, weights=rt.dur_ns))])
        self._threads: dict[int, _Thread] = {}
        # the device's ops, their union's segments and the op opening each segment (its launch
        # start and thread; an op without a launch call reads as issued late)
        if busy is not None and busy.next_tag is not None:
            seg_s, seg_e = busy.s, busy.e
            ntid = busy.next_tag
            nj = busy.next_launch != iv.NEG
            nl = np.where(nj, busy.next_launch, iv.POS)
        else:
            ops = t.ops
            m = ops.device == device if device is not None else np.zeros(len(ops), dtype=bool)
            s, e, launch = ops.start_ns[m], (ops.start_ns + ops.dur_ns)[m], ops.launch[m]
            joined = launch >= 0
            l_start = np.full(len(s), iv.NEG, dtype=np.int64)
            l_tid = np.full(len(s), -1, dtype=np.int64)
            if len(rt):
                l_start[joined] = rt.start_ns[launch[joined]]
                l_tid[joined] = rt.tid[launch[joined]]
            busy = iv.Cover(s, e, l_start, 0, tags=l_tid)
            seg_s, seg_e, ntid = busy.s, busy.e, busy.next_tag
            nj = busy.next_launch != iv.NEG
            nl = np.where(nj, busy.next_launch, iv.POS)
        if self.main_tid is not None:
            ntid = np.where(nj, ntid, self.main_tid)
        self.any_joined = bool(nj.any())
        self.busy = busy
        # gaps k = 0..m: (end of segment k-1, start of segment k); the op opening segment k ends gap k
        self.g0 = np.concatenate([[iv.NEG], seg_e]).astype(np.int64)
        self.g1 = np.concatenate([seg_s, [iv.POS]]).astype(np.int64)
        self.g_launch = np.concatenate([nl, [iv.POS]]).astype(np.int64)
        self.g_tid = np.concatenate([ntid, [-1 if self.main_tid is None else self.main_tid]]).astype(np.int64)
        self.g_joined = np.concatenate([nj, [False]])
        self.g_launch[~self.g_joined] = iv.POS  # unknown issue time: read the host state over the whole gap
        # synchronising calls, by start, with the call reaching furthest among those started so far
        sync = np.flatnonzero(self.rt_cls == RT_SYNC)
        order = np.argsort(self.rt_s[sync], kind="stable")
        self.sync_rows = sync[order]
        ends = self.rt_e[self.sync_rows]
        self.sync_s = self.rt_s[self.sync_rows]
        if len(ends):
            self.sync_reach = np.maximum.accumulate(ends)
            # index (into sync_rows) of the call achieving the running maximum
            idx = np.arange(len(ends))
            self.sync_arg = np.maximum.accumulate(np.where(ends == self.sync_reach, idx, 0))
        else:
            self.sync_reach = self.sync_arg = np.zeros(0, dtype=np.int64)

    # -- host threads --------------------------------------------------------------------------
    def _thread(self, tid: int) -> _Thread:
        th = self._threads.get(tid)
        if th is None:
            t = self.t
            rt_m = t.runtime.tid == tid
            covers = []
            for cls in (RT_SETUP, RT_SYNC):
                sel = rt_m & (self.rt_cls == cls)
                covers.append((self.rt_s[sel], self.rt_e[sel]))
            rng = t.ranges
            if len(rng):
                dl = np.array([i for i, n in enumerate(t.names) if n.startswith(DATALOADER_PREFIX)], dtype=np.int64)
                sel = (~rng.on_device) & (rng.tid == tid) & np.isin(rng.name_id, dl)
                covers.append((rng.start_ns[sel], rng.start_ns[sel] + rng.dur_ns[sel]))
            else:
                covers.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
            c = t.cpu_ops
            cm = c.tid == tid
            launch = rt_m & (self.rt_cls == RT_LAUNCH)
            covers.append((np.concatenate([c.start_ns[cm], self.rt_s[launch]]),
                           np.concatenate([c.start_ns[cm] + c.dur_ns[cm], self.rt_e[launch]])))
            recorded = bool(cm.any()) or bool(len(rng) and ((rng.tid == tid) & ~rng.on_device).any())
            th = self._threads[tid] = _Thread(covers, PYTHON if recorded else UNRECORDED)
        return th

    def _outer_op(self, tid: int, at: int) -> str:
        """Name of the outermost cpu op on `tid` around time `at`, or NO_OP."""
        c = self.t.cpu_ops
        sel = np.flatnonzero((c.tid == tid) & (c.start_ns <= at) & (c.start_ns + c.dur_ns >= at))
        if not len(sel):
            return NO_OP
        best = sel[np.argmin(c.start_ns[sel])]
        return self.t.names[c.name_id[best]]

    # -- windows -------------------------------------------------------------------------------
    def analyze(self, w0: np.ndarray, w1: np.ndarray, steps: int = 0) -> HostIdle:
        """Split the device idle inside the sorted disjoint host intervals [w0, w1)."""
        w0 = np.asarray(w0, dtype=np.int64)
        w1 = np.asarray(w1, dtype=np.int64)
        window = int((w1 - w0).sum())
        busy = self.busy.busy(w0, w1)
        out = np.zeros(7, dtype=np.int64)
        h = HostIdle(window_us=window / 1e3, busy_us=busy / 1e3, idle_us=(window - busy) / 1e3, steps=steps)
        if not len(w0) or window <= 0:
            return h
        # pieces of the gaps inside the window: (a, b, gap index)
        lo = np.searchsorted(self.g1, w0, side="right")  # first gap ending after the interval starts
        hi = np.searchsorted(self.g0, w1, side="left")  # first gap starting at/after it ends
        n = np.maximum(hi - lo, 0)
        wi = np.repeat(np.arange(len(w0)), n)
        gi = np.repeat(lo, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
        a = np.maximum(self.g0[gi], w0[wi])
        b = np.minimum(self.g1[gi], w1[wi])
        keep = b > a
        a, b, gi = a[keep], b[keep], gi[keep]
        h.gap_count = _distinct_sorted(gi)
        if not len(a):
            return h
        glens = []
        for i in range(0, len(a), CHUNK):  # in chunks: a trace's whole window has ~1e5 gaps
            glens.append(self._attribute(h, out, a[i:i + CHUNK], b[i:i + CHUNK], gi[i:i + CHUNK]))
        glen = np.concatenate(glens)
        h.host_gap_count = len(glen)
        h.short_host_gap_count = int((glen < self.short_ns).sum())
        h.host_gap_median_us = round(float(np.median(glen))) / 1e3 if len(glen) else None
        for code, attr in ((SYNC, "sync_us"), (SETUP, "setup_us"), (DATA, "data_us"), (DISPATCH, "dispatch_us"),
                           (PYTHON, "python_us"), (UNRECORDED, "unrecorded_us"), (QUEUED, "queued_us")):
            setattr(h, attr, int(out[code]) / 1e3)
        return h

    def _attribute(self, h: HostIdle, out: np.ndarray, a: np.ndarray, b: np.ndarray, gi: np.ndarray) -> np.ndarray:
        """Add the causes of the gap pieces [a, b) (of gaps gi) to `out` and `h`'s names; returns
        the lengths of the pieces the host was late for."""
        g0 = self.g0[gi]
        L = self.g_launch[gi]
        # 1. drained by a synchronising call that the host sat in when the device went idle
        drained = np.zeros(len(a), dtype=bool)
        call = np.full(len(a), -1, dtype=np.int64)
        if len(self.sync_s):
            k = np.searchsorted(self.sync_s, g0, side="right") - 1
            kc = np.maximum(k, 0)
            # only an empty queue drains: the op ending the gap was not yet issued
            drained = ((k >= 0) & (g0 > iv.NEG) & (self.sync_reach[kc] >= g0 - SYNC_TOLERANCE_NS)
                       & (self.g_launch[gi] > g0))
            call = np.where(drained, self.sync_rows[self.sync_arg[kc]], -1)
        if drained.any():
            names = self.t.names
            rt = self.t.runtime
            tids = self.g_tid[gi]
            for j in np.flatnonzero(drained).tolist():
                r = int(call[j])
                piece = int(b[j] - a[j])
                # the sync emptied the queue, but where the host then sat in a DataLoader range or in
                # setup calls, that is what the device waited for: removing the sync would not hide it
                tid = int(tids[j]) if tids[j] >= 0 else (self.main_tid if self.main_tid is not None else -1)
                if tid >= 0:
                    parts = self._thread(tid).split(a[j:j + 1], b[j:j + 1])
                    out[DATA] += int(parts[DATA])
                    out[SETUP] += int(parts[SETUP])
                    if parts[SETUP]:
                        self._setup_names(h, tid, a[j:j + 1], b[j:j + 1])
                    piece -= int(parts[DATA] + parts[SETUP])
                out[SYNC] += piece
                if piece <= 0:
                    continue
                us = float(piece) / 1e3
                cname = names[rt.name_id[r]]
                h.sync_calls[cname] = h.sync_calls.get(cname, 0.0) + us
                op = self._outer_op(int(rt.tid[r]), int(rt.start_ns[r]))
                h.sync_ops[op] = h.sync_ops.get(op, 0.0) + us
            h.sync_count += _distinct_sorted(gi[drained])
        rest = ~drained
        # 2. queued: the closing op was issued before the gap began
        queued = rest & (L <= g0)
        out[QUEUED] += int((b - a)[queued].sum())
        host = rest & ~queued
        # launch latency of the closing op: from its launch to the end of the piece
        cut = np.clip(L, a, b)
        out[DISPATCH] += int(np.where(host, b - cut, 0).sum())
        # 3. the host's state over [a, cut) on the thread that launched the closing op
        tids = self.g_tid[gi]
        host_tids = tids[host]
        distinct = [int(host_tids[0])] if len(host_tids) and (host_tids == host_tids[0]).all() else \
            np.unique(host_tids).tolist()
        for tid in distinct:
            sel = host & (tids == tid)
            if tid < 0 and self.main_tid is None:
                out[UNRECORDED] += int((cut - a)[sel].sum())
                continue
            th = self._thread(int(tid))
            out += th.split(a[sel], cut[sel])
            if (cut[sel] > a[sel]).any():
                self._setup_names(h, int(tid), a[sel], cut[sel])
        return (b - a)[host & (b > a)]

    def _setup_names(self, h: HostIdle, tid: int, a: np.ndarray, b: np.ndarray) -> None:
        """Setup idle by call name: each setup call's overlap with the host-wait parts of the gaps
        (nested calls, a driver call inside a runtime call, count in each)."""
        rt = self.t.runtime
        sel = np.flatnonzero((rt.tid == tid) & (self.rt_cls == RT_SETUP))
        if not len(sel):
            return
        s0, s1 = iv.merge(a, b)
        cover = iv.Cover(s0, s1, np.full(len(s0), iv.NEG, dtype=np.int64), 0)
        ov = cover.overlap_each(self.rt_s[sel], self.rt_e[sel])
        for r, o in zip(sel[ov > 0].tolist(), ov[ov > 0].tolist()):
            n = self.t.names[rt.name_id[r]]
            h.setup_calls[n] = h.setup_calls.get(n, 0.0) + o / 1e3

    # -- steps ---------------------------------------------------------------------------------
    def setup_time(self, w0: int, w1: int) -> int:
        """Host time inside setup calls (any thread, merged) within [w0, w1)."""
        sel = np.flatnonzero((self.rt_cls == RT_SETUP) & (self.rt_s < w1) & (self.rt_e > w0))
        if not len(sel):
            return 0
        return iv.total(np.maximum(self.rt_s[sel], w0), np.minimum(self.rt_e[sel], w1))

    def loads_modules(self, w0: int, w1: int) -> bool:
        """Whether a module-loading call (lazy kernel loading: done once per kernel) starts in [w0, w1)."""
        rt = self.t.runtime
        sel = (self.rt_cls == RT_SETUP) & (self.rt_s >= w0) & (self.rt_s < w1)
        return any(_MODULE_NAME.search(self.t.names[nid]) for nid in np.unique(rt.name_id[sel]).tolist())


_MODULE_NAME = re.compile(r"module|library|registerfatbinary", re.I)


# A leading step is warm-up when one-time setup takes this share of it, it loads modules, or it is
# this many times as long as the median of the steps after it.
WARMUP_SETUP_SHARE = 0.1
WARMUP_SLOW_FACTOR = 2.0


def classify_steps(an: HostIdleAnalyzer, steps: dict[int, tuple[int, int]]) -> tuple[list[int], list[int], str]:
    """(steady steps, warm-up steps, why). Only leading steps can be warm-up: a step that loads
    modules, or whose setup calls take WARMUP_SETUP_SHARE of it and twice the later steps' median
    share, or that lasts WARMUP_SLOW_FACTOR times the later steps' median. Setup calls that recur in
    every step are a steady-state cost (GC023), not warm-up."""
    nums = list(steps)
    durs = [max(b - a, 1) for a, b in steps.values()]
    shares = [an.setup_time(a, b) / d for (a, b), d in zip(steps.values(), durs)]
    warm: list[int] = []
    why = []
    for i, n in enumerate(nums):
        a, b = steps[n]
        later_d, later_s = durs[i + 1:], shares[i + 1:]
        med_d = float(np.median(later_d)) if later_d else None
        med_s = float(np.median(later_s)) if later_s else None
        setup = shares[i] >= WARMUP_SETUP_SHARE and med_s is not None and shares[i] >= 2 * med_s
        slow = med_d is not None and durs[i] >= WARMUP_SLOW_FACTOR * med_d
        modules = an.loads_modules(a, b)
        if not (setup or modules or slow):
            break
        warm.append(n)
        why.append(f"step {n}: " + ", ".join(
            x for x, on in ((f"{100 * shares[i]:.0f}% of it in setup calls", setup), ("loads modules", modules),
                            (f"{durs[i] / med_d if med_d else 0:.1f}x the later steps", slow)) if on))
    steady = [n for n in nums if n not in warm]
    return steady, warm, "; ".join(why)
