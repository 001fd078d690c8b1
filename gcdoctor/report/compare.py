"""`gcdoctor compare RUN_A RUN_B [--html OUT]`: two run directories side by side.

Each metric with both values and B/A (for percentages, the difference in points), and which
verdicts appeared, disappeared or changed severity. Both runs are re-judged with the rules of
this gcdoctor, so a difference in verdicts is a difference in measurements, not in rule versions.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gcdoctor.engine import SEVERITY_ORDER, Verdict, evaluate
from gcdoctor.errors import UserError
from gcdoctor.facts import Facts, SweepFacts
from gcdoctor.report.format import GIB
from gcdoctor.report.html_parts import DASH, Raw, fbytes, figure, figures, fnum, fpct, kv, section, table
from gcdoctor.report.svg import Series, color_for, esc, line_plot

MARK = {"critical": "!!", "warning": "! ", "info": "i ", "ok": "ok", "inconclusive": "? "}


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


def load_run(path: str | Path) -> Run:
    """A recorded run directory: facts.json (required) and config.json (optional)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such run directory")
    if not p.is_dir():
        raise UserError(f"{p}: not a gcdoctor run directory (a file; compare takes two run directories)")
    fp = p / "facts.json"
    if not fp.is_file():
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
    return Run(p, facts, evaluate(facts), config)


# metrics -----------------------------------------------------------------------------------
@dataclass
class Row:
    """One compared metric. Values are numbers where the metric is numeric (for B/A), else text."""

    group: str
    label: str
    a: Any
    b: Any
    kind: str = "num"  # num | pct (difference in points) | text | bytes | ratio
    unit: str = ""
    note: str = ""  # replaces B/A where a ratio would mislead

    def shown(self, v: Any) -> str:
        if v is None:
            return DASH
        if self.kind == "bytes":
            return fbytes(v)
        if self.kind == "pct":
            return fpct(v)
        if self.kind == "text":
            return str(v)
        if self.kind == "ratio":
            return f"{v:.2f}x"
        if isinstance(v, float):
            text = f"{v:.3g}" if 0 < abs(v) < 0.01 else fnum(v, 2 if abs(v) < 10 else 1)
            return text + (f" {self.unit}" if self.unit else "")
        return fnum(v) + (f" {self.unit}" if self.unit else "")

    @property
    def change(self) -> str:
        if self.note:
            return self.note
        a, b = self.a, self.b
        if a is None or b is None:
            return DASH
        if self.kind == "text":
            return "same" if a == b else "differs"
        if self.kind == "pct":
            return f"{b - a:+.1f} pp"
        if a == 0:
            return "same" if b == 0 else DASH
        return f"{b / a:.2f}x"


def _variant_max(s: SweepFacts | None, v: str) -> int | None:
    return s.max_batch.get(v) if s is not None else None


def _equal_batch(fa: Facts, fb: Facts) -> tuple[int | None, int | None]:
    """The batch to compare at: the largest measured in both runs with both variants; else each
    run's own largest equal batch (then the rows say the batches differ)."""
    ca = set(fa.sweep.common_batches()) if fa.sweep else set()
    cb = set(fb.sweep.common_batches()) if fb.sweep else set()
    both = sorted(ca & cb)
    if both:
        return both[-1], both[-1]
    return (max(ca) if ca else None), (max(cb) if cb else None)


