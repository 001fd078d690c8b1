"""`gcdoctor compare RUN_A RUN_B [--html OUT]`: two run directories side by side.

The metrics come from the report model: every section present in either run, its headline numbers and
the table columns marked `compare`, joined row by row on the table's key columns (a row measured in
one run only says so). How two values differ is said by their unit (a ratio for amounts, points for
percentages). Each run is re-judged with the rules of this gcdoctor and its own thresholds (from its
config.json), so a difference in verdicts is a difference in measurements, not in rule versions.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcdoctor.engine import evaluate
from gcdoctor.facts.views import memory_limit_bytes
from gcdoctor.types import EXPERIMENT, SEVERITIES, Verdict, severity_rank
from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.report.bottom_line import run_title
from gcdoctor.report.html_parts import Raw, figure, figures, kv, section, table
from gcdoctor.report.model import GIB, MIB, Section, Table, change, format_with_unit
from gcdoctor.report.regression import moved, prediction_changes, regressions
from gcdoctor.report import sections as report_sections
from gcdoctor.report.svg import Series, color_for, esc, line_plot

MARK = {s.name: s.mark for s in SEVERITIES}


@dataclass
class Run:
    path: Path
    facts: Facts
    verdicts: list[Verdict]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        f = self.facts
        return (f"{f.model.name if f.model else 'trace'} on {f.environment.device_name or '?'} "
                f"[{f.environment.device_kind or '?'}], {f.settings.started_at or 'time unknown'}")


def _thresholds(config: dict[str, Any]) -> dict[str, dict[str, float]]:
    th = config.get("thresholds")
    if not isinstance(th, dict):
        return {}
    return {str(k): {str(n): float(x) for n, x in v.items() if isinstance(x, (int, float)) and not isinstance(x, bool)}
            for k, v in th.items() if isinstance(v, dict)}


def load_run(path: str | Path) -> Run:
    """A recorded run directory: facts.json (required) and config.json (optional, its thresholds)."""
    from gcdoctor.recorded import FACTS_NAME, MISSING, RUN, TRACE, kind_of
    p = Path(path)
    kind = kind_of(p)
    if kind == MISSING:
        raise UserError(f"{p}: no such run directory")
    if kind == TRACE or not p.is_dir():
        raise UserError(f"{p}: not a gcdoctor run directory (a file; compare takes two run directories)")
    fp = p / FACTS_NAME
    if kind != RUN:
        raise UserError(f"{p}: not a gcdoctor run directory (no facts.json)")
    try:
        facts = Facts.load(fp)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UserError(f"{fp}: not a valid gcdoctor facts file ({type(exc).__name__}: {exc})") from None
    config: dict[str, Any] = {}
    try:
        data = json.loads((p / "config.json").read_text())
        config = data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        pass
    return Run(p, facts, evaluate(facts, overrides=_thresholds(config)), config)


# metrics -----------------------------------------------------------------------------------
@dataclass
class Row:
    """One compared metric: both values (raw) and their unit."""

    group: str
    label: str
    a: Any
    b: Any
    unit: str = "text"
    predicted: bool = False  # a prediction or what-if: a change is reported, never gated on

    def shown(self, v: Any) -> str:
        return format_with_unit(v, self.unit)

    @property
    def change(self) -> str:
        return change(self.a, self.b, self.unit)


def _env_rows(a: Run, b: Run) -> list[Row]:
    ea, eb = a.facts.environment, b.facts.environment
    sa, sb = a.facts.settings, b.facts.settings
    g = "environment"
    rows = [Row(g, "device", f"{ea.device_name} ({ea.device_kind})", f"{eb.device_name} ({eb.device_kind})"),
            Row(g, "device memory", ea.total_memory_bytes, eb.total_memory_bytes, "bytes"),
            Row(g, "memory limit (--memory-limit)", memory_limit_bytes(a.facts, a.config),
                memory_limit_bytes(b.facts, b.config), "bytes")]
    for name in ("driver", "runtime", "torch", "transformers", "deepspeed", "torch_musa", "gcdoctor"):
        rows.append(Row(g, name, getattr(ea, name), getattr(eb, name)))
    rows += [Row(g, "model", _model(a.facts.model), _model(b.facts.model)),
             Row(g, "sequence length", sa.seq_len or None, sb.seq_len or None, "int"),
             Row(g, "dtype / optimizer", f"{sa.dtype} / {sa.optimizer}", f"{sb.dtype} / {sb.optimizer}"),
             Row(g, "probes", ", ".join(sa.probes) or None, ", ".join(sb.probes) or None),
             Row(g, "wall time", sa.wall_s, sb.wall_s, "s")]
    return [r for r in rows if r.a is not None or r.b is not None]


def _model(m: Any) -> str | None:
    if m is None:
        return None
    return f"{m.name}, {m.n_layers}/{m.n_layers_full} layers, {m.n_params / 1e9:.3f} B params"


def _present(s, f: Facts) -> bool:
    try:
        return bool(s.present(f))
    except AttributeError:
        return False


def _ids(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The ids of A, then those only B has, each once."""
    return list(dict.fromkeys(list(a) + list(b)))


