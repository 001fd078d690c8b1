"""Section: the policy search at the full model and the recipe (its confirmation in a fresh process),
with the Pareto plot of peak memory against tokens/s."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.recipe import describe, dominated, extras_words, pick, points, policy_words
from gcdoctor.report.model import GIB, Column, Key, Section, Table
from gcdoctor.report.svg import Mark, Series, line_plot


def _devices(facts: Facts) -> int:
    return facts.distributed.world_size if facts.distributed is not None else 1


def _recipe(facts: Facts):
    return pick(facts.policies, seq_len=facts.settings.seq_len or 1, devices=_devices(facts))


def _check(c) -> str | None:
    ch = c.check
    if ch is None:
        return None
    share = (f"recompute {ch.recompute_share_pct:.0f}% of the forward" if ch.recompute_share_pct is not None
             else "")
    verdict = {True: "as claimed", False: "NOT as claimed", None: "not checked"}[ch.ok]
    return ", ".join(x for x in (verdict, share, ch.note) if x)


def _candidate_rows(facts: Facts) -> list[list]:
    rows = []
    for c in facts.policies.candidates:
        m = c.measurement
        fits = m is not None and m.fits
        rows.append([c.label or policy_words(c.setting.policy), ", ".join(extras_words(c.setting)) or "default",
                     c.predicted_largest_batch, c.largest_batch, m.tokens_per_s if fits else None,
                     m.peak_allocated_bytes if fits else None, c.predicted_peak_bytes, _check(c), c.dropped,
                     c.seconds])
    return rows


def _confirmation_rows(facts: Facts) -> list[list]:
    return [[describe(c.choice), c.choice.predicted_tokens_per_s, c.tokens_per_s, c.off_pct,
             c.choice.predicted_peak_bytes, c.peak_allocated_bytes,
             "rejected: " + c.rejected if c.rejected else ("out of memory" if c.fits is False else "accepted"),
             c.seconds] for c in facts.policies.confirmations]


def _keys(facts: Facts) -> list[Key]:
    choice, conf, _ = _recipe(facts)
    pf = facts.policies
    out = []
    if choice is not None:
        out.append(Key("recipe", "recipe", describe(choice), compare=True))
        out.append(Key("recipe-target", "for", choice.target, compare=False))
        out.append(Key("recipe-predicted", "predicted", choice.predicted_tokens_per_s, "tok/s"))
        if conf is not None and conf.rejected:
            out.append(Key("recipe-confirmed", "in a fresh process", f"{conf.tokens_per_s or 0:,.0f} tok/s, not "
                                                                     f"confirmed: {conf.rejected}", "text"))
        else:
            out.append(Key("recipe-confirmed", "confirmed in a fresh process",
                           conf.tokens_per_s if conf is not None else "unconfirmed",
                           "tok/s" if conf is not None else "text"))
    if pf.search_seconds is not None:
        out.append(Key("search-seconds", "policy search", pf.search_seconds, "s"))
    if pf.confirm_seconds is not None:
        out.append(Key("confirm-seconds", "confirmation", pf.confirm_seconds, "s"))
    return out


def _tables(facts: Facts) -> list[Table]:
    out = [Table("policies", [
        Column("policy", key=True), Column("with", "text", key=True), Column("predicted largest batch", "int"),
        Column("largest batch", "int", compare=True), Column("throughput", "tok/s", compare=True),
        Column("peak allocated", "bytes", compare=True), Column("predicted peak", "bytes"),
        Column("does what it claims", "text"), Column("dropped", "text"), Column("search", "s")],
        _candidate_rows, caption="Each setting measured once on the full model near the largest batch the memory "
                                 "model predicts for it.")]
    if facts.policies.confirmations:
        out.append(Table("confirmations", [
            Column("setting", key=True), Column("predicted", "tok/s"), Column("confirmed", "tok/s", compare=True),
            Column("off", "pct+"), Column("predicted peak", "bytes"), Column("confirmed peak", "bytes"),
            Column("result", "text"), Column("process", "s")], _confirmation_rows,
            title="Confirmation in a fresh process (in the order tried)"))
    return out


def pareto_plot(facts: Facts) -> str:
    """Peak memory against tokens/s, every measured setting, the frontier apart, the recipe marked."""
    pts = points(facts.policies, dropped=True)
    if not pts:
        return ""
    live = [p for p in pts if not p.candidate.dropped]
    front = [p for p in live if dominated(p, live) is None and p.peak_bytes is not None]
    rest = [p for p in pts if p not in front and p.peak_bytes is not None]

    def label(p) -> str:
        extras = "+".join({"fused AdamW": "fused", "expandable segments": "exp", "chunked loss": "chunk"}.get(e, e)
                          for e in extras_words(p.candidate.setting))
        return f"{p.candidate.setting.policy} b{p.batch}" + (f" {extras}" if extras else "")

    series = []
    if front:
        series.append(Series("not dominated", [(p.peak_bytes / GIB, p.tokens_per_s) for p in front], "#0072B2",
                             labels=[label(p) for p in front]))
    if rest:
        series.append(Series("dominated or dropped", [(p.peak_bytes / GIB, p.tokens_per_s)
                                                                   for p in rest], "#999999",
                             labels=[label(p) for p in rest]))
    choice, conf, _ = _recipe(facts)
    marks = []
    if choice is not None and choice.predicted_peak_bytes is not None and choice.predicted_tokens_per_s:
        said = (f"recipe, confirmed {conf.tokens_per_s:,.0f} tok/s" if conf is not None and conf.tokens_per_s
                and not conf.rejected else "recipe (unconfirmed)")
        marks.append(Mark(choice.predicted_peak_bytes / GIB, choice.predicted_tokens_per_s, said, "#D55E00", "dot",
                          dy=16))
    return line_plot(series, title="Peak memory against throughput, every measured setting",
                     x_label="peak allocated (GiB)", y_label="tokens/s", scatter=True, marks=marks,
                     y_from_zero=False)


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    svg = pareto_plot(facts)
    return [(svg, "Up and to the left is better. The recipe is the fastest setting for the target; the blue "
                  "points are those no other setting beats on both speed and memory.")] if svg else []


def _notes(facts: Facts) -> list[str]:
    return list(facts.policies.notes)


SECTION = Section(
    id="policies", title="The recipe: checkpointing policies at the full model", facts="policies",
    present=lambda f: f.policies is not None and bool(f.policies.candidates or f.policies.confirmations),
    lead=lambda f: ("Every policy applied for real to the whole model, crossed with the allocator, the AdamW "
                    "implementation and the loss; the recipe is the fastest whole setting for the target."),
    keys=_keys, tables=_tables, plots=_plots, notes=_notes)  # its verdict (GC007) leads the report already
