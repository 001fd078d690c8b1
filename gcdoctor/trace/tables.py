"""Column tables of a loaded profiler trace: numpy arrays, nanosecond integer timestamps.

Compact on purpose (no per-event Python objects): a trace of hundreds of MB becomes a few tens of
MB of arrays. Names are stored once in `TraceTables.names` and referenced by `name_id`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

# DeviceOps.kind
KERNEL, MEMCPY, MEMSET = 0, 1, 2

# a collective's kernel (NCCL on NVIDIA, RCCL on AMD, MCCL on Moore Threads)
COMM_KERNEL = re.compile(r"^(nccl|rccl|mccl)|nccl(Dev)?Kernel", re.I)


def is_comm_kernel(name: str) -> bool:
    return bool(COMM_KERNEL.search(name))


KIND_NAMES = ("kernel", "memcpy", "memset")

# DeviceOps.copy_dir: the direction word in a memcpy name ("Memcpy HtoD (Pageable -> Device)")
COPY_DIRECTIONS = ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "other")
# DeviceOps.host_mem: where the host side of a copy lives, from the same name
HOST_MEM_NONE, HOST_MEM_PAGEABLE, HOST_MEM_PINNED, HOST_MEM_OTHER = 0, 1, 2, 3

_I64 = np.int64
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


def _empty(dtype: Any = _I64) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


@dataclass
class _Columns:
    """Base of the tables: equal-length numpy columns, reorderable as a whole."""

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))

    def take(self, order: np.ndarray) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name)[order])

    def to_frame(self, names: list[str] | None = None) -> Any:
        """A pandas DataFrame of the columns (pandas is imported only here), with a `name`
        column decoded from `name_id` when `names` is given."""
        import pandas as pd

        cols = {f.name: getattr(self, f.name) for f in fields(self)}
        if names is not None and "name_id" in cols:
            cols["name"] = np.asarray(names, dtype=object)[cols["name_id"]] if len(names) else cols["name_id"]
        return pd.DataFrame(cols)


@dataclass
class DeviceOps(_Columns):
    """Kernels, memcpys and memsets on the device timeline, sorted by start."""

    kind: np.ndarray = field(default_factory=lambda: _empty(np.int8))  # KERNEL | MEMCPY | MEMSET
    start_ns: np.ndarray = field(default_factory=_empty)
    dur_ns: np.ndarray = field(default_factory=_empty)
    device: np.ndarray = field(default_factory=_empty)  # trace pid: the device index
    stream: np.ndarray = field(default_factory=_empty)  # args.stream, else tid
    correlation: np.ndarray = field(default_factory=_empty)  # -1 when absent
    name_id: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    nbytes: np.ndarray = field(default_factory=_empty)  # args.bytes of copies/memsets, -1 unknown
    copy_dir: np.ndarray = field(default_factory=lambda: _empty(np.int8))  # COPY_DIRECTIONS index, -1
    host_mem: np.ndarray = field(default_factory=lambda: _empty(np.int8))  # HOST_MEM_*
    launch: np.ndarray = field(default_factory=_empty)  # row in RuntimeCalls, -1 when not joined

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


@dataclass
class RuntimeCalls(_Columns):
    """Host-side runtime and driver API calls (`*_runtime`, `*_driver`), sorted by start."""

    start_ns: np.ndarray = field(default_factory=_empty)
    dur_ns: np.ndarray = field(default_factory=_empty)
    tid: np.ndarray = field(default_factory=_empty)
    correlation: np.ndarray = field(default_factory=_empty)  # -1 when absent
    name_id: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    driver: np.ndarray = field(default_factory=lambda: _empty(np.bool_))  # a *_driver call

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


@dataclass
class CpuOps(_Columns):
    """`cpu_op` events (aten operators and the like), sorted by start."""

    start_ns: np.ndarray = field(default_factory=_empty)
    dur_ns: np.ndarray = field(default_factory=_empty)
    tid: np.ndarray = field(default_factory=_empty)
    name_id: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    # args "Sequence number": the autograd sequence number of an op that recorded a graph node
    # (forward ops with grad enabled, and autograd's own node ranges); -1 when absent
    seq: np.ndarray = field(default_factory=_empty)

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


@dataclass
class Ranges(_Columns):
    """Annotation ranges: `user_annotation` (host, record_function) and `gpu_user_annotation`
    (device, on_device=True; tid is then the stream), sorted by start."""

    start_ns: np.ndarray = field(default_factory=_empty)
    dur_ns: np.ndarray = field(default_factory=_empty)
    pid: np.ndarray = field(default_factory=_empty)
    tid: np.ndarray = field(default_factory=_empty)
    name_id: np.ndarray = field(default_factory=lambda: _empty(np.int32))
    on_device: np.ndarray = field(default_factory=lambda: _empty(np.bool_))

    @property
    def end_ns(self) -> np.ndarray:
        return self.start_ns + self.dur_ns


STEP_RUNTIME_SHARE = 0.1  # step ranges holding fewer of the runtime calls are not this work's steps


@dataclass
class TraceTables:
    """Everything gcdoctor reads from one trace file."""

    path: Path
    names: list[str]
    ops: DeviceOps
    runtime: RuntimeCalls
    cpu_ops: CpuOps
    ranges: Ranges
    metadata: dict[str, Any] = field(default_factory=dict)  # top-level keys other than traceEvents
    device_kind: str | None = None  # "cuda", "musa", ... from the runtime categories; None: CPU-only
    event_count: int = 0  # all entries of traceEvents
    skipped: dict[str, int] = field(default_factory=dict)  # complete events not tabled, by category
    dropped: dict[str, int] = field(default_factory=dict)  # events of a tabled category not placeable, by reason
    dropped_examples: dict[str, str] = field(default_factory=dict)  # reason -> the first such event
    profiler_ranges: int = 0  # cuda_profiler_range events (CUPTI range profiler: no per-kernel timing)
    # how it was read: processes (1, or 2 with a helper), helper_chunks, helper_private_peak_bytes
    load_info: dict[str, Any] = field(default_factory=dict)

    def dropped_note(self) -> str | None:
        """One sentence saying which events could not be placed on the timeline, or None."""
        if not self.dropped:
            return None
        parts = [f"{n:,} with {why} (first: {self.dropped_examples.get(why, '?')})"
                 for why, n in sorted(self.dropped.items(), key=lambda kv: -kv[1])]
        return (f"{sum(self.dropped.values()):,} events could not be placed on the timeline and were left out: "
                + "; ".join(parts))

    @property
    def device_properties(self) -> list[dict[str, Any]]:
        props = self.metadata.get("deviceProperties")
        return [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    def name(self, name_id: int) -> str:
        return self.names[name_id]

    def profiler_steps(self) -> dict[int, tuple[int, int]]:
        """{step number: (start_ns, end_ns)} of the `ProfilerStep#<n>` ranges (user_annotation;
        cpu_op in older torch releases). The first range of a number wins."""
        found: dict[int, tuple[int, int]] = {}
        for tab, mask in ((self.ranges, ~self.ranges.on_device), (self.cpu_ops, None)):
            if not len(tab):
                continue
            ids = [i for i, n in enumerate(self.names) if n.startswith("ProfilerStep#") and _STEP_NAME.match(n)]
            rows = np.flatnonzero(np.isin(tab.name_id, ids) & (mask if mask is not None else True))
            if tab is self.ranges and len(rows):
                rows = rows[self._own_process(rows)]
            for r in rows.tolist():
                n = int(self.names[tab.name_id[r]].split("#")[1])
                found.setdefault(n, (int(tab.start_ns[r]), int(tab.start_ns[r] + tab.dur_ns[r])))
            if found:
                break
        return dict(sorted(found.items()))

    def _own_process(self, rows: np.ndarray) -> np.ndarray:
        """Of step ranges (rows of `ranges`), those of the process that launches the device work:
        of the pids with a step on a thread that calls the runtime, the one whose steps hold the
        most runtime calls; none when no pid qualifies or its steps hold under a tenth of the calls
        (the steps are another process's, and bound nothing of this work). Without runtime calls
        (a CPU trace), the pid with the most step ranges."""
        pids = self.ranges.pid[rows]
        u, counts = np.unique(pids, return_counts=True)
        rt = self.runtime
        if not len(rt):
            return pids == u[np.argmax(counts)]
        launchers = np.unique(rt.tid)
        t = np.sort(rt.start_ns)
        held = []
        for p in u.tolist():
            sel = rows[pids == p]
            if not np.isin(self.ranges.tid[sel], launchers).any():
                held.append(-1)  # no step of this process sits on a thread that calls the runtime
                continue
            s0 = self.ranges.start_ns[sel]
            s1 = s0 + self.ranges.dur_ns[sel]
            held.append(int((np.searchsorted(t, s1, side="left") - np.searchsorted(t, s0, side="left")).clip(0).sum()))
        best = int(np.argmax(held))
        if held[best] < max(STEP_RUNTIME_SHARE * len(t), 1):
            return np.zeros(len(rows), dtype=bool)
        return pids == u[best]

    def span_ns(self) -> tuple[int, int] | None:
        """First start and last end over all tabled events, or None for an empty trace."""
        lo, hi = [], []
        for t in (self.ops, self.runtime, self.cpu_ops, self.ranges):
            if len(t):
                lo.append(int(t.start_ns.min()))
                hi.append(int((t.start_ns + t.dur_ns).max()))
        return (min(lo), max(hi)) if lo else None