def _key_rows(s: Section, g: str, fa: Facts, fb: Facts) -> list[Row]:
    """The section's headline numbers marked for comparison, in A's order then B's."""
    ka = {k.id: k for k in s.keys(fa) if k.compare}
    kb = {k.id: k for k in s.keys(fb) if k.compare}
    rows: list[Row] = []
    for kid in _ids(ka, kb):
        k = ka.get(kid) or kb[kid]
        rows.append(Row(g, k.label, ka[kid].value if kid in ka else None, kb[kid].value if kid in kb else None, k.unit,
                        k.predicted))
    return rows


def _table_rows(g: str, t: Table, ta: Table | None, tb: Table | None, fa: Facts, fb: Facts) -> list[Row]:
    """One table's compared columns, joined on its key columns, and the rows only one run measured."""
    cols = [(i, c) for i, c in enumerate(t.columns) if c.compare]
    if not cols:
        return []
    ra = {t.key_of(r): r for r in (ta.rows(fa) if ta is not None else [])}
    rb = {t.key_of(r): r for r in (tb.rows(fb) if tb is not None else [])}
    rows: list[Row] = []
    for key in [k for k in ra if k in rb]:  # rows measured in both runs: the only fair comparisons
        for i, c in cols:
            va, vb = ra[key][i], rb[key][i]
            if va is not None or vb is not None:
                rows.append(Row(g, f"{key} {c.header}", va, vb, c.unit, c.predicted))
    only_a, only_b = [k for k in ra if k not in rb], [k for k in rb if k not in ra]
    if only_a:
        rows.append(Row(g, f"{t.title or t.id}: rows measured in A only", ", ".join(only_a), None))
    if only_b:
        rows.append(Row(g, f"{t.title or t.id}: rows measured in B only", None, ", ".join(only_b)))
    return rows


def _section_rows(s, a: Run, b: Run) -> list[Row]:
    fa, fb = a.facts, b.facts
    pa, pb = _present(s, fa), _present(s, fb)
    if not pa and not pb:
        return []
    g = s.title.split(":")[0]
    if not (pa and pb):
        return [Row(g, "measured", "yes" if pa else None, "yes" if pb else None)]
    rows = _key_rows(s, g, fa, fb)
    ta = {t.id: t for t in s.tables(fa)}
    tb = {t.id: t for t in s.tables(fb)}
    for tid in _ids(ta, tb):
        rows += _table_rows(g, ta.get(tid) or tb[tid], ta.get(tid), tb.get(tid), fa, fb)
    return rows


def compare_rows(a: Run, b: Run) -> list[Row]:
    rows = _env_rows(a, b)
    for s in report_sections.SECTIONS:
        rows += _section_rows(s, a, b)
    return rows


# verdicts ----------------------------------------------------------------------------------
@dataclass
class VerdictChange:
    kind: str  # appeared | disappeared | severity | changed | status | not-measured | same
    code: str
    subject: str
    a: Verdict | None
    b: Verdict | None

    @property
    def latest(self) -> Verdict | None:
        """B's verdict, or A's where B has none."""
        return self.b or self.a

    @property
    def headline(self) -> str:
        """What went away (A's words) for a verdict that disappeared; else B's, the newer state."""
        v = self.a if self.kind == "disappeared" or self.b is None else self.b
        assert v is not None  # a change is made for a verdict of A or B, and one that disappeared was A's
        return v.headline


def _state(v: Verdict | None) -> str:
    if v is None:
        return "absent"
    return v.severity if v.status in ("fired", "error") else v.status


def _fired(v: Verdict | None) -> bool:
    return v is not None and v.status in ("fired", "error")


def _unjudged(v: Verdict | None) -> bool:
    return v is not None and v.status == "inconclusive"


