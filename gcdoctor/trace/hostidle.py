"""Device idle time by what the host was doing: the host-side causes of a starving device.

Every idle nanosecond of the device inside a window's host intervals (a profiler step, the steady
steps together, or the host's span of a trace without steps) is charged to what the host was doing
at that nanosecond, on the thread that launched the op ending the gap:

- sync: the host sat inside a synchronising call (cudaStreamSynchronize after `.item()`, `.cpu()`,
  `torch.cuda.synchronize()`, event waits, a blocking copy such as cudaMemcpy or
  hipMemcpyWithStream), including the wait of a blocking copy for its own device op. A sync owns the
  idle only while the host is inside the call: the Python after it is Python (`after_sync_us`
  says how much host work followed a drained queue).
- setup: the host inside allocator, module-loading or initialisation calls (cudaMalloc, cudaFree,
  cuModuleLoad*, cuLibraryLoad*, device and stream creation, ...).
- data: the host inside a DataLoader range (`enumerate(DataLoader)#...`, a user annotation, or an
  `Operator`/cpu_op in older Kineto).
- dispatch: the host inside an op (aten dispatch) or a launch call, or the launch latency of the
  op that ends the gap: the host is busy issuing work (launch/dispatch-bound).
- python: the host outside any recorded op: Python, or data loading that has no range.
- unrecorded: the thread that launches the work has no host events at all in the trace.
- queued: the op that ends the gap had been issued before the gap began: the device waited on
  something else (an event, another stream, a peer), not on the host.

Runtime calls are classified by name from a table of both vendors' APIs (CUDA runtime and driver,
HIP, MUSA; `RUNTIME_TABLE`), so that hipModuleLaunchKernel is a launch, not module loading. The
window also carries the evidence a verdict needs (device ops, kernels, launch records matched,
graph replays, the largest single gap) and the floors below which it is "too little device work
to judge". Definitions: docs/trace-metrics.md.
"""
from __future__ import annotations

import re

import numpy as np

from gcdoctor.facts.trace import HostIdle
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.tables import KERNEL, TraceTables, is_comm_kernel

SYNC, SETUP, DATA, DISPATCH, PYTHON, UNRECORDED, QUEUED = range(7)
CAUSE_NAMES = ("sync", "setup", "data", "dispatch", "python", "unrecorded", "queued")
# runtime call classes (RT_*). RT_LAUNCH issues a device op (its correlation names one);
# RT_ENQUEUE issues work that is no op of its own (event record, stream wait, host function)
RT_OTHER, RT_SYNC, RT_SETUP, RT_LAUNCH, RT_ENQUEUE = 0, 1, 2, 3, 4

