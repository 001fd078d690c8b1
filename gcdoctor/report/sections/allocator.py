"""Sections: the boundary in fresh processes per allocator setting, and the optimizer step's peak."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.report.model import Column, Key, Section, Table

ALLOC_TEXT = {"default": "default caching allocator", "expandable": "expandable_segments:True"}
OPT_TEXT = {"adamw": "AdamW (foreach)", "adamw-forloop": "AdamW(foreach=False)", "adamw-fused": "AdamW(fused=True)"}


def _boundary_rows(facts: Facts) -> list[list]:
    al = facts.allocator
    if al is None:
        return []
    return [[b.variant, ALLOC_TEXT.get(b.allocator, b.allocator), b.largest_batch, b.first_oom_batch,
             b.first_oom_kind, b.tokens_per_s, b.step_ms, b.peak_allocated_bytes, b.peak_reserved_bytes,
             b.predicted, b.in_process, b.order_moves_boundary if b.allocator == "default" else None]
            for b in al.boundaries]


def _run_rows(facts: Facts) -> list[list]:
    al = facts.allocator
    if al is None:
        return []
    return [[r.variant, ALLOC_TEXT.get(r.allocator, r.allocator), ", ".join(
        f"{m.batch_size} {'fits' if m.fits else 'OOM'}" for m in r.measurements) or None, r.wall_s, r.run_dir,
        r.error] for r in al.runs]


def _allocator_keys(facts: Facts) -> list[Key]:
    al = facts.allocator
    if al is None:
        return []
    out = []
    for v in ("no_gc", "gc"):
        b = al.reliable_batch(v)
        if b is not None:
            out.append(Key(f"reliable-{v}", f"largest batch {v} a fresh job can rely on (default allocator)", b, "int"))
        e = al.get(v, "expandable")
        if e is not None and e.largest_batch is not None:
            out.append(Key(f"expandable-{v}", f"largest batch {v} with expandable segments", e.largest_batch, "int"))
    if al.parent_device_bytes is not None:
        out.append(Key("parent", "held by gcdoctor's own process meanwhile", al.parent_device_bytes, "bytes"))
    return out


def _allocator_lead(facts: Facts) -> str:
    al = facts.allocator
    if al is None:
        return ""
    return (f"Each point is a new process whose first step is that batch (one warm-up, {al.steps} "
            "measured); PYTORCH_CUDA_ALLOC_CONF is read when CUDA initialises, so each setting needs its own.")


ALLOCATOR = Section(
    id="allocator", title="The boundary in fresh processes, per allocator setting", facts="allocator",
    present=lambda f: f.allocator is not None,
    lead=_allocator_lead,
    keys=_allocator_keys,
    tables=lambda f: [
        Table("boundaries", [Column("variant", key=True), Column("allocator", key=True), Column("largest batch", "int"),
                             Column("first OOM above", "int"), Column("its kind", "text"),
                             Column("throughput", "tok/s", compare=True), Column("step", "ms"),
                             Column("peak allocated", "bytes"), Column("peak reserved", "bytes"),
                             Column("predicted", "int"), Column("sweep (one process)", "int"),
                             Column("order moved it", "text")], _boundary_rows),
        Table("fresh-runs", [Column("variant", key=True), Column("allocator", key=True),
                             Column("batches", "text", key=True),
                             Column("process wall", "s"), Column("run directory", "text"), Column("error", "text")],
              _run_rows, title="The fresh processes", fold=True)],
    topics=("allocator",))


def _optimizer_rows(facts: Facts) -> list[list]:
    opt = facts.optimizer
    if opt is None:
        return []
    base = opt.get("adamw")
    rows = []
    for m in opt.measurements:
        change = (100.0 * (m.peak_allocated_bytes / base.peak_allocated_bytes - 1)
                  if base is not None and m.fits and m.peak_allocated_bytes and base.peak_allocated_bytes else None)
        dt = (100.0 * (m.step_ms_median / base.step_ms_median - 1)
              if base is not None and m.step_ms_median and base.step_ms_median else None)
        rows.append([OPT_TEXT.get(m.variant, m.variant), m.peak_allocated_bytes, change,
                     m.peak_optimizer_allocated_bytes, m.peak_fwd_bwd_allocated_bytes, m.step_ms_median, dt,
                     m.optimizer_ms_median, opt.predicted_peak_bytes.get(m.variant)])
    for name in opt.skipped:
        rows.append([OPT_TEXT.get(name, name), None, None, None, None, None, None, None,
                     opt.predicted_peak_bytes.get(name)])
    return rows


def _optimizer_lead(facts: Facts) -> str:
    opt = facts.optimizer
    if opt is None:
        return ""
    return f"Layer checkpointing at batch {opt.batch_size}; the same model, one AdamW each."


def _optimizer_notes(facts: Facts) -> list[str]:
    opt = facts.optimizer
    if opt is None:
        return []
    return [f"{OPT_TEXT.get(k, k)} not measured: {v}" for k, v in opt.skipped.items()]


OPTIMIZER = Section(
    id="optimizer", title="The optimizer step's peak: AdamW implementations", facts="optimizer",
    present=lambda f: f.optimizer is not None,
    lead=_optimizer_lead,
    tables=lambda f: [Table("optimizer", [
        Column("optimizer", key=True), Column("peak", "bytes", compare=True), Column("peak change", "pct+"),
        Column("optimizer-step peak", "bytes"), Column("forward/backward peak", "bytes"),
        Column("step", "ms", compare=True), Column("step change", "pct+"), Column("optimizer phase", "ms"),
        Column("predicted peak", "bytes")], _optimizer_rows)],
    notes=_optimizer_notes,
    topics=("optimizer",))
