"""Communication in one rank's trace of a sharded step: the collectives the host issued (by kind,
and by where: forward, backward, recompute, optimizer step), and on a device trace the time the
communication kernels ran, how much of it no compute kernel hid (exposed), and how much ran
beside the recompute. Exact definitions: docs/distributed.md. No torch here.

Collectives are counted on the host, from torch's c10d operators (`c10d::_allgather_base_`,
`c10d::reduce_scatter_tensor_coalesced_`, ...; functional collectives `_c10d_functional::*`), which
every process-group backend (NCCL, gloo) and every caller (FSDP2, DeepSpeed, DDP) goes through; a
c10d operator nested inside another on the same thread is part of that call. Device time comes
from the communication kernels (NCCL's `ncclDevKernel_*`, RCCL, MCCL).
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

from gcdoctor.facts.distributed import KINDS, PHASES, CollectiveCount, CommMetrics
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.metrics import primary_device
from gcdoctor.trace.tables import KERNEL, TraceTables, is_comm_kernel

LABEL = "gcdoctor/"
_COLLECTIVE_OP = re.compile(r"^(c10d|_c10d_functional)::")
_NOT_A_CALL = re.compile(r"wait|work|barrier_", re.I)  # waits on a call, not calls
_KIND = (("all_gather", re.compile(r"all_?gather", re.I)), ("reduce_scatter", re.compile(r"reduce_?scatter", re.I)),
         ("all_reduce", re.compile(r"all_?reduce", re.I)), ("broadcast", re.compile(r"broadcast", re.I)))
_HOST_COMM_RANGE = re.compile(r"^gloo:")


def collective_kind(name: str) -> str:
    for kind, pattern in _KIND:
        if pattern.search(name):
            return kind
    return "other"


def _label_intervals(t: TraceTables, exact: str | None = None, prefix: str | None = None,
                     with_tid: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host intervals (start, end, tid) of the gcdoctor label ranges named `exact` or `prefix*`."""
    ids = [i for i, n in enumerate(t.names) if (exact is not None and n == exact)
           or (prefix is not None and n.startswith(prefix))]
    r = t.ranges
    sel = np.isin(r.name_id, ids) & ~r.on_device if len(r) else np.zeros(0, dtype=bool)
    return r.start_ns[sel], (r.start_ns + r.dur_ns)[sel], r.tid[sel]