# The vendor APIs by their name without the vendor prefix (cuda/cu, hip/hsa, musa/mu) and without
# ABI suffixes (_v2, _ptsz, _ptds, _spt), lower case. CUDA runtime and driver API names; HIP's from
# its runtime API and the launch calls Kineto's roctracer path correlates (hipLaunchKernel,
# hipExtLaunchKernel, hipModuleLaunchKernel, hipExtModuleLaunchKernel, hipHccModuleLaunchKernel,
# hipLaunchCooperativeKernel, hipGraphLaunch, hipMemcpyWithStream ...).
_LAUNCH = """launchkernel launchkernelex launchkernelexc launchcooperativekernel launchcooperativekernelmultidevice
modulelaunchkernel modulelaunchcooperativekernel modulelaunchcooperativekernelmultidevice extmodulelaunchkernel
hccmodulelaunchkernel extlaunchkernel extlaunchmultikernelmultidevice launchbyptr graphlaunch
memcpyasync memcpy2dasync memcpy3dasync memcpyhtodasync memcpydtohasync memcpydtodasync memcpyhtoaasync
memcpyatohasync memcpypeerasync memcpy3dpeerasync memcpytosymbolasync memcpyfromsymbolasync memcpytoarrayasync
memcpyfromarrayasync memcpy2dtoarrayasync memcpy2dfromarrayasync memcpybatchasync memsetasync memset2dasync
memset3dasync memsetd8async memsetd16async memsetd32async memsetd2d8async memsetd2d16async memsetd2d32async
memset memset2d memset3d memsetd8 memsetd16 memsetd32 memprefetchasync""".split()
_ENQUEUE = """eventrecord eventrecordwithflags streamwaitevent streamwaitvalue32 streamwaitvalue64 streamwritevalue32
streamwritevalue64 streambatchmemop launchhostfunc streamaddcallback""".split()
_SYNC = """devicesynchronize streamsynchronize eventsynchronize ctxsynchronize threadsynchronize memcpy memcpy2d
memcpy3d memcpyhtod memcpydtoh memcpydtod memcpyhtoa memcpyatoh memcpydtoa memcpyatod memcpypeer memcpy3dpeer
memcpytosymbol memcpyfromsymbol memcpywithstream memcpyparam2d memcpytoarray memcpyfromarray memcpy2dtoarray
memcpy2dfromarray memcpyasync_blocking""".split()
_SETUP = """malloc mallocasync mallochost hostalloc hostmalloc mallocmanaged mallocpitch malloc3d mallocarray
malloc3darray mallocfrompoolasync free freeasync freehost hostfree freearray memalloc memallocasync memallocpitch
memallochost memallocmanaged memfree memfreeasync memfreehost memhostalloc hostregister hostunregister
memhostregister memhostunregister extmallocwithflags moduleload moduleloaddata moduleloaddataex
moduleloadfatbinary moduleunload modulegetfunction modulegetglobal modulegettexref libraryload
libraryloaddata libraryloadfromfile libraryunload librarygetkernel librarygetmodule kernelgetfunction
getfuncbysymbol getkernel funcgetattributes funcgetattribute funcsetattribute funcsetcacheconfig
funcsetsharedmemconfig streamcreate streamcreatewithflags streamcreatewithpriority streamdestroy eventcreate
eventcreatewithflags eventdestroy getdeviceproperties devicegetattribute devicegetproperties getdevicecount
devicegetcount setdevice init ctxcreate ctxdestroy deviceprimaryctxretain deviceprimaryctxrelease
deviceprimaryctxreset graphinstantiate graphinstantiatewithflags graphinstantiatewithparams graphcreate
graphdestroy graphexecdestroy memcreate memmap memunmap memrelease memaddressreserve memaddressfree
memsetaccess memretainallocationhandle mempoolcreate mempooldestroy mempooltrimto registerfatbinary
registerfatbinaryend registerfunction registervar unregisterfatbinary getstreampriorityrange
devicegetstreampriorityrange ipcopenmemhandle ipcclosememhandle ipcgetmemhandle deviceenablepeeraccess
devicecanaccesspeer deviceset limit devicesetlimit devicesetcacheconfig""".split()
RUNTIME_TABLE: dict[str, int] = {**{n.lower(): RT_SETUP for n in _SETUP}, **{n: RT_SYNC for n in _SYNC},
                                 **{n: RT_ENQUEUE for n in _ENQUEUE}, **{n: RT_LAUNCH for n in _LAUNCH}}
_VENDOR = re.compile(r"^(cuda|cu|hip|hsa_|musa|mu|ze|ur)(?=[A-Z])")
_SUFFIX = re.compile(r"(_v\d+|_ptsz|_ptds|_spt)+$", re.I)
# names not in the table, by words, launches first ("ModuleLaunch" is a launch, not module loading)
_LAUNCH_WORDS = re.compile(r"launch|async$|enqueue|append", re.I)
_SYNC_WORDS = re.compile(r"synchroni[sz]e|queuefinish|eventwait|hostsynchron|^memcpy", re.I)
_SETUP_WORDS = re.compile(
    r"malloc|free|alloc|hostregister|hostunregister|module|library|getfunction|getkernel|memcreate|memmap|"
    r"memunmap|memrelease|memaddress|memsetaccess|getstreampriorityrange|getdeviceproperties|getdevicecount|"
    r"streamcreate|eventcreate|streamdestroy|eventdestroy|ctxcreate|primaryctx|^init$|funcgetattribute|"
    r"funcsetattribute|graphinstantiate|registerfatbinary|registerfunction|setdevice(?!flags)", re.I)
_NOT_SYNC = re.compile(r"async|streamwaitevent|query", re.I)
DATALOADER_PREFIX = "enumerate(DataLoader)"
ISSUE_LATENCY_NS = 30_000  # launch call return -> op start on an idle device: a few us (HTA's 30 us
# short-gap line leaves room for a slow driver); beyond it the issued op waits on the device side
CHUNK = 1 << 14  # gap pieces attributed at a time (bounds the temporaries)
NO_OP = "(no op: torch.cuda.synchronize(), an event wait or a library call)"
NO_HOST_OP = "no recorded op (Python)"