def _sweep_rows(a: Run, b: Run) -> list[Row]:
    sa, sb = a.facts.sweep, b.facts.sweep
    if sa is None and sb is None:
        return []
    rows = []
    g = "batch sweep"
    # with --batch-sizes the largest batch is the largest that was tried, not the OOM boundary
    fixed = [tag for tag, s in (("A", sa), ("B", sb)) if s is not None and not s.searched]
    note = f"{' and '.join(fixed)}: fixed batch list, not searched" if fixed else ""
    for v in ("no_gc", "gc"):
        rows.append(Row(g, f"largest batch, {v}", _variant_max(sa, v), _variant_max(sb, v), note=note))
    ga = _ratio(_variant_max(sa, "gc"), _variant_max(sa, "no_gc"))
    gb = _ratio(_variant_max(sb, "gc"), _variant_max(sb, "no_gc"))
    rows.append(Row(g, "batch gain from checkpointing (gc / no_gc)", ga, gb, "ratio", note=note))
    ba, bb = _equal_batch(a.facts, b.facts)
    if ba is None and bb is None:
        return rows
    at = f"at batch {ba}" if ba == bb else f"at batch {ba} (A) / {bb} (B)"
    g = f"equal batch ({at})"
    rows.append(Row(g, "batch compared", ba, bb))

    def m(run: Run, batch: int | None, v: str):
        return run.facts.sweep.get(v, batch) if run.facts.sweep is not None and batch is not None else None

    for v in ("no_gc", "gc"):
        ma, mb = m(a, ba, v), m(b, bb, v)
        rows.append(Row(g, f"step time, {v}", _attr(ma, "step_ms_median"), _attr(mb, "step_ms_median"), unit="ms"))
    rows.append(Row(g, "recompute overhead (gc vs no_gc)", _overhead(a, ba), _overhead(b, bb), "pct"))
    for v in ("no_gc", "gc"):
        ma, mb = m(a, ba, v), m(b, bb, v)
        rows.append(Row(g, f"peak allocated, {v}", _attr(ma, "peak_allocated_bytes"),
                        _attr(mb, "peak_allocated_bytes"), "bytes"))
    for v in ("no_gc", "gc"):
        ma, mb = m(a, ba, v), m(b, bb, v)
        rows.append(Row(g, f"activation memory, {v}", _attr(ma, "activation_peak_bytes"),
                        _attr(mb, "activation_peak_bytes"), "bytes"))
    rows.append(Row(g, "activation saving (gc vs no_gc)", _saving(a, ba), _saving(b, bb), "pct"))
    for v in ("no_gc", "gc"):
        ma, mb = m(a, ba, v), m(b, bb, v)
        rows.append(Row(g, f"tokens/s, {v}", _attr(ma, "tokens_per_s"), _attr(mb, "tokens_per_s"), unit="tok/s"))
    for v in ("no_gc", "gc"):
        ma, mb = m(a, _variant_max(sa, v), v), m(b, _variant_max(sb, v), v)
        rows.append(Row("batch sweep", f"tokens/s at the largest batch, {v}", _attr(ma, "tokens_per_s"),
                        _attr(mb, "tokens_per_s"), unit="tok/s"))
    return rows