def _inside(ts: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    m0, m1 = iv.merge(s, e)
    return iv.inside(ts, m0, m1)


def _host_collectives(t: TraceTables) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(start, end, tid, kind) of the outermost collective calls on each thread."""
    ops = t.cpu_ops
    ids = [i for i, n in enumerate(t.names) if _COLLECTIVE_OP.match(n) and not _NOT_A_CALL.search(n.split("::", 1)[1])]
    sel = np.flatnonzero(np.isin(ops.name_id, ids)) if len(ops) else np.zeros(0, dtype=np.int64)
    s, e, tid = ops.start_ns[sel], (ops.start_ns + ops.dur_ns)[sel], ops.tid[sel]
    keep = np.ones(len(sel), dtype=bool)
    for th in np.unique(tid).tolist():  # nested calls (a coalesced call's parts) belong to the outer one
        rows = np.flatnonzero(tid == th)
        order = rows[np.argsort(s[rows], kind="stable")]
        reach = -1
        for r in order.tolist():
            if s[r] < reach:
                keep[r] = False
            else:
                reach = e[r]
    kinds = [collective_kind(t.names[ops.name_id[i]]) for i in sel[keep].tolist()]
    return s[keep], e[keep], tid[keep], kinds


def comm_metrics(t: TraceTables, key: str, rank: int, source: str = "") -> CommMetrics:
    """The communication of one rank's trace of profiled steps (labelled by gcdoctor's capture)."""
    cm = CommMetrics(key=key, rank=rank, source=source)
    f0, f1, _ = _label_intervals(t, exact=LABEL + "forward")
    b0, b1, _ = _label_intervals(t, exact=LABEL + "backward")
    o0, o1, _ = _label_intervals(t, exact=LABEL + "optimizer")
    r0, r1, rtid = _label_intervals(t, prefix=LABEL + "recompute/")
    steps = len(f0) or len(t.profiler_steps()) or 1
    cm.steps = steps
    if len(f0) and len(o1):
        cm.step_us = float(o1.max() - f0.min()) / 1e3 / steps

    s, e, tid, kinds = _host_collectives(t)
    phase = np.full(len(s), "other", dtype=object)
    for name, (a0, a1) in (("optimizer", (o0, o1)), ("backward", (b0, b1)), ("forward", (f0, f1))):
        phase[_inside(s, a0, a1)] = name
    for th in np.unique(rtid).tolist():  # the recompute's own thread (autograd's, on a device)
        on = tid == th
        phase[on & _inside(s, r0[rtid == th], r1[rtid == th])] = "recompute"
    counts: Counter[tuple[str, str]] = Counter(zip(kinds, phase.tolist()))
    for kind in KINDS:
        by = {p: counts[(kind, p)] / steps for p in PHASES if counts[(kind, p)]}
        if by:
            cm.collectives[kind] = CollectiveCount(kind, sum(by.values()), by)

    h0, h1, _ = _label_intervals(t, prefix="gloo:")
    if len(h0):
        cm.host_comm_us = iv.total(h0, h1) / 1e3 / steps

    dev = primary_device(t)
    if dev is None:
        cm.device_unavailable = ("a CPU trace: the collectives ran on the host (gloo), so no device timeline says "
                                 "what they overlapped")
        return cm
    ops = t.ops
    on_dev = (ops.device == dev) & (ops.kind == KERNEL)
    names = np.asarray(t.names, dtype=object)
    comm_ids = [i for i, n in enumerate(t.names) if is_comm_kernel(n)]
    is_comm = np.isin(ops.name_id, comm_ids)
    cs, ce = ops.start_ns[on_dev & is_comm], (ops.start_ns + ops.dur_ns)[on_dev & is_comm]
    ks, ke = ops.start_ns[on_dev & ~is_comm], (ops.start_ns + ops.dur_ns)[on_dev & ~is_comm]
    comm0, comm1 = iv.merge(cs, ce)
    comp0, comp1 = iv.merge(ks, ke)
    mine = ops.device == dev
    cm.busy_us = iv.total(ops.start_ns[mine], (ops.start_ns + ops.dur_ns)[mine]) / 1e3 / steps
    cm.comm_kernel_count = round(len(cs) / steps, 2)
    comm_busy = int((comm1 - comm0).sum())
    hidden0, hidden1 = iv.intersect(comm0, comm1, comp0, comp1)
    hidden = int((hidden1 - hidden0).sum())
    cm.comm_busy_us = comm_busy / 1e3 / steps
    cm.comm_overlap_compute_us = hidden / 1e3 / steps
    cm.comm_exposed_us = (comm_busy - hidden) / 1e3 / steps
    cm.comm_kernel_names = [n for n, _ in Counter(names[ops.name_id[on_dev & is_comm]].tolist()).most_common(5)]
    # the recompute's kernels: launched (by correlation) from inside a recompute range
    launch = ops.launch
    joined = on_dev & ~is_comm & (launch >= 0)
    if len(r0) and joined.any() and len(t.runtime):
        lt = t.runtime.start_ns[launch[joined]]
        rec = _inside(lt, r0, r1)
        rs, re_ = ops.start_ns[joined][rec], (ops.start_ns + ops.dur_ns)[joined][rec]
        rec0, rec1 = iv.merge(rs, re_)
        cm.recompute_busy_us = float((rec1 - rec0).sum()) / 1e3 / steps
        x0, x1 = iv.intersect(comm0, comm1, rec0, rec1)
        cm.comm_overlap_recompute_us = float((x1 - x0).sum()) / 1e3 / steps
    elif not len(r0):
        cm.recompute_busy_us = 0.0
        cm.comm_overlap_recompute_us = 0.0
    return cm
