"""Section: loss jitter (runs that differ only in checkpointing, against the run-to-run noise)."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.report.model import Column, Section, Table
from gcdoctor.report.svg import Series, colors_for, line_plot


def _sci(x: float | None) -> str:
    return "—" if x is None else ("0" if x == 0 else f"{x:.3g}")


def _comparison_rows(facts: Facts) -> list[list]:
    j = facts.jitter
    if j is None:
        return []
    rows = []
    for c in j.comparisons:
        worst = max(c.grad_rel_l2_by_group.items(), key=lambda kv: kv[1], default=None)
        worst = worst if worst and worst[1] > 0 else None
        differing = (100.0 * (c.grad_elements_differing or 0) / c.grad_elements) if c.grad_elements else None
        rows.append([c.name, c.role, f"{c.run} vs {c.reference}", c.loss_step0_equal, c.losses_equal,
                     None if c.first_loss_diff_step is None else c.first_loss_diff_step + 1,
                     max(c.loss_abs_diff) if c.loss_abs_diff else None, c.grads_bitwise_equal, c.grad_rel_l2,
                     None if worst is None else f"{worst[0]} {_sci(worst[1])}", differing, c.grad_max_abs_diff,
                     c.baseline or None])
    return rows


def _run_rows(facts: Facts) -> list[list]:
    j = facts.jitter
    if j is None:
        return []
    return [[r.name, r.checkpointing, r.preserve_rng_state, r.dropout, r.deterministic, r.micro_batches,
             r.losses[-1] if r.losses else None, sorted(r.step_ms)[len(r.step_ms) // 2] if r.step_ms else None,
             r.error] for r in j.runs]


def _tables(facts: Facts) -> list[Table]:
    return [
        Table("jitter-comparisons", [Column("comparison", key=True), Column("role", "text"), Column("runs", "text"),
                                     Column("first loss equal", "text"), Column("losses bitwise equal", "text"),
                                     Column("first differing step", "int"), Column("max |Δloss|", "sci", compare=True),
                                     Column("grads bitwise equal", "text"), Column("grad rel-L2", "sci", compare=True),
                                     Column("worst group rel-L2", "text"), Column("elements differing", "pct"),
                                     Column("max |Δgrad|", "sci"), Column("noise floor", "text")],
              _comparison_rows, caption="Gradients after the first backward, before any update: rel-L2 = "
                                        "||g - g_ref|| / ||g_ref|| over all parameters and for the layer group "
                                        "(embed, layer<i>, final_norm, lm_head) that differs most."),
        Table("jitter-runs", [Column("run", key=True), Column("checkpointing", "text"), Column("preserve RNG", "text"),
                              Column("dropout", "text"), Column("deterministic", "text"), Column("micro-batches", "int"),
                              Column("final loss", "sci", compare=True), Column("median step", "ms"),
                              Column("error", "text")], _run_rows, title="Runs"),
    ]


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    j = facts.jitter
    if j is None:
        return []
    runs, comps = j.runs, j.comparisons
    colors = colors_for([r.name for r in runs])
    series = [Series(r.name, [(i + 1, float(x)) for i, x in enumerate(r.losses)], colors[r.name],
                     dashed=not r.checkpointing, markers=len(r.losses) <= 30) for r in runs if r.losses]
    loss = line_plot(series, title="Loss per step of every jitter run", x_label="optimizer step", y_label="loss",
                     y_from_zero=False)
    ccolors = colors_for([c.name for c in comps])
    dseries = [Series(f"{c.run} vs {c.reference}", [(i + 1, float(x)) for i, x in enumerate(c.loss_abs_diff)],
                      ccolors[c.name], dashed=c.role in ("baseline", "dropout_baseline"),
                      markers=len(c.loss_abs_diff) <= 30) for c in comps if c.loss_abs_diff]
    diff = line_plot(dseries, title="Loss difference against the reference run", x_label="optimizer step",
                     y_label="|loss - reference loss|", x_fmt=lambda x: f"{x:g}", y_fmt=_sci)
    return [(loss, "Dashed: checkpointing off. Curves that part beyond the baseline's spread point at the "
                   "recomputation."), (diff, "Absolute loss difference per step; 0 means bitwise equal.")]


def _lead(facts: Facts) -> str:
    j = facts.jitter
    if j is None:
        return ""
    eps = f"; {j.dtype} unit roundoff {_sci(j.unit_roundoff)}" if j.unit_roundoff else ""
    return (f"{len(j.runs)} runs of {j.steps} optimizer steps from the same weights, seed {j.seed} and token batches "
            f"(batch {j.batch_size}, sequence {j.seq_len}, {j.n_layers} layers, {j.optimizer}"
            f"{', lr ' + format(j.lr, 'g') if j.lr else ''}){eps}. Checkpointing: {j.gc_api or 'not run'}.")


def _notes(facts: Facts) -> list[str]:
    j = facts.jitter
    if j is None:
        return []
    return list(j.notes) + [f"{r.name}: {w}" for r in j.runs for w in r.warnings]


SECTION = Section(
    id="jitter", title="Loss jitter from recomputation", facts="jitter",
    present=lambda f: f.jitter is not None and bool(f.jitter.runs),
    lead=_lead, tables=_tables, plots=_plots,
    notes=_notes,
    topics=("jitter",))