def _attr(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _overhead(run: Run, b: int | None) -> float | None:
    s = run.facts.sweep
    if s is None or b is None:
        return None
    off, on = s.get("no_gc", b), s.get("gc", b)
    if off is None or on is None or not off.step_ms_median or on.step_ms_median is None:
        return None
    return 100.0 * (on.step_ms_median / off.step_ms_median - 1.0)


def _saving(run: Run, b: int | None) -> float | None:
    s = run.facts.sweep
    if s is None or b is None:
        return None
    off, on = s.get("no_gc", b), s.get("gc", b)
    a_off, a_on = _attr(off, "activation_peak_bytes"), _attr(on, "activation_peak_bytes")
    if not a_off or a_on is None:
        return None
    return 100.0 * (1.0 - a_on / a_off)


def _env_rows(a: Run, b: Run) -> list[Row]:
    ea, eb = a.facts.environment, b.facts.environment
    sa, sb = a.facts.settings, b.facts.settings
    ma, mb = a.facts.model, b.facts.model
    g = "environment"
    rows = [Row(g, "device", f"{ea.device_name} ({ea.device_kind})", f"{eb.device_name} ({eb.device_kind})", "text"),
            Row(g, "device memory", ea.total_memory_bytes, eb.total_memory_bytes, "bytes"),
            Row(g, "memory limit (--memory-limit)", a.config.get("memory_limit_bytes"),
                b.config.get("memory_limit_bytes"), "bytes")]
    for name in ("driver", "runtime", "torch", "transformers", "deepspeed", "torch_musa", "gcdoctor"):
        rows.append(Row(g, name, getattr(ea, name), getattr(eb, name), "text"))
    rows += [Row(g, "model", _model(ma), _model(mb), "text"),
             Row(g, "sequence length", sa.seq_len, sb.seq_len),
             Row(g, "dtype / optimizer", f"{sa.dtype} / {sa.optimizer}", f"{sb.dtype} / {sb.optimizer}", "text"),
             Row(g, "steps (warm-up + measured)", f"{sa.warmup_steps} + {sa.measure_steps}",
                 f"{sb.warmup_steps} + {sb.measure_steps}", "text"),
             Row(g, "probes", ", ".join(sa.probes), ", ".join(sb.probes), "text"),
             Row(g, "wall time", sa.wall_s, sb.wall_s, unit="s")]
    return [r for r in rows if r.a is not None or r.b is not None]


def _model(m: Any) -> str | None:
    if m is None:
        return None
    return f"{m.name}, {m.n_layers}/{m.n_layers_full} layers, {m.n_params / 1e9:.3f} B params"


def _granularity_rows(a: Run, b: Run) -> list[Row]:
    ga, gb = a.facts.granularity, b.facts.granularity
    if ga is None and gb is None:
        return []
    if ga is None or gb is None:
        return [_only_one("granularity", ga, gb)]
    rows: list[Row] = []
    la, lb = getattr(ga, "launch", None), getattr(gb, "launch", None)
    if la is not None or lb is not None:
        for attr, label in (("launch_us", "one kernel launch"), ("enqueue_us", "host enqueue per launch"),
                            ("region_fixed_us", "host cost per checkpoint region, fixed part"),
                            ("region_per_op_us", "host cost per checkpoint region, per forward op")):
            xa, xb = _attr(la, attr), _attr(lb, attr)
            xa, xb = (None if callable(xa) else xa), (None if callable(xb) else xb)
            if xa is not None or xb is not None:
                rows.append(Row("granularity", label, xa, xb, unit="µs"))
    groups_a = {g.name: g for g in getattr(ga, "groups", []) or []}
    groups_b = {g.name: g for g in getattr(gb, "groups", []) or []}
    for name in list(dict.fromkeys(list(groups_a) + list(groups_b))):
        xa, xb = groups_a.get(name), groups_b.get(name)
        grp = f"granularity: {name}"
        best_a = xa.best_tradeoff() if xa is not None and hasattr(xa, "best_tradeoff") else None
        best_b = xb.best_tradeoff() if xb is not None and hasattr(xb, "best_tradeoff") else None
        rows.append(Row(grp, "best trade-off", _attr(best_a, "variant"), _attr(best_b, "variant"), "text"))
        va = {v.variant: v for v in getattr(xa, "variants", [])}
        vb = {v.variant: v for v in getattr(xb, "variants", [])}
        for var in list(dict.fromkeys(list(va) + list(vb))):
            x, y = va.get(var), vb.get(var)
            rows.append(Row(grp, f"{var}: step time", _attr(x, "step_ms"), _attr(y, "step_ms"), unit="ms"))
            if var != "none":
                rows.append(Row(grp, f"{var}: time added", _attr(x, "time_added_pct"), _attr(y, "time_added_pct"),
                                "pct"))
                rows.append(Row(grp, f"{var}: memory saved", _attr(x, "memory_saved_pct"),
                                _attr(y, "memory_saved_pct"), "pct"))
    return rows


def _numeric_leaves(obj: Any, prefix: str = "", depth: int = 0) -> dict[str, tuple[str, float]]:
    """Numeric fields of a facts section, by dotted name (rows of lists keyed by their variant/name)."""
    out: dict[str, tuple[str, float]] = {}
    if obj is None or not dataclasses.is_dataclass(obj) or depth > 2:
        return out
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        key = f"{prefix}{f.name}"
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = (f.name, v)
        elif dataclasses.is_dataclass(v):
            out.update(_numeric_leaves(v, key + ".", depth + 1))
        elif isinstance(v, list) and v and dataclasses.is_dataclass(v[0]):
            for i, item in enumerate(v):
                name = next((getattr(item, k) for k in ("variant", "name", "key")
                             if isinstance(getattr(item, k, None), str) and getattr(item, k)), str(i))
                out.update(_numeric_leaves(item, f"{prefix}{name}.", depth + 1))
    return out


KEY_SUFFIXES = ("_ms", "_pct", "_gbs", "_us", "_share", "_bytes")


def _generic_rows(section_name: str, a: Any, b: Any) -> list[Row]:
    """Key numbers (times, percentages, throughputs, shares, sizes) of a section this module has no
    dedicated comparison for (offload, jitter, ...)."""
    if a is None and b is None:
        return []
    la, lb = _numeric_leaves(a), _numeric_leaves(b)
    rows = []
    for key in list(dict.fromkeys(list(la) + list(lb))):
        fname = (la.get(key) or lb.get(key))[0]
        if not fname.endswith(KEY_SUFFIXES) or fname.startswith(("seconds",)):
            continue
        va, vb = (la.get(key) or (None, None))[1], (lb.get(key) or (None, None))[1]
        if fname.endswith("_pct"):
            rows.append(Row(section_name, key, va, vb, "pct"))
        elif fname.endswith("_bytes"):
            rows.append(Row(section_name, key, va, vb, "bytes"))
        elif fname.endswith("_share"):
            rows.append(Row(section_name, key, None if va is None else 100 * va, None if vb is None else 100 * vb,
                            "pct"))
        else:
            unit = {"_ms": "ms", "_us": "µs", "_gbs": "GB/s"}[next(s for s in ("_ms", "_us", "_gbs")
                                                                   if fname.endswith(s))]
            rows.append(Row(section_name, key, va, vb, unit=unit))
    return rows[:60]


OFFLOAD_METRICS = [  # (field, label, kind, unit)
    ("step_ms", "step time", "num", "ms"), ("slowdown_pct", "slowdown vs the reference", "pct", ""),
    ("peak_allocated_bytes", "device peak", "bytes", ""), ("host_rss_max_bytes", "host RSS max", "bytes", ""),
    ("copy_ms", "host-device copies per step", "num", "ms"),
    ("exposed_copy_ms", "exposed copies per step", "num", "ms"),
    ("h2d_copy_gbs", "H2D copy bandwidth", "num", "GB/s"), ("d2h_copy_gbs", "D2H copy bandwidth", "num", "GB/s"),
    ("pcie_rx_gbs_mean", "PCIe rx mean", "num", "GB/s"), ("pcie_tx_gbs_mean", "PCIe tx mean", "num", "GB/s"),
    ("stall_share", "stall share of the device window", "share", ""),
]


def _by_name(items: Any, attr: str) -> dict[str, Any]:
    return {getattr(x, attr): x for x in (items or [])}


def _offload_rows(a: Run, b: Run) -> list[Row]:
    oa, ob = a.facts.offload, b.facts.offload
    if oa is None and ob is None:
        return []
    if oa is None or ob is None:
        return [_only_one("offload", oa, ob)]
    if not hasattr(oa or ob, "variants"):
        return _generic_rows("offload", oa, ob)
    va, vb = _by_name(getattr(oa, "variants", []), "variant"), _by_name(getattr(ob, "variants", []), "variant")
    rows = []
    for name in list(dict.fromkeys(list(va) + list(vb))):
        x, y = va.get(name), vb.get(name)
        for attr, label, kind, unit in OFFLOAD_METRICS:
            xa, yb = _attr(x, attr), _attr(y, attr)
            if xa is None and yb is None:
                continue
            if kind == "share":
                rows.append(Row(f"offload: {name}", label, _pct(xa), _pct(yb), "pct"))
            else:
                rows.append(Row(f"offload: {name}", label, xa, yb, kind, unit))
    return rows


def _jitter_rows(a: Run, b: Run) -> list[Row]:
    ja, jb = a.facts.jitter, b.facts.jitter
    if ja is None and jb is None:
        return []
    if ja is None or jb is None:
        return [_only_one("jitter", ja, jb)]
    if not hasattr(ja or jb, "comparisons"):
        return _generic_rows("jitter", ja, jb)
    ca, cb = _by_name(getattr(ja, "comparisons", []), "name"), _by_name(getattr(jb, "comparisons", []), "name")
    rows = []
    for name in list(dict.fromkeys(list(ca) + list(cb))):
        x, y = ca.get(name), cb.get(name)
        g = f"jitter: {name}"
        rows.append(Row(g, "losses bitwise equal", _yes(_attr(x, "losses_equal")), _yes(_attr(y, "losses_equal")),
                        "text"))
        rows.append(Row(g, "max |loss difference|", _max(_attr(x, "loss_abs_diff")), _max(_attr(y, "loss_abs_diff"))))
        rows.append(Row(g, "gradient relative L2", _attr(x, "grad_rel_l2"), _attr(y, "grad_rel_l2")))
    return rows


def _only_one(probe: str, a: Any, b: Any) -> Row:
    """A probe that ran in one run only: one line, not a table of dashes."""
    return Row(probe, f"{probe} probe", "ran" if a is not None else "not run", "ran" if b is not None else "not run",
               "text")


def _yes(v: bool | None) -> str | None:
    return None if v is None else ("yes" if v else "no")


def _max(xs: list[float] | None) -> float | None:
    return max(xs) if xs else None


def _trace_rows(a: Run, b: Run) -> list[Row]:
    keys = [k for k in a.facts.trace if "|" not in k and k in b.facts.trace]
    rows = []
    for k in keys:
        ta, tb = a.facts.trace[k], b.facts.trace[k]
        g = f"trace: {k}"
        rows += [Row(g, "kernels", ta.kernel_count, tb.kernel_count),
                 Row(g, "mean kernel", ta.kernel_mean_us, tb.kernel_mean_us, unit="µs"),
                 Row(g, "device busy", _pct(ta.busy_share), _pct(tb.busy_share), "pct"),
                 Row(g, "recompute share of device time", _pct(ta.recompute_share), _pct(tb.recompute_share), "pct"),
                 Row(g, "CPU ops", ta.cpu_op_count, tb.cpu_op_count)]
    return [r for r in rows if r.a is not None or r.b is not None]


def _pct(share: float | None) -> float | None:
    return None if share is None else 100.0 * share


def compare_rows(a: Run, b: Run) -> list[Row]:
    return (_env_rows(a, b) + _sweep_rows(a, b) + _granularity_rows(a, b) + _offload_rows(a, b)
            + _jitter_rows(a, b) + _trace_rows(a, b))


# verdicts ----------------------------------------------------------------------------------
@dataclass
class VerdictChange:
    kind: str  # appeared | disappeared | severity | status | same
    code: str
    subject: str
    a: Verdict | None
    b: Verdict | None

    @property
    def headline(self) -> str:
        """What went away (A's words) for a verdict that disappeared; else B's, the newer state."""
        v = self.a if self.kind == "disappeared" or self.b is None else self.b
        return v.headline


def _state(v: Verdict | None) -> str:
    if v is None:
        return "absent"
    return v.severity if v.status == "fired" else v.status


def verdict_changes(a: list[Verdict], b: list[Verdict]) -> list[VerdictChange]:
    """Verdicts keyed by (code, subject): which fired only in B, only in A, or at another severity."""
    da = {v.key: v for v in a}
    db = {v.key: v for v in b}
    out = []
    for key in list(dict.fromkeys(list(da) + list(db))):
        va, vb = da.get(key), db.get(key)
        fa = va is not None and va.status == "fired"
        fb = vb is not None and vb.status == "fired"
        if fb and not fa:
            kind = "appeared"
        elif fa and not fb:
            kind = "disappeared"
        elif fa and fb:
            kind = "severity" if va.severity != vb.severity else "same"
        else:
            kind = "status" if _state(va) != _state(vb) else "same"
        out.append(VerdictChange(kind, key[0], key[1], va, vb))
    order = {"appeared": 0, "severity": 1, "disappeared": 2, "status": 3, "same": 4}
    return sorted(out, key=lambda c: (order[c.kind], SEVERITY_ORDER.get(_state(c.b if c.b else c.a), 9), c.code))


KIND_TEXT = {"appeared": "appeared in B", "disappeared": "gone in B", "severity": "changed severity",
             "status": "changed status", "same": "unchanged"}


# text ----------------------------------------------------------------------------------------
def _text_table(headers: list[str], rows: list[list[str]]) -> str:
    """First column left-aligned (names), the others right-aligned (numbers)."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]

    def line(r: list[str]) -> str:
        return "  " + "  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w)
                                for i, (v, w) in enumerate(zip(r, widths)))
    return "\n".join([line(headers)] + [line(r) for r in rows])


def render_text(a: Run, b: Run) -> str:
    lines = [f"A: {a.path}  ({a.label})", f"B: {b.path}  ({b.label})", ""]
    rows = compare_rows(a, b)
    for group in list(dict.fromkeys(r.group for r in rows)):
        grp = [r for r in rows if r.group == group]
        lines.append(group)
        lines.append(_text_table(["metric", "A", "B", "B/A"], [[r.label, r.shown(r.a), r.shown(r.b), r.change]
                                                               for r in grp]))
        lines.append("")
    changes = verdict_changes(a.verdicts, b.verdicts)
    lines.append("verdicts (both runs judged by the rules of this gcdoctor)")
    shown = [c for c in changes if c.kind in ("appeared", "disappeared", "severity")
             or (c.kind == "same" and c.a.status == "fired")]
    if not shown:
        lines.append("  no rule fired in either run")
    for c in shown:
        subj = f" [{c.subject}]" if c.subject else ""
        lines.append(f"  {KIND_TEXT[c.kind]:17s} {c.code}{subj}: {_state(c.a)} -> {_state(c.b)}: {c.headline}")
    quiet = [c for c in changes if c.kind == "status"]
    if quiet:  # passed <-> could not run <-> absent: listed in full in the HTML
        lines.append(f"  {len(quiet)} verdict(s) moved between passed, could not run and absent: "
                     + ", ".join(sorted({c.code for c in quiet})))
    return "\n".join(lines)


# html ----------------------------------------------------------------------------------------
def _overlay(a: Run, b: Run, attr: str, title: str, y_label: str, scale: float = 1.0) -> str:
    series = []
    for run, tag, dashed in ((a, "A", False), (b, "B", True)):
        s = run.facts.sweep
        if s is None:
            continue
        for i, v in enumerate(("no_gc", "gc")):
            pts = [(m.batch_size, getattr(m, attr) / scale) for m in s.measurements
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
    unit, div = ("GiB", GIB) if peaks and max(peaks) >= GIB else ("MiB", 2**20)
    parts.append(figures(
        figure(_overlay(a, b, "peak_allocated_bytes", "Peak memory versus batch, A (solid) and B (dashed)",
                        f"peak allocated ({unit})", div), "Peak allocated memory per step."),
        figure(_overlay(a, b, "step_ms_median", "Step time versus batch, A (solid) and B (dashed)",
                        "median step (ms)"), "Median step time, unprofiled.")))
    body = [section("runs", "Runs", *parts)]
    for group in list(dict.fromkeys(r.group for r in rows)):
        grp = [r for r in rows if r.group == group]
        body.append(f"<h3>{esc(group)}</h3>" + table(["metric", "A", "B", "B/A"],
                                                      [[r.label, r.shown(r.a), r.shown(r.b), r.change] for r in grp],
                                                      ids=[f"{group}:{r.label}" for r in grp]))
    metrics = section("metrics", "Metrics", Raw("".join(body[1:])),
                      lead="B/A is the ratio of B to A; for percentages, the difference in percentage points.")
    changes = verdict_changes(a.verdicts, b.verdicts)
    vrows = [[KIND_TEXT[c.kind], c.code + (f" [{c.subject}]" if c.subject else ""), _state(c.a), _state(c.b),
              c.headline] for c in changes]
    verdicts = section("verdicts", "Verdicts", table(["change", "rule", "A", "B", "headline"], vrows, numeric_from=9,
                                                     ids=[c.code for c in changes]),
                       lead="Both runs judged by the rules of this gcdoctor.")
    title = f"gcdoctor compare: {a.path.name} vs {b.path.name}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{_css()}</style></head><body><main>"
            f"<header><h1>{esc(title)}</h1></header>{body[0]}{verdicts}{metrics}</main></body></html>\n")


def run_compare(args: argparse.Namespace) -> int:
    a, b = load_run(args.run_a), load_run(args.run_b)
    print(render_text(a, b))
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