def _change_kind(va: Verdict | None, vb: Verdict | None) -> str:
    fa, fb = _fired(va), _fired(vb)
    if fa and _unjudged(vb):
        return "not-measured"  # B cannot say: it did not measure what the rule reads
    if fb and _unjudged(va):
        return "new-measured"
    if fb and not fa:
        return "appeared"
    if fa and not fb:
        return "disappeared"
    if va is not None and vb is not None and fa and fb:
        return ("severity" if va.severity != vb.severity else
                "changed" if va.headline != vb.headline else "same")
    return "status" if _state(va) != _state(vb) else (
        "changed" if va is not None and vb is not None and va.status == "passed"
        and va.headline != vb.headline else "same")


def verdict_changes(a: list[Verdict], b: list[Verdict]) -> list[VerdictChange]:
    """Verdicts keyed by (code, subject): which fired only in B, only in A, at another severity, with
    other numbers, or could not be judged in one run because it did not measure what the rule needs."""
    da = {v.key: v for v in a}
    db = {v.key: v for v in b}
    out = []
    for key in list(dict.fromkeys(list(da) + list(db))):
        va, vb = da.get(key), db.get(key)
        out.append(VerdictChange(_change_kind(va, vb), key[0], key[1], va, vb))
    order = {"appeared": 0, "severity": 1, "disappeared": 2, "changed": 3, "not-measured": 4, "new-measured": 5,
             "status": 6, "same": 7}
    return sorted(out, key=lambda c: (order[c.kind], severity_rank(_state(c.b if c.b else c.a)), c.code))


KIND_TEXT = {"appeared": "appeared in B", "disappeared": "gone in B", "severity": "changed severity",
             "changed": "numbers changed", "not-measured": "not measured in B", "new-measured": "not measured in A",
             "status": "changed status", "same": "unchanged"}


# text ----------------------------------------------------------------------------------------
def compare_json(a: Run, b: Run, pct: float | None) -> dict[str, Any]:
    """`compare --json`: the rows, the verdict changes, the regressions and the changed predictions."""
    rows = compare_rows(a, b)
    changes = verdict_changes(a.verdicts, b.verdicts)
    return {
        "run_a": str(a.path), "run_b": str(b.path),
        "rows": [{**dataclasses.asdict(r), "change": r.change} for r in rows],
        "verdict_changes": [{"kind": c.kind, "code": c.code, "subject": c.subject,
                             "a": c.a.to_dict() if c.a is not None else None,
                             "b": c.b.to_dict() if c.b is not None else None} for c in changes],
        "fail_on_regression_pct": pct,
        "regressions": regressions(rows, pct),
        "prediction_changes": prediction_changes(rows),
    }


def _text_table(headers: list[str], rows: list[list[str]], width: int = 80) -> list[str]:
    """First column left-aligned (names), the others right-aligned (numbers). A row too wide for
    `width` is written over several lines (the metric, then A, B and the change), never cut."""
    from gcdoctor.report.console import wrap
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(r: list[str]) -> str:
        return "  " + "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w)
                                for i, (v, w) in enumerate(zip(r, widths)))
    if len(line(headers)) <= width:
        return [line(headers)] + [line(r) for r in rows]
    out = []
    for label, a, b, ch in rows:
        one = f"  {label}: {a} | {b} | {ch}"
        if len(one) <= width:
            out.append(one)
        else:
            out += wrap(label, width, "    ", first="  ")
            out += wrap(a, width, "         ", first="    A: ") + wrap(b, width, "         ", first="    B: ")
            out.append(f"    {ch}")
    return out


NOTICE_PCT = 5.0  # what the bottom line calls a move when no --fail-on-regression is given
BOTTOM_MARKS = ("worse", "new", "sev", "better", "gone", "same", "pred", "setup", "...")


def _what(run: Run) -> str:
    f = run.facts
    return run_title(f.model.name if f.model else 'a trace', f.environment.device_name)


def _metric(m: dict[str, Any], word: str) -> str:
    return (f"{m['label']}: {format_with_unit(m['a'], m['unit'])} -> {format_with_unit(m['b'], m['unit'])} "
            f"({abs(m['worse_pct']):.1f}% {word})")


def _scope(c: VerdictChange) -> str | None:
    """The scope of the changed verdict (configuration or experiment)."""
    v = c.latest
    return None if v is None else v.scope


