"""report.md section of the jitter probe: the runs, their first-step gradient differences and
their losses per step, beside the GC030 verdicts."""
from __future__ import annotations

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.jitter import JitterFacts, JitterRun
from gcdoctor.report.format import md_table

MARK = {"fired": {"critical": "PROBLEM", "warning": "WARNING", "info": "note"}, "passed": "ok",
        "inconclusive": "?"}


def _g(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else ("0" if x == 0 else f"{x:.{digits}e}")


def _yes(flag: bool | None) -> str:
    return "—" if flag is None else ("yes" if flag else "no")


def _settings(r: JitterRun) -> str:
    parts = ["GC" if r.checkpointing else "no GC"]
    if r.checkpointing and r.preserve_rng_state is False:
        parts.append("preserve_rng_state=False")
    if r.dropout:
        parts.append(f"dropout {r.dropout:g}")
    if r.deterministic:
        parts.append("deterministic")
    if r.micro_batches > 1:
        parts.append(f"{r.micro_batches} micro-batches")
    return ", ".join(parts)


def _verdict_lines(verdicts: list[Verdict]) -> list[str]:
    lines = []
    def order(v: Verdict) -> tuple[int, str]:  # the main comparison, then dropout, then the control
        return (0 if v.subject == "checkpointing on vs off" else 2 if "control" in v.subject else 1, v.subject)

    for v in sorted((v for v in verdicts if v.code == "GC030"), key=order):
        mark = MARK[v.status][v.severity] if v.status == "fired" else MARK.get(v.status, v.status)
        lines.append(f"- **{v.subject or 'loss jitter'}** [{mark}]: {v.headline}")
    return lines


def _comparison_rows(j: JitterFacts) -> list[list[str]]:
    rows = []
    for c in j.comparisons:
        worst = max(c.grad_rel_l2_by_group.items(), key=lambda kv: kv[1], default=None)
        worst = worst if worst and worst[1] > 0 else None
        differing = "—" if not c.grad_elements else f"{100.0 * (c.grad_elements_differing or 0) / c.grad_elements:.2g}%"
        first = "—" if c.first_loss_diff_step is None else str(c.first_loss_diff_step + 1)
        rows.append([c.run, c.reference, c.role, _yes(c.loss_step0_equal), _yes(c.grads_bitwise_equal),
                     _g(c.grad_rel_l2), "—" if worst is None else f"{worst[0]} {_g(worst[1])}", differing,
                     _g(c.grad_max_abs_diff), _g(max(c.loss_abs_diff) if c.loss_abs_diff else None), first])
    return rows


def _loss_rows(j: JitterFacts) -> list[list[str]]:
    """References show their losses; compared runs show |d loss| against their reference."""
    refs = {c.run: c.reference for c in j.comparisons}
    rows = []
    for r in j.runs:
        ref = j.run(refs[r.name]) if r.name in refs else None
        cells = []
        for i, loss in enumerate(r.losses):
            if ref is None or i >= len(ref.losses):
                cells.append(f"{loss:.6f}")
            else:
                d = abs(loss - ref.losses[i])
                cells.append("=" if d == 0 else f"Δ {d:.1e}")
        rows.append([r.name, _settings(r), refs.get(r.name, "(reference)")] + cells + [""] * (j.steps - len(cells)))
    return rows


def jitter_section(facts: Facts, verdicts: list[Verdict]) -> str:
    j = facts.jitter
    if j is None:
        return ""
    lines = ["## Loss jitter: checkpointing on vs off", "",
             f"{j.steps} optimizer steps per run ({j.optimizer}, lr {j.lr:g}), batch {j.batch_size} x seq {j.seq_len}, "
             f"{j.dtype} (unit roundoff {j.unit_roundoff:.3g}), {j.n_layers} layers. Every run starts from the same "
             "weights, the same seed and the same token batch per step. Gradients are compared after the first "
             "backward, before any update: rel-L2 = ||g - g_ref|| / ||g_ref|| over all parameters, and for the "
             "layer group (embed, layer<i>, final_norm, lm_head) that differs most. "
             f"Checkpointing: `{j.gc_api or 'not run'}`.", ""]
    lines += _verdict_lines(verdicts)
    if j.comparisons:
        lines += ["", "First step against the reference run:", "",
                  md_table(["run", "vs", "role", "loss equal", "grads equal", "grad rel-L2", "worst group rel-L2",
                            "elements differing", "max abs Δgrad", "max abs Δloss", "first step with Δloss"],
                           _comparison_rows(j))]
    if j.runs:
        lines += ["", "Loss per step (references: the loss; the others: |Δ| against their reference, '=' when "
                      "bitwise equal):", "",
                  md_table(["run", "settings", "vs"] + [f"step {i + 1}" for i in range(j.steps)], _loss_rows(j))]
    warned = [(r.name, w) for r in j.runs for w in r.warnings]
    if warned:
        lines += ["", "Warnings raised during the runs (deterministic mode names the non-deterministic ops):", ""]
        lines += [f"- {name}: {w}" for name, w in warned]
    if j.notes:
        lines += [""] + [f"- {n}" for n in j.notes]
    return "\n".join(lines)
