"""Section: the policy search at the full model and the recipe (its confirmation in a fresh process),
with the Pareto plot of peak memory against tokens/s."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts, PolicyFacts
from gcdoctor.recipe import Point, describe, dominated, extras_words, pick, points, policy_words
from gcdoctor.report.model import GIB, Column, Key, Section, Table
from gcdoctor.report.svg import Mark, Series, line_plot


def _devices(facts: Facts) -> int:
    return facts.distributed.world_size if facts.distributed is not None else 1


def _recipe(facts: Facts, pf: PolicyFacts):
    return pick(pf, seq_len=facts.settings.seq_len or 1, devices=_devices(facts))


def _check(c) -> str | None:
    ch = c.check
    if ch is None:
        return None
    share = (f"recompute {ch.recompute_share_pct:.0f}% of the forward" if ch.recompute_share_pct is not None
             else "")
    verdict = {True: "as claimed", False: "NOT as claimed", None: "not checked"}[ch.ok]
    return ", ".join(x for x in (verdict, share, ch.note) if x)


def _candidate_rows(facts: Facts) -> list[list]:
    pf = facts.policies
    if pf is None:
        return []
    rows = []
    for c in pf.candidates:
        fit = c.measurement if c.measurement is not None and c.measurement.fits else None
        rows.append([c.label or policy_words(c.setting.policy), ", ".join(extras_words(c.setting)) or "default",
                     c.predicted_largest_batch, c.largest_batch, fit.tokens_per_s if fit is not None else None,
                     fit.peak_allocated_bytes if fit is not None else None, c.predicted_peak_bytes, _check(c),
                     c.dropped, c.seconds])
    return rows


def _confirmation_rows(facts: Facts) -> list[list]:
    pf = facts.policies
    if pf is None:
        return []
    return [[describe(c.choice), c.choice.predicted_tokens_per_s, c.tokens_per_s, c.off_pct,
             c.choice.predicted_peak_bytes, c.peak_allocated_bytes,
             "rejected: " + c.rejected if c.rejected else ("out of memory" if c.fits is False else "accepted"),
             c.seconds] for c in pf.confirmations]


def _keys(facts: Facts) -> list[Key]:
    pf = facts.policies
    if pf is None:
        return []
    choice, conf, _ = _recipe(facts, pf)
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
    pf = facts.policies
    if pf is None:
        return []
    out = [Table("policies", [
        Column("policy", key=True), Column("with", "text", key=True), Column("predicted largest batch", "int"),
        Column("largest batch", "int", compare=True), Column("throughput", "tok/s", compare=True),
        Column("peak allocated", "bytes", compare=True), Column("predicted peak", "bytes"),
        Column("does what it claims", "text"), Column("dropped", "text"), Column("search", "s")],
        _candidate_rows, caption="Each setting measured once on the full model near the largest batch the memory "
                                 "model predicts for it.")]
    if pf.confirmations:
        out.append(Table("confirmations", [
            Column("setting", key=True), Column("predicted", "tok/s"), Column("confirmed", "tok/s", compare=True),
            Column("off", "pct+"), Column("predicted peak", "bytes"), Column("confirmed peak", "bytes"),
            Column("result", "text"), Column("process", "s")], _confirmation_rows,
            title="Confirmation in a fresh process (in the order tried)"))
    return out


def _gib_vs_tokens(pts: list[Point]) -> list[tuple[float, float]]:
    """(peak GiB, tokens/s) of each point that has a peak."""
    return [(p.peak_bytes / GIB, p.tokens_per_s) for p in pts if p.peak_bytes is not None]


def pareto_plot(facts: Facts) -> str:
    """Peak memory against tokens/s, every measured setting, the frontier apart, the recipe marked."""
    pf = facts.policies
    if pf is None:
        return ""
    pts = points(pf, dropped=True)
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
        series.append(Series("not dominated", _gib_vs_tokens(front), "#0072B2", labels=[label(p) for p in front]))
    if rest:
        series.append(Series("dominated or dropped", _gib_vs_tokens(rest), "#999999", labels=[label(p) for p in rest]))
    choice, conf, _ = _recipe(facts, pf)
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
    return list(facts.policies.notes) if facts.policies is not None else []


SECTION = Section(
    id="policies", title="The recipe: checkpointing policies at the full model", facts="policies",
    present=lambda f: f.policies is not None and bool(f.policies.candidates or f.policies.confirmations),
    lead=lambda f: ("Every policy applied for real to the whole model, crossed with the allocator, the AdamW "
                    "implementation and the loss; the recipe is the fastest whole setting for the target."),
    keys=_keys, tables=_tables, plots=_plots, notes=_notes)  # its verdict (GC007) leads the report already