# Evidence floors: below any of these a window is "too little device work to judge" and no host
# cause is judged on it (GC026 says so). A verdict about why a device idles needs device work to
# idle between, and launch records to say when the host issued it.
MIN_DEVICE_OPS = 4  # device ops starting inside the window (a step of one large kernel is no pattern)
MIN_BUSY_US = 100.0  # device busy time inside the window
MIN_JOINED_SHARE = 0.5  # device ops joined to their launch call (correlation), share


def runtime_base(name: str) -> str:
    """A runtime call's name without vendor prefix and ABI suffix, lower case."""
    return _SUFFIX.sub("", _VENDOR.sub("", name)).lower()


def runtime_class(name: str) -> int:
    """RT_* of a runtime or driver call, from RUNTIME_TABLE; names not in it by their words."""
    base = runtime_base(name)
    known = RUNTIME_TABLE.get(base)
    if known is not None:
        return known
    if _LAUNCH_WORDS.search(base):
        return RT_LAUNCH
    if _SYNC_WORDS.search(base) and not _NOT_SYNC.search(base):
        return RT_SYNC
    if _SETUP_WORDS.search(base):
        return RT_SETUP
    return RT_OTHER


def is_graph_launch(name: str) -> bool:
    return runtime_base(name).startswith("graphlaunch")


