"""report.html: the loss-jitter section (loss curves of runs that differ only in checkpointing, and
their differences against the run-to-run noise of the same configuration)."""
from __future__ import annotations

from typing import Any

from gcdoctor.facts import Facts
from gcdoctor.report.html_parts import bullets, figure, figures, fnum, generic_block, section, table
from gcdoctor.report.svg import Series, colors_for, line_plot


def _sci(x: float | None) -> str:
    if x is None:
        return "—"
    return "0" if x == 0 else f"{x:.3g}"


def _yes(x: bool | None) -> str:
    return "—" if x is None else ("yes" if x else "no")


def _loss_plot(runs: list[Any]) -> str:
    colors = colors_for([r.name for r in runs])
    series = [Series(r.name, [(i + 1, float(x)) for i, x in enumerate(r.losses)], colors[r.name],
                     dashed=not r.checkpointing, markers=len(r.losses) <= 30)
              for i, r in enumerate(runs) if r.losses]
    return line_plot(series, title="Loss per step of every jitter run", x_label="optimizer step", y_label="loss",
                     y_from_zero=False)


def _diff_plot(comparisons: list[Any]) -> str:
    colors = colors_for([c.name for c in comparisons])
    series = [Series(f"{c.run} vs {c.reference}", [(i + 1, float(x)) for i, x in enumerate(c.loss_abs_diff)],
                     colors[c.name], dashed=c.role in ("baseline", "dropout_baseline"),
                     markers=len(c.loss_abs_diff) <= 30)
              for i, c in enumerate(comparisons) if c.loss_abs_diff]
    return line_plot(series, title="Loss difference against the reference run", x_label="optimizer step",
                     y_label="|loss - reference loss|", x_fmt=lambda x: f"{x:g}", y_fmt=_sci)


def jitter_section(facts: Facts) -> str:
    j = facts.jitter
    if j is None:
        return ""
    runs = getattr(j, "runs", None)
    if runs is None:  # a shape this writer does not know
        return section("jitter", "Loss jitter", generic_block(j, "jitter", facts.unavailable))
    if not runs:
        return ""
    comparisons = list(getattr(j, "comparisons", []))
    eps = f"; {j.dtype} eps {_sci(j.dtype_eps)}, unit roundoff {_sci(j.unit_roundoff)}" if j.dtype_eps else ""
    lead = (f"{len(runs)} runs of {j.steps} optimizer steps from the same weights, seed {j.seed} and token "
            f"batches (batch {j.batch_size}, sequence {j.seq_len}, {j.n_layers} layers, {j.optimizer}"
            f"{', lr ' + format(j.lr, 'g') if j.lr else ''}){eps}. Gradients are compared after the first "
            "backward, before any weight changed; dashed: the run-to-run baseline.")
    plots = figures(
        figure(_loss_plot(runs), "Dashed: checkpointing off. Curves that part beyond the baseline's spread point at "
                                 "the recomputation."),
        figure(_diff_plot(comparisons), "Absolute loss difference per step; 0 means bitwise equal."))
    crows = [[c.name, c.role, f"{c.run} vs {c.reference}", _yes(c.losses_equal),
              "—" if c.first_loss_diff_step is None else c.first_loss_diff_step + 1,
              _sci(max(c.loss_abs_diff) if c.loss_abs_diff else None), _yes(c.grads_bitwise_equal),
              _sci(c.grad_rel_l2), _sci(c.grad_max_abs_diff),
              "—" if c.grad_elements_differing is None or not c.grad_elements else
              f"{c.grad_elements_differing:,} of {c.grad_elements:,}", c.baseline or ""]
             for c in comparisons]
    ctable = table(["comparison", "role", "runs", "losses bitwise equal", "first differing step", "max |Δloss|",
                    "grads bitwise equal", "grad rel. L2", "grad max |Δ|", "elements differing", "noise floor"],
                   crows, numeric_from=3, ids=[f"comparison:{c.name}" for c in comparisons]) if comparisons else ""
    rrows = [[r.name, _yes(r.checkpointing), _yes(r.preserve_rng_state), fnum(r.dropout, 2), _yes(r.deterministic),
              r.micro_batches, _sci(r.losses[-1]) if r.losses else "—",
              fnum(sorted(r.step_ms)[len(r.step_ms) // 2]) if r.step_ms else "—", r.error or ""] for r in runs]
    rtable = table(["run", "checkpointing", "preserve RNG", "dropout", "deterministic", "micro-batches",
                    "final loss", "median step ms", "error"], rrows, numeric_from=1,
                   ids=[f"run:{r.name}" for r in runs], drop_empty=True)
    notes = list(j.notes) + [f"{r.name}: {w}" for r in runs for w in r.warnings]
    return section("jitter", "Loss jitter from recomputation", plots, ctable, rtable, bullets(notes, "notes"),
                   lead=lead)