def _verdict_entries(config: list[VerdictChange], kinds: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    return [(mark, f"{c.code} {_state(c.a)} -> {_state(c.b)}: {c.headline}")
            for kind, mark in kinds for c in config if c.kind == kind]


def _prediction_entries(rows: list[Row]) -> list[tuple[str, str]]:
    """Predictions that changed in a way the eye can see: reported, never gated on."""
    by_label = {(r.group, r.label): r for r in rows}
    preds = [(p, by_label[(p["group"], p["label"])]) for p in prediction_changes(rows)]
    preds = [(p, r) for p, r in preds if r.shown(p["a"]) != r.shown(p["b"])]  # moves the eye can see
    out = [("pred", f"{p['label']}: {r.shown(p['a'])} -> {r.shown(p['b'])} (a prediction: not gated)")
           for p, r in preds[:3]]
    if len(preds) > 3:
        out.append(("pred", f"and {len(preds) - 3} more predictions changed (details below)"))
    return out


def _setup_entries(rows: list[Row], changes: list[VerdictChange]) -> list[tuple[str, str]]:
    """A different setup, and how many experiment verdicts changed (they are in the details)."""
    out = []
    setup = [r.label for r in rows if r.group == "environment" and r.label != "wall time" and r.change == "differs"]
    if setup:
        out.append(("setup", "differs: " + ", ".join(setup)))
    latest = [(c.kind, c.latest) for c in changes]
    experiments = [v for kind, v in latest
                   if kind in ("appeared", "disappeared", "severity") and v is not None and v.scope == EXPERIMENT]
    if experiments:
        topics = ", ".join(dict.fromkeys(v.topic or "other" for v in experiments))
        out.append(("...", f"{len(experiments)} experiment verdicts appeared, went or changed severity ({topics}): "
                           "details below"))
    return out


def bottom_line(a: Run, b: Run, rows: list[Row], changes: list[VerdictChange], pct: float | None,
                width: int = 80) -> list[str]:
    """What changed that matters, regressions first: measured metrics worse beyond the threshold,
    configuration verdicts that appeared or rose in severity, improvements, verdicts gone, changed
    predictions (reported, never gated on), a different setup, and what else the details hold."""
    from gcdoctor.report.console import wrap
    limit = NOTICE_PCT if pct is None else pct
    ms = moved(rows, limit)
    worse = sorted((m for m in ms if m["worse_pct"] > 0), key=lambda m: -m["worse_pct"])
    better = sorted((m for m in ms if m["worse_pct"] < 0), key=lambda m: m["worse_pct"])
    config = [c for c in changes if _scope(c) not in (None, EXPERIMENT)]
    entries = [("worse", _metric(m, "worse")) for m in worse]
    entries += _verdict_entries(config, (("appeared", "new"), ("severity", "sev")))
    entries += [("better", _metric(m, "better")) for m in better[:3]]
    if len(better) > 3:
        entries.append(("better", f"and {len(better) - 3} more metrics better beyond {limit:g}% (details below)"))
    entries += _verdict_entries(config, (("disappeared", "gone"),))
    if not ms:
        entries.append(("same", f"no measured metric moved beyond {limit:g}%"))
    entries += _prediction_entries(rows) + _setup_entries(rows, changes)
    return [line for mark, text in entries for line in wrap(text, width, " " * 9, first=f"  {mark:<6} ")]


def render_text(a: Run, b: Run, width: int | None = None, pct: float | None = None) -> str:
    from gcdoctor.report.console import output_width, wrap
    width = width or output_width()
    rows = compare_rows(a, b)
    changes = verdict_changes(a.verdicts, b.verdicts)
    wa, wb = _what(a), _what(b)
    lines = wrap(f"gcdoctor compare: {wa}, B against A" if wa == wb else f"gcdoctor compare: {wb} (B) against "
                 f"{wa} (A)", width, "  ", first="")
    limit = NOTICE_PCT if pct is None else pct
    lines += [f"Bottom line, B against A (beyond {limit:g}%):"] + bottom_line(a, b, rows, changes, pct, width)
    lines += ["", "Details", ""]
    lines += wrap(f"A: {a.path} ({a.label})", width, "   ") + wrap(f"B: {b.path} ({b.label})", width, "   ") + [""]
    for group in list(dict.fromkeys(r.group for r in rows)):
        grp = [r for r in rows if r.group == group]
        lines.append(group)
        lines += _text_table(["metric", "A", "B", "B vs A"], [[r.label, r.shown(r.a), r.shown(r.b), r.change]
                                                               for r in grp], width)
        lines.append("")
    lines.append("verdicts (each run judged by the rules of this gcdoctor and its own thresholds)")
    shown = [c for c in changes if c.kind not in ("status", "same")
             or (c.kind == "same" and c.a is not None and c.a.status == "fired")]
    if not shown:
        lines.append("  no rule fired in either run")
    for c in shown:
        subj = f" [{c.subject}]" if c.subject else ""
        lines += wrap(f"{KIND_TEXT[c.kind]}: {c.code}{subj} {_state(c.a)} -> {_state(c.b)}: {c.headline}", width,
                      "      ", first="  ")
    quiet = [c for c in changes if c.kind == "status"]
    if quiet:  # passed <-> could not run <-> absent: listed in full in the HTML
        lines += wrap(f"{len(quiet)} verdict(s) moved between passed, could not run and absent: "
                      + ", ".join(sorted({c.code for c in quiet})), width, "    ", first="  ")
    return "\n".join(lines)


# html ----------------------------------------------------------------------------------------
def _overlay(a: Run, b: Run, attr: str, title: str, y_label: str, scale: float = 1.0) -> str:
    series = []
    for run, tag, dashed in ((a, "A", False), (b, "B", True)):
        s = run.facts.sweep
        if s is None:
            continue
        for i, v in enumerate(("no_gc", "gc")):
            pts: list[tuple[float, float]] = [(m.batch_size, getattr(m, attr) / scale) for m in s.measurements
                                              if m.variant == v and m.fits and getattr(m, attr) is not None]
            if pts:
                series.append(Series(f"{tag} {v}", pts, color_for(v, i), dashed=dashed))
    return line_plot(series, title=title, x_label="batch size (log scale)", y_label=y_label, x_log2=True)


def render_compare_html(a: Run, b: Run) -> str:
    from gcdoctor.report.html import _css  # the report's stylesheet, one look for both pages

    rows = compare_rows(a, b)
    parts = [kv([("A", f"{a.path} — {a.label}"), ("B", f"{b.path} — {b.label}")])]
    peaks = [m.peak_allocated_bytes for r in (a, b) if r.facts.sweep for m in r.facts.sweep.measurements
             if m.peak_allocated_bytes]
    unit, div = ("GiB", GIB) if peaks and max(peaks) >= GIB else ("MiB", MIB)
    parts.append(figures(
        figure(_overlay(a, b, "peak_allocated_bytes", "Peak memory versus batch, A (solid) and B (dashed)",
                        f"peak allocated ({unit})", div), "Peak allocated memory per step."),
        figure(_overlay(a, b, "step_ms_median", "Step time versus batch, A (solid) and B (dashed)",
                        "median step (ms)"), "Median step time, unprofiled.")))
    body = [section("runs", "Runs", *parts)]
    groups = []
    for group in list(dict.fromkeys(r.group for r in rows)):
        grp = [r for r in rows if r.group == group]
        groups.append(f"<h3>{esc(group)}</h3>" + table(["metric", "A", "B", "B vs A"],
                                                        [[r.label, r.shown(r.a), r.shown(r.b), r.change] for r in grp],
                                                        ids=[f"{group}:{r.label}" for r in grp]))
    metrics = section("metrics", "Metrics", Raw("".join(groups)),
                      lead="B vs A: the ratio of B to A for amounts; for percentages, the difference in points.")
    changes = verdict_changes(a.verdicts, b.verdicts)
    vrows = [[KIND_TEXT[c.kind], c.code + (f" [{c.subject}]" if c.subject else ""), _state(c.a), _state(c.b),
              c.headline] for c in changes]
    verdicts = section("verdicts", "Verdicts", table(["change", "rule", "A", "B", "headline"], vrows, numeric_from=9,
                                                     ids=[c.code for c in changes]),
                       lead="Each run judged by the rules of this gcdoctor and its own thresholds.")
    title = f"gcdoctor compare: {a.path.name} vs {b.path.name}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{_css()}</style></head><body><main>"
            f"<header><h1>{esc(title)}</h1></header>{body[0]}{verdicts}{metrics}</main></body></html>\n")


def run_compare(args: argparse.Namespace) -> int:
    a, b = load_run(args.run_a), load_run(args.run_b)
    print(render_text(a, b, pct=getattr(args, "fail_on_regression", None)))
    out = getattr(args, "html", None)
    if out:
        path = Path(out)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render_compare_html(a, b))
        except OSError as exc:
            raise UserError(f"--html {out}: cannot write ({exc.strerror})") from None
        print(f"\nHTML: {path}")
    return 0


__all__ = ["Row", "Run", "VerdictChange", "compare_rows", "load_run", "render_compare_html", "render_text",
           "run_compare", "verdict_changes"]