def _sum_by(keys: np.ndarray, values: np.ndarray) -> tuple[list[int], list[int]]:
    """(distinct keys, the sum of values of each)."""
    k, inv = np.unique(keys, return_inverse=True)
    return k.tolist(), np.bincount(inv, weights=values).astype(np.int64).tolist()


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
        self.rt_cls = np.zeros(len(rt), dtype=np.int8)
        self.rt_graph = np.zeros(len(rt), dtype=bool)
        if len(rt):
            uniq = np.unique(rt.name_id)
            lut = np.zeros(int(uniq.max()) + 1, dtype=np.int8)
            glut = np.zeros(int(uniq.max()) + 1, dtype=bool)
            for nid in uniq.tolist():
                lut[nid] = runtime_class(names[nid])
                glut[nid] = is_graph_launch(names[nid])
            self.rt_cls = lut[rt.name_id]
            self.rt_graph = glut[rt.name_id]
        self.rt_s, self.rt_e = rt.start_ns, rt.start_ns + rt.dur_ns
        ops = t.ops
        # launch calls whose correlation no device op carries: the device records were dropped
        op_corr = ops.correlation[ops.correlation >= 0] if len(ops) else np.zeros(0, dtype=np.int64)
        self.rt_issues = self.rt_cls == RT_LAUNCH
        self.rt_matched = np.isin(rt.correlation, op_corr) & (rt.correlation >= 0) if len(rt) else self.rt_issues
        self.rt_order = np.argsort(self.rt_s, kind="stable")
        self.rt_s_sorted = self.rt_s[self.rt_order]
        c = t.cpu_ops
        self.main_tid = None
        if len(c):
            tids, inv = np.unique(c.tid, return_inverse=True)
            self.main_tid = int(tids[np.argmax(np.bincount(inv, weights=c.dur_ns))])
        elif len(rt):
            tids, inv = np.unique(rt.tid, return_inverse=True)
            self.main_tid = int(tids[np.argmax(np.bincount(inv, weights=rt.dur_ns))])
        self._threads: dict[int, _Thread] = {}
        self._op_cache: dict[tuple[int, int], str] = {}
        dl_ids = np.array([i for i, n in enumerate(names) if n.startswith(DATALOADER_PREFIX)], dtype=np.int64)
        self.dl_ids = dl_ids
        # the device's ops (rows of t.ops), sorted by start
        self.op_rows = np.flatnonzero(ops.device == device) if device is not None else np.zeros(0, dtype=np.int64)
        rows = self.op_rows
        o_s, o_e = ops.start_ns[rows], (ops.start_ns + ops.dur_ns)[rows]
        launch = ops.launch[rows]
        joined = launch >= 0
        if busy is None or busy.next_tag is None:
            l_start = np.full(len(rows), iv.NEG, dtype=np.int64)
            l_tid = np.full(len(rows), -1, dtype=np.int64)
            if len(rt):
                l_start[joined] = rt.start_ns[launch[joined]]
                l_tid[joined] = rt.tid[launch[joined]]
            busy = iv.Cover(o_s, o_e, l_start, 0, tags=l_tid)
        order = np.argsort(o_s, kind="stable")
        self.op_s_sorted = o_s[order]
        self.op_kernel_sorted = (ops.kind[rows] == KERNEL)[order]
        self.op_joined_sorted = joined[order]
        self.op_stream_sorted = ops.stream[rows][order]
        # collective kernels, and the device's other ops, as unions (exposed communication)
        comm_ids = np.array([i for i, n in enumerate(names) if is_comm_kernel(n)], dtype=np.int64)
        is_comm = np.isin(ops.name_id[rows], comm_ids) & (ops.kind[rows] == KERNEL)
        self.comm = iv.merge(o_s[is_comm], o_e[is_comm])
        self.compute = iv.merge(o_s[~is_comm], o_e[~is_comm])
        seg_s, seg_e, ntid = busy.s, busy.e, busy.next_tag
        assert ntid is not None  # a Cover made with tags (above, or the caller's) has them
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
        # the op closing each gap (row of t.ops, -1 after the last) and its launch call (row, -1)
        nidx = busy.next_index if len(rows) else np.zeros(0, dtype=np.int64)
        self.g_op = np.concatenate([rows[nidx], [-1]]).astype(np.int64)
        g_call = np.full(len(self.g_op), -1, dtype=np.int64)
        has = self.g_op >= 0
        g_call[has] = ops.launch[self.g_op[has]]
        self.g_call = g_call
        # the closing op was issued by a blocking call (cudaMemcpy, hipMemcpyWithStream): its
        # launch latency is the host waiting inside that call, not dispatch
        self.g_blocking = (g_call >= 0) & (self.rt_cls[np.maximum(g_call, 0)] == RT_SYNC) if len(rt) else \
            np.zeros(len(g_call), dtype=bool)
        # when the closing op's launch call returned (POS: unknown): issued, for a queued gap, means
        # the call had returned before the gap began
        self.g_issued = np.full(len(g_call), iv.POS, dtype=np.int64)
        if len(rt):
            self.g_issued[g_call >= 0] = self.rt_e[g_call[g_call >= 0]]
        # synchronising calls, by start, with the call reaching furthest among those started so far
        sync = np.flatnonzero(self.rt_cls == RT_SYNC)
        sorder = np.argsort(self.rt_s[sync], kind="stable")
        self.sync_rows = sync[sorder]
        ends = self.rt_e[self.sync_rows]
        self.sync_s = self.rt_s[self.sync_rows]
        self.sync_reach = np.maximum.accumulate(ends) if len(ends) else np.zeros(0, dtype=np.int64)

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
            c = t.cpu_ops
            cm = c.tid == tid
            # DataLoader ranges: user annotations, or cpu ops (`Operator`) in older Kineto
            ds, de = [], []
            rng = t.ranges
            if len(rng):
                sel = (~rng.on_device) & (rng.tid == tid) & np.isin(rng.name_id, self.dl_ids)
                ds.append(rng.start_ns[sel])
                de.append(rng.start_ns[sel] + rng.dur_ns[sel])
            if len(c):
                sel = cm & np.isin(c.name_id, self.dl_ids)
                ds.append(c.start_ns[sel])
                de.append(c.start_ns[sel] + c.dur_ns[sel])
            covers.append((np.concatenate(ds) if ds else np.zeros(0, np.int64),
                           np.concatenate(de) if de else np.zeros(0, np.int64)))
            launch = rt_m & ((self.rt_cls == RT_LAUNCH) | (self.rt_cls == RT_ENQUEUE))
            covers.append((np.concatenate([c.start_ns[cm], self.rt_s[launch]]),
                           np.concatenate([c.start_ns[cm] + c.dur_ns[cm], self.rt_e[launch]])))
            recorded = bool(cm.any()) or bool(len(rng) and ((rng.tid == tid) & ~rng.on_device).any())
            th = self._threads[tid] = _Thread(covers, PYTHON if recorded else UNRECORDED)
        return th

    def _outer_op(self, tid: int, at: int) -> str:
        """Name of the outermost cpu op on `tid` around time `at`, or NO_OP."""
        key = (tid, at)
        if key in self._op_cache:
            return self._op_cache[key]
        self._op_cache[key] = name = self._find_outer_op(tid, at)
        return name

    def _find_outer_op(self, tid: int, at: int) -> str:
        c = self.t.cpu_ops
        sel = np.flatnonzero((c.tid == tid) & (c.start_ns <= at) & (c.start_ns + c.dur_ns >= at))
        if not len(sel):
            return NO_OP
        best = sel[np.argmin(c.start_ns[sel])]
        return self.t.names[c.name_id[best]]

    def _what(self, tid: int, a: int, b: int) -> str:
        """What the host was in over most of [a, b): the runtime call, else the innermost cpu op,
        with the most overlap; NO_HOST_OP when nothing recorded covers it."""
        best, best_ov = NO_HOST_OP, 0
        rt, c = self.t.runtime, self.t.cpu_ops
        for tab, s, e in ((rt, self.rt_s, self.rt_e), (c, c.start_ns, c.start_ns + c.dur_ns)):
            if not len(tab):
                continue
            sel = np.flatnonzero((tab.tid == tid) & (s < b) & (e > a))
            if not len(sel):
                continue
            ov = np.minimum(e[sel], b) - np.maximum(s[sel], a)
            # the innermost of equally long overlaps: the latest start
            k = int(np.lexsort((s[sel], ov))[-1])
            if ov[k] > best_ov:
                best, best_ov = self.t.names[tab.name_id[sel[k]]], int(ov[k])
            if best_ov >= 0.5 * (b - a):
                break
        return best

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
            h.too_little = "an empty window"
            return h
        self._evidence(h, w0, w1)
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
        glens, largest = [], (0, -1, -1, -1, -1)
        for i in range(0, len(a), CHUNK):  # in chunks: a trace's whole window has ~1e5 gaps
            glen, big = self._attribute(h, out, a[i:i + CHUNK], b[i:i + CHUNK], gi[i:i + CHUNK])
            glens.append(glen)
            largest = max(largest, big)
        glen = np.concatenate(glens)
        h.host_gap_count = len(glen)
        h.short_host_gap_count = int((glen < self.short_ns).sum())
        h.host_gap_median_us = round(float(np.median(glen))) / 1e3 if len(glen) else None
        for code, attr in ((SYNC, "sync_us"), (SETUP, "setup_us"), (DATA, "data_us"), (DISPATCH, "dispatch_us"),
                           (PYTHON, "python_us"), (UNRECORDED, "unrecorded_us"), (QUEUED, "queued_us")):
            setattr(h, attr, int(out[code]) / 1e3)
        if largest[1] >= 0:
            self._largest(h, *largest)
        # the name maps largest first, ties by name: the same trace gives the same facts.json
        for attr in ("sync_calls", "sync_ops", "setup_calls", "queued_ops"):
            setattr(h, attr, dict(sorted(getattr(h, attr).items(), key=lambda kv: (-kv[1], kv[0]))))
        # the host work after drained queues that the device's own work could have hidden had the
        # host run ahead (no sync): at most the device work beyond the host's own work
        host_work = h.window_us - h.sync_call_us
        h.sync_exposed_us = h.sync_us + min(h.after_sync_us, max(h.busy_us - host_work, 0.0))
        return h

    def _evidence(self, h: HostIdle, w0: np.ndarray, w1: np.ndarray) -> None:
        """Counts the verdicts need, and the floors below which the window is too little to judge."""
        within = iv.index_inside(self.op_s_sorted, w0, w1)
        h.op_count = len(within)
        h.kernel_count = int(self.op_kernel_sorted[within].sum())
        h.joined_op_count = int(self.op_joined_sorted[within].sum())
        h.queued_streams = len(np.unique(self.op_stream_sorted[within]))
        r = self.rt_order[iv.index_inside(self.rt_s_sorted, w0, w1)]
        issues = r[self.rt_issues[r]]
        h.launch_call_count = len(issues)
        h.unmatched_launch_count = int((~self.rt_matched[issues]).sum())
        h.graph_launch_count = int(self.rt_graph[r].sum())
        sync = self.sync_rows
        if len(sync):
            s0, s1 = iv.merge(self.rt_s[sync], self.rt_e[sync])
            x0, x1 = iv.intersect(s0, s1, w0, w1)
            h.sync_call_us = int((x1 - x0).sum()) / 1e3
        c0, c1 = iv.intersect(*self.comm, w0, w1)
        if len(c0):
            x0, x1 = iv.intersect(c0, c1, *self.compute)
            h.comm_us = int((c1 - c0).sum()) / 1e3
            h.comm_exposed_us = h.comm_us - int((x1 - x0).sum()) / 1e3
        why = []
        if h.op_count < MIN_DEVICE_OPS:
            why.append(f"{h.op_count} device op(s) (at least {MIN_DEVICE_OPS} needed)")
        if h.busy_us < MIN_BUSY_US:
            why.append(f"{h.busy_us / 1e3:.3f} ms of device work (at least {MIN_BUSY_US / 1e3:g} ms needed)")
        if h.op_count and h.joined_op_count < MIN_JOINED_SHARE * h.op_count:
            why.append(f"{h.op_count - h.joined_op_count} of {h.op_count} device ops without a launch record, so "
                       "when the host issued them is unknown")
        h.too_little = "; ".join(why)

    def _attribute(self, h: HostIdle, out: np.ndarray, a: np.ndarray, b: np.ndarray,
                   gi: np.ndarray) -> tuple[np.ndarray, tuple[int, int, int, int, int]]:
        """Add the causes of the gap pieces [a, b) (of gaps gi) to `out` and `h`'s names; returns
        the lengths of the pieces the host was late for, and the largest of them as (length, a,
        cut, b, tid)."""
        g0 = self.g0[gi]
        L = self.g_launch[gi]
        # 1. queued: the closing op's launch call had returned before the gap began (a device-side
        # wait); a call still running when the device went idle is the host issuing (or, a blocking
        # copy, waiting inside it)
        queued = (L <= g0) & (self.g_issued[gi] <= g0)
        if queued.any():
            qlen = (b - a)[queued]
            out[QUEUED] += int(qlen.sum())
            ops = self.g_op[gi[queued]]
            names = self.t.names
            for nid, us in zip(*_sum_by(self.t.ops.name_id[np.maximum(ops, 0)], qlen)):
                nm = names[nid]
                h.queued_ops[nm] = h.queued_ops.get(nm, 0.0) + us / 1e3
        host = ~queued
        # 2. the closing op's launch latency, from its launch to the end of the piece: dispatch,
        # or the host waiting inside a blocking call (a synchronous copy) that issued it
        cut = np.clip(L, a, b)
        lat = np.where(host, b - cut, 0)
        blocking = self.g_blocking[gi] & host
        if blocking.any():
            out[SYNC] += int(lat[blocking].sum())
            for j in np.flatnonzero(blocking & (lat > 0)).tolist():
                self._name_sync(h, int(self.g_call[gi[j]]), int(lat[j]))
        # past the launch call's return plus an idle device's launch latency the op had been issued
        # and waited on something else (an event, another stream): queued, not dispatch
        issued = np.clip(self.g_issued[gi] + ISSUE_LATENCY_NS, cut, b)
        waited = np.where(host & ~blocking, b - issued, 0)
        out[QUEUED] += int(waited.sum())
        out[DISPATCH] += int((lat - waited)[~blocking].sum())
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
            parts = th.split(a[sel], cut[sel])
            out += parts
            if (cut[sel] > a[sel]).any():
                if parts[SETUP]:
                    self._setup_names(h, int(tid), a[sel], cut[sel])
                if parts[SYNC]:
                    self._sync_names(h, int(tid), a[sel], cut[sel], gi[sel])
        # host work after a drained queue: the gap opened while the host sat in a synchronising call
        if len(self.sync_s):
            k = np.searchsorted(self.sync_s, g0, side="right") - 1
            drained = host & (k >= 0) & (g0 > iv.NEG) & (self.sync_reach[np.maximum(k, 0)] >= g0)
            if drained.any():  # from the call's return to where the host's part of the gap ends
                end = np.where(blocking, cut, issued)
                after = end - np.maximum(a, np.minimum(self.sync_reach[np.maximum(k, 0)], end))
                h.after_sync_us += float(np.where(drained, np.maximum(after, 0), 0).sum()) / 1e3
        glen = (b - a)[host & (b > a)]
        big = (0, -1, -1, -1, -1)
        if host.any():
            j = int(np.flatnonzero(host)[np.argmax((b - a)[host])])
            big = (int(b[j] - a[j]), int(a[j]), int(cut[j]), int(b[j]), int(tids[j]))
        return glen, big

    def _largest(self, h: HostIdle, length: int, a: int, cut: int, b: int, tid: int) -> None:
        h.largest_gap_us = length / 1e3
        parts = np.zeros(7, dtype=np.int64)
        if tid < 0 and self.main_tid is not None:
            tid = self.main_tid
        if tid >= 0 or self.main_tid is not None:
            parts = self._thread(tid).split(np.array([a]), np.array([cut]))
        parts[DISPATCH] += (b - cut) if not self._blocking_at(b) else 0
        parts[SYNC] += (b - cut) if self._blocking_at(b) else 0
        code = int(np.argmax(parts))
        h.largest_gap_cause = CAUSE_NAMES[code]
        if tid < 0 and self.main_tid is None:
            h.largest_gap_cause, h.largest_gap_what = CAUSE_NAMES[UNRECORDED], NO_HOST_OP
            return
        if code == PYTHON or tid < 0:
            h.largest_gap_what = NO_HOST_OP
        elif code == DATA:
            h.largest_gap_what = DATALOADER_PREFIX
        else:
            h.largest_gap_what = self._what(tid, a, cut if cut > a else b)

    def _blocking_at(self, b: int) -> bool:
        k = int(np.searchsorted(self.g1, b, side="left"))
        return bool(k < len(self.g1) and self.g1[k] == b and self.g_blocking[k])

    def _name_sync(self, h: HostIdle, r: int, ns: int) -> None:
        rt = self.t.runtime
        us = ns / 1e3
        name = self.t.names[rt.name_id[r]]
        h.sync_calls[name] = h.sync_calls.get(name, 0.0) + us
        op = self._outer_op(int(rt.tid[r]), int(rt.start_ns[r]))
        h.sync_ops[op] = h.sync_ops.get(op, 0.0) + us
        h.sync_count += 1

    def _sync_names(self, h: HostIdle, tid: int, a: np.ndarray, b: np.ndarray, gi: np.ndarray) -> None:
        """Sync idle by call and by the op around it: each synchronising call's overlap with the
        host-wait parts of the gaps (a call nested in another counts only outside it)."""
        rt = self.t.runtime
        sel = np.flatnonzero((rt.tid == tid) & (self.rt_cls == RT_SYNC))
        if not len(sel):
            return
        sel = sel[np.argsort(self.rt_s[sel], kind="stable")]
        s, e = self.rt_s[sel].copy(), self.rt_e[sel]
        reach = np.maximum.accumulate(np.concatenate([[iv.NEG], e[:-1]]))
        s = np.maximum(s, reach)  # the part of each call outside the ones before it
        m0, m1 = iv.merge(a, b)
        cover = iv.Cover(m0, m1, np.full(len(m0), iv.NEG, dtype=np.int64), 0)
        ov = cover.overlap_each(s, np.maximum(e, s))
        for r, o in zip(sel[ov > 0].tolist(), ov[ov > 0].tolist()):
            self._name_sync(h, r, o)
            h.sync_count -= 1
        # drained gaps: those whose host-wait part met a synchronising call
        pc = iv.Cover(s, np.maximum(e, s), np.full(len(s), iv.NEG, dtype=np.int64), 0)
        hit = pc.overlap_each(a, b) > 0
        h.sync_count += _distinct_sorted(np.sort(gi[hit]))

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

    def device_work_in(self, w0: int, w1: int) -> bool:
        """Whether a device op starts, or a launch call is made, inside [w0, w1)."""
        a, b = np.array([w0]), np.array([w1])
        if len(iv.index_inside(self.op_s_sorted, a, b)):
            return True
        calls = self.rt_order[iv.index_inside(self.rt_s_sorted, a, b)]
        return bool(self.rt_issues[calls].any())

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
    # steps with no device op in them (the trailing range after the last prof.step(), a step of
    # another phase) are no steady state and no yardstick for warm-up: left out, and said so
    empty = [n for n, (a, b) in steps.items() if not an.device_work_in(a, b)]
    if len(empty) < len(steps) and len(an.op_s_sorted):
        steps = {n: ab for n, ab in steps.items() if n not in empty}
    else:
        empty = []
    nums = list(steps)
    durs = [max(b - a, 1) for a, b in steps.values()]
    shares = [an.setup_time(a, b) / d for (a, b), d in zip(steps.values(), durs)]
    warm: list[int] = []
    why = [f"step {n}: no device work (left out)" for n in empty]
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
