"""`gcdoctor analyze DIR` of a folder of per-rank traces (torch's tensorboard_trace_handler and
HTA's layout): facts of every rank under trace keys "rank/<r>", and a cross-rank summary (the
straggler rank, the spread of step time and of idle across ranks)."""
from __future__ import annotations

import re
import statistics
from pathlib import Path

import numpy as np

from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import RankRow, RankSummary, TraceKey, judged_window
from gcdoctor.trace import intervals as iv
from gcdoctor.trace.load import load_trace
from gcdoctor.trace.metrics import compute_metrics, primary_device
from gcdoctor.trace.to_facts import NOT_IN_A_TRACE, environment_from_trace

_TRACE_FILE = re.compile(r"\.json(\.gz)?$", re.I)
_RANK_NAME = re.compile(r"rank[-_]?(\d+)", re.I)
_COMM = re.compile(r"nccl|rccl|mccl|c10d|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|"
                   r"alltoall|broadcast", re.I)


def trace_files(path: Path) -> list[Path]:
    """Trace files directly in a folder (*.json, *.json.gz, *.pt.trace.json[.gz]), by name."""
    return sorted(p for p in path.iterdir() if p.is_file() and _TRACE_FILE.search(p.name)
                  and p.name != "facts.json" and not p.name.startswith("report"))


def _rank(tables, path: Path, index: int) -> int:
    info = tables.metadata.get("distributedInfo")
    r = info.get("rank") if isinstance(info, dict) else None
    if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 2**31:
        return r
    m = _RANK_NAME.search(path.name)
    return int(m.group(1)) if m else index


def facts_from_trace_dir(path: str | Path) -> Facts:
    """Facts of every rank's trace in the folder. Raises UserError when it holds none, when two
    files claim the same rank, or for an unreadable trace (naming the file)."""
    path = Path(path)
    files = trace_files(path)
    if not files:
        raise UserError(f"{path}: not a gcdoctor run directory (no facts.json) and no trace files (*.json, "
                        "*.json.gz) in it")
    facts = Facts()
    facts.settings.command = "analyze"
    facts.unavailable.update(NOT_IN_A_TRACE)
    rows: list[RankRow] = []
    seen: dict[int, str] = {}
    for i, f in enumerate(files):
        tables = load_trace(f)
        rank = _rank(tables, f, i)
        if rank in seen:
            raise UserError(f"{path}: {seen[rank]} and {f.name} are both rank {rank}")
        seen[rank] = f.name
        if i == 0:
            facts.environment = environment_from_trace(tables)
        run = TraceKey(f"rank/{rank}")
        metrics = compute_metrics(tables, source=f.name)
        for window, tm in metrics.items():
            facts.trace[str(run.at(window))] = tm
            if tm.device_unavailable and window == "all":
                facts.unavailable[f"trace.{run}"] = f"no device metrics: {tm.device_unavailable}"
        rows.append(_row(facts, run, rank, f.name, tables))
    facts.environment.device_count = len(rows)
    facts.ranks = _summary(sorted(rows, key=lambda r: r.rank))
    return facts


def _row(facts: Facts, run: TraceKey, rank: int, name: str, tables) -> RankRow:
    row = RankRow(rank=rank, source=name)
    jw = judged_window(facts.trace, run)
    if jw.idle is None or not jw.idle.window_us:
        row.note = jw.why
        return row
    h = jw.idle
    n = jw.steps or 1
    whole = facts.trace[str(run)]
    steps = tables.profiler_steps()
    spans = [steps[s] for s in whole.steady_steps if s in steps] if jw.steps else []
    row.steps = jw.steps or 0
    walls = [(b - a) / 1e6 for a, b in spans]  # ns -> ms
    row.step_ms = statistics.median(walls) if walls else h.window_us / 1e3
    row.idle_share = h.idle_us / h.window_us
    row.host_idle_share = h.host_us / h.window_us
    row.comm_ms = _comm_busy_us(tables, spans) / n / 1e3
    row.own_ms = (h.busy_us / n - row.comm_ms * 1e3 + h.host_us / n) / 1e3
    return row


def _comm_busy_us(tables, spans: list[tuple[int, int]]) -> float:
    """Device time of collective kernels (nccl, rccl, all_reduce, ...) inside the steady steps
    (the whole trace when it has no steps)."""
    dev = primary_device(tables)
    if dev is None:
        return 0.0
    if not spans:
        span = tables.span_ns()
        spans = [span] if span else []
    ops = tables.ops
    comm_ids = np.array([i for i, nm in enumerate(tables.names) if _COMM.search(nm)], dtype=np.int64)
    sel = (ops.device == dev) & np.isin(ops.name_id, comm_ids)
    if not sel.any() or not spans:
        return 0.0
    s, e = iv.merge(ops.start_ns[sel], ops.start_ns[sel] + ops.dur_ns[sel])
    w0, w1 = iv.merge(np.array([a for a, _ in spans], dtype=np.int64), np.array([b for _, b in spans], dtype=np.int64))
    a, b = iv.intersect(s, e, w0, w1)
    return float((b - a).sum()) / 1e3


def _summary(rows: list[RankRow]) -> RankSummary:
    s = RankSummary(ranks=rows)
    judged = [r for r in rows if r.step_ms is not None]
    if len(judged) < 2:
        s.note = "fewer than two ranks with device metrics: nothing to compare"
        return s
    steps = [r.step_ms for r in rows if r.step_ms is not None]
    med = statistics.median(steps)
    s.step_ms_median = med
    s.step_ms_spread_pct = 100 * (max(steps) - min(steps)) / med if med else None
    idle = [r.idle_share for r in judged if r.idle_share is not None]
    s.idle_share_spread = max(idle) - min(idle) if idle else None
    own = [(r.rank, r.own_ms) for r in judged if r.own_ms is not None]
    if own:
        worst_rank, worst_ms = max(own, key=lambda ro: ro[1])
        s.straggler_rank = worst_rank
        s.own_ms_median = statistics.median([ms for _, ms in own])
        s.straggler_own_ms = worst_ms
    return s
