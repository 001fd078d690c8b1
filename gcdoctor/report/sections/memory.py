"""Section: the analytic memory model, predicted against measured."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.report.model import GIB, Column, Key, Section, Table
from gcdoctor.report.svg import Bar, bar_plot, color_for


def _keys(facts: Facts) -> list[Key]:
    mm, s = facts.memory_model, facts.sweep
    if mm is None:
        return []
    out = [Key("model-states", "model states", mm.model_state_bytes, "bytes"),
           Key("params", "parameters", mm.param_bytes, "bytes"), Key("grads", "gradients", mm.grad_bytes, "bytes"),
           Key("optimizer-states", "optimizer states", mm.optimizer_state_bytes, "bytes"),
           Key("layer-per-token", "one decoder layer's activations, per token", mm.layer_activation_bytes_per_token,
               "int"),
           Key("ckpt-per-token", "one checkpointed layer, per token", mm.checkpoint_residue_bytes_per_token, "int"),
           Key("loss-per-token", "logits and loss, per token", mm.loss_block_bytes_per_token, "int")]
    if mm.capacity_bytes:
        out += [Key("capacity", "capacity", mm.capacity_bytes, "bytes"),
                Key("usable", "the allocator can reserve", mm.usable_bytes, "bytes")]
        if mm.context_bytes is not None:
            out.append(Key("context", f"outside the allocator ({mm.context_source})", mm.context_bytes, "bytes"))
        if mm.limit_bytes:
            out.append(Key("limit", "--memory-limit (reserved bytes)", mm.limit_bytes, "bytes"))
    for alloc, by in (mm.max_batch_by_allocator or {}).items():
        if alloc == "default":
            continue
        for v, b in by.items():
            out.append(Key(f"predicted-max-{v}-{alloc}", f"largest batch {v}, predicted with {alloc} segments"
                           if alloc == "expandable" else f"largest batch {v}, predicted ({alloc})",
                           b if b else "none", "text", predicted=True))
    for v, guess in (mm.max_batch or {}).items():
        measured = s.max_batch.get(v) if s is not None else None
        out.append(Key(f"predicted-max-{v}", f"largest batch {v}, predicted", guess if guess else "none", "text",
                       predicted=True))
        if s is not None and measured is not None:
            fixed = " (largest of the fixed --batch-sizes)" if not s.searched else ""
            out.append(Key(f"measured-max-{v}", f"largest batch {v}, measured", f"{measured}{fixed}", "text"))
    return out


def _rows(facts: Facts) -> list[list]:
    mm, s = facts.memory_model, facts.sweep
    if mm is None:
        return []
    rows = []
    for p in sorted(mm.points, key=lambda p: (p.variant != "no_gc", p.batch_size)):
        m = s.get(p.variant, p.batch_size) if s is not None else None
        measured = m.peak_allocated_bytes if m is not None else None
        err = 100.0 * (p.peak_bytes / measured - 1.0) if measured else None
        rows.append([p.variant, p.batch_size, p.peak_bytes, measured, err, p.peak_where or p.peak_phase,
                     p.activations_after_forward_bytes, m.activation_after_forward_bytes if m is not None else None,
                     p.fits, p.fits_expandable, p.peak_reserved_bytes, m.peak_reserved_bytes if m is not None else None])
    return rows


def _option_rows(facts: Facts) -> list[list]:
    mm = facts.memory_model
    if mm is None:
        return []
    return [[o.label, o.n_devices, o.device_state_bytes, o.peak_bytes_batch1_gc, o.max_batch_gc or None,
             o.max_batch_no_gc or None, o.settings, o.host or None] for o in mm.fit_options]


OPTION_COLUMNS = [Column("setup", key=True), Column("devices", "int"), Column("states on the device", "bytes"),
                  Column("peak, batch 1 with GC", "bytes", compare=True, predicted=True), Column("largest batch with GC", "int"),
                  Column("largest batch without", "int"), Column("how", "text"), Column("host memory", "text")]


def _tables(facts: Facts) -> list[Table]:
    mm = facts.memory_model
    if mm is None:
        return []
    out = [Table("memory-model", COLUMNS, _rows)]
    if mm.fit_options:
        out.append(Table("fit-options", OPTION_COLUMNS, _option_rows,
                         title="What would fit: other homes for the model states",
                         caption="Predicted by the memory model for this device (gcdoctor.model.memory.remedy); largest "
                                 "batches from the allocated peak."))
    return out


COLUMNS = [Column("variant", key=True), Column("batch", "int", key=True), Column("predicted peak", "bytes", compare=True,
                                                                     predicted=True),
           Column("measured peak", "bytes", compare=True), Column("error", "pct+", compare=True, predicted=True),
           Column("predicted peak at", "text"), Column("predicted activations after forward", "bytes"),
           Column("measured activations after forward", "bytes"), Column("fits (replayed)", "text"),
           Column("fits with expandable segments", "text"), Column("predicted reserved", "bytes"),
           Column("measured reserved", "bytes")]


def _breakdown_plot(point) -> str:
    parts = sorted(((k, v) for k, v in (point.peak_breakdown or {}).items() if v), key=lambda kv: -kv[1])
    if not parts:
        return ""
    bars = [Bar(k, v / GIB, color_for(point.variant, 0)) for k, v in parts]
    return bar_plot(bars, title=f"What fills the predicted peak: {point.variant}, batch {point.batch_size}",
                    x_label="GiB live at the peak", x_fmt=lambda x: f"{x:.3g}")


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    mm = facts.memory_model
    if mm is None:
        return []
    points = mm.points
    largest = [max((p for p in points if p.variant == v), key=lambda p: p.batch_size)
               for v in dict.fromkeys(p.variant for p in points)]
    return [(_breakdown_plot(p), f"{p.variant}, batch {p.batch_size}: live memory by category at the predicted "
                                 f"peak ({p.peak_where or p.peak_phase}).") for p in largest]


def _lead(facts: Facts) -> str:
    mm = facts.memory_model
    if mm is None:
        return ""
    return (f"{mm.model} ({'exact shapes' if mm.exact else 'approximated by a Llama layer'}), {mm.dtype}, "
            f"{mm.optimizer}, sequence {mm.seq_len}, {mm.device} semantics: what the shapes predict, held against "
            "what was measured.")


SECTION = Section(
    id="memory-model", title="Analytic memory model: predicted versus measured", facts="memory_model",
    present=lambda f: f.memory_model is not None and getattr(f.memory_model, "points", None) is not None,
    lead=_lead, keys=_keys, tables=_tables, plots=_plots,
    notes=lambda f: list(f.memory_model.notes) if f.memory_model is not None else [], topics=("memory",))
