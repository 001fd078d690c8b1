"""The dashboard's widgets. Each renders from the shared DashboardState; none keeps its own copy
of the numbers, so a widget created late (a resize, a new screen) shows everything so far."""
from __future__ import annotations

from typing import Any, Callable

from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.widget import Widget
from textual.widgets import DataTable, OptionList, RichLog
from textual.widgets.option_list import Option

from gcdoctor.run.events import RunFinished
from gcdoctor.types import SEVERITIES, Evidence
from gcdoctor.tui.gauges import GaugeRow
from gcdoctor.tui.render import Field, bar, fit_fields, fmt_cell, fmt_ms, fmt_seconds, sparkline, wrap_text
from gcdoctor.tui.state import DashboardState, LogLine, ProbeProgress, VerdictEntry

SEVERITY_STYLE = {s.name: s.style for s in SEVERITIES}
SEVERITY_ICON = {s.name: s.icon for s in SEVERITIES}
LOG_STYLE = {"warning": "text-warning", "error": "text-error"}
BOTTOM_STYLE = {"err": "bold $text-error", "crit": "bold $text-error", "warn": "bold $text-warning",
                "stop": "bold $text-error", "ok": "$text-success", "use": "bold $text-primary", "try": "$text-primary", "dev": "$text-primary",
                "?": "dim", "...": "dim"}


def plural(n: int, word: str) -> str:
    """'1 finding', '2 findings'."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


class GaugePanel(Widget):
    """Rows of label, fixed-scale sparkline (one cell per second) and current value."""

    DEFAULT_CSS = "GaugePanel { height: auto; }"

    def __init__(self, state: DashboardState, rows: Callable[[], list[GaugeRow]],
                 extra: Callable[[int], list[Content]] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.state = state
        self.rows = rows
        self.extra = extra  # more lines under the gauges (the processes of a GPU)

    def render(self) -> Content:
        width = max(20, self.content_size.width or self.size.width or 40)
        rows = self.rows()
        label_w = max(len(r.label) for r in rows) if rows else 8
        value_w = min(16, max([len(r.value) for r in rows if r.series] + [4]))
        spark_w = max(4, width - label_w - value_w - 2)
        lines: list[Content] = []
        for r in rows:
            label = (r.label.ljust(label_w), "bold")
            if r.series is None:  # the note wraps under itself, never cut
                note = f"unavailable ({r.note})" if r.note else "unavailable"
                for i, part in enumerate(wrap_text(note, max(1, width - label_w - 1))):
                    lines.append(Content.assemble(label if i == 0 else " " * label_w, " ", (part, "dim")))
                continue
            cols = self.state.telemetry.columns(r.series, spark_w)
            lines.append(Content.assemble(label, " ", (sparkline(cols, spark_w, r.top), "$text-primary"), " ",
                                          r.value.rjust(value_w)))
        if self.extra is not None:
            lines += self.extra(width)
        return Content("\n").join(lines)


class HeaderBar(Widget):
    """What is measured, on what: the device, the model and the settings. Each line is a list of
    fields; where a line does not fit, whole fields are left out (see `fit_fields`), and a single
    field wider than the screen wraps."""

    DEFAULT_CSS = "HeaderBar { height: auto; padding: 0 1; background: $panel; }"

    def __init__(self, state: DashboardState, lines: Callable[[], list[list[Field]]], **kw: Any) -> None:
        super().__init__(**kw)
        self.state = state
        self.lines = lines

    def text_lines(self, width: int) -> list[str]:
        """The header's lines in `width` cells, the brand included."""
        lines = self.lines()
        brand = "gcdoctor "
        first = wrap_text(fit_fields(lines[0], width - len(brand)), width - len(brand)) if lines else [""]
        out = [brand + first[0]] + [" " * len(brand) + x for x in first[1:]]
        for fields in lines[1:]:
            out += wrap_text(fit_fields(fields, width), width)
        return out

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(self.text_lines(max(10, width)))

    def render(self) -> Content:
        lines = self.text_lines(max(10, self.content_size.width or 80))
        brand = "gcdoctor "
        first = Content.assemble((brand, "bold $text-primary"), lines[0][len(brand):])
        return Content("\n").join([first, *[Content(x) for x in lines[1:]]])


class StatusBar(Widget):
    """One line: running / stopping / where the report is. Too narrow a line leaves out the key hint,
    then its last fields, whole; a path wider than the whole line wraps onto a second one."""

    DEFAULT_CSS = "StatusBar { height: auto; padding: 0 1; background: $boost; }"

    def __init__(self, state: DashboardState, text: Callable[[], tuple[str, str]], **kw: Any) -> None:
        super().__init__(**kw)
        self.state = state
        self.text = text

    def render(self) -> Content:
        text, style = self.text()
        width = max(10, self.content_size.width or 80)
        if len(text) > width:  # the key hint goes first (the footer has it), then trailing fields, whole
            text = text.split(" — ")[0]
        while len(text) > width and " · " in text:
            text = text.rsplit(" · ", 1)[0]
        # a single path wider than the screen wraps (the bar grows a line), never cut
        return Content("\n").join([Content.assemble((part, style)) for part in wrap_text(text, width, fill=True)])


class ProbePanel(Widget):
    """The probe in progress: variant, batch, step, a progress bar and the time left. On a narrow
    panel the least needed fields (the description, the message, the points done) are left out
    whole, and a long variant name or path wraps."""

    DEFAULT_CSS = "ProbePanel { height: auto; }"

    def __init__(self, state: DashboardState, **kw: Any) -> None:
        super().__init__(**kw)
        self.state = state

    def render(self) -> Content:
        width = max(20, self.content_size.width or 36)
        st = self.state
        p = st.probe
        if p is None:
            return Content("\n").join(_idle_lines(st, width))
        ranked = [*_title_lines(st, p, width), *_what_lines(p, width), *_step_lines(p, width),
                  _progress_line(p, width), _eta_line(p, width)]
        # more lines than the panel has rows (a wrapped name or description): the least needed give way
        rows = self.content_size.height
        while rows and len(ranked) > rows and max(r for r, _ in ranked) > 0:
            top = max(r for r, _ in ranked)
            ranked = [x for x in ranked if x[0] != top]  # a wrapped text goes whole, never a part of it
        return Content("\n").join([c for _, c in ranked])


Ranked = list[tuple[int, Content]]  # (rank, line): the lines of the highest rank give way first


def _idle_lines(st: DashboardState, width: int) -> list[Content]:
    """No probe running: the run's outcome once it has finished, else what it waits for."""
    if st.finished is not None:
        return _finished_lines(st, st.finished, width)
    if st.run_dir is None:
        return [Content.styled("waiting for the run to start…", "dim")]
    done = [f.probe for f in st.probes_finished]
    between = "between probes" + (f" (done: {', '.join(done)})" if done else "…")
    return [Content.styled(x, "dim") for x in wrap_text(between, width)]


def _finished_lines(st: DashboardState, finished: RunFinished, width: int) -> list[Content]:
    """The finished run: measurements and findings, each probe's outcome, where the report is."""
    fired = sum(1 for e in st.verdicts.values() if e.verdict.get("status") == "fired")
    head = "stopped" if finished.interrupted else "finished"
    text = wrap_text(f"{head}: {plural(len(st.rows), 'measurement')}, {plural(fired, 'finding')}", width)
    lines = [Content.assemble((head, "bold"), text[0][len(head):])] + [Content(x) for x in text[1:]]
    for f in st.probes_finished:
        mark, style = ("✔", "$text-success") if f.ok else ("✖", "$text-error")
        secs = f" in {fmt_seconds(f.seconds)}" if f.seconds is not None else ""
        text = wrap_text(f"{f.probe}{secs}{'' if f.ok else ': ' + str(f.error)}", width - 2)
        lines.append(Content.assemble((mark, style), " " + text[0]))
        lines += [Content("  " + x) for x in text[1:]]
    where = finished.report_path or finished.run_dir
    lines += [Content.styled(x, "dim") for x in wrap_text(f"report: {where}", width)]
    return lines


def _title_lines(st: DashboardState, p: ProbeProgress, width: int) -> Ranked:
    """The probe's name and position in the plan, its description beside it where it fits, else
    wrapped under it."""
    pos = st.probe_position()
    title = p.name + (f"  probe {pos[0]}/{pos[1]}" if pos else "")
    if len(title) > width:
        title = p.name
    desc = f"  {p.description}" if p.description and len(title) + 2 + len(p.description) <= width else ""
    ranked: Ranked = [(0, Content.assemble((title, "bold"), (desc, "dim")))]
    if p.description and not desc:  # under the title, wrapped, where the panel has the rows
        ranked += [(4, Content.styled(x, "dim")) for x in wrap_text(p.description, width)]
    return ranked


def _what_lines(p: ProbeProgress, width: int) -> Ranked:
    """The variant, the batch and the probe's message."""
    batch: list[Field] = [(0, [f"batch {p.batch_size}" if p.batch_size else ""]), (2, [p.message, ""])]
    what = fit_fields([(0, [p.variant]), *batch], width)
    if len(what) > width:  # a long variant name: on its own line(s), the batch under it
        what = "\n".join([*wrap_text(p.variant, width), fit_fields(batch, width)]).strip()
    return [(0, Content(x)) for x in (what or "preparing…").split("\n")]


def _step_lines(p: ProbeProgress, width: int) -> Ranked:
    """The step of the point being measured and its time, or what comes before the first step."""
    n = len(p.point_steps_ms)
    if not n:
        return [(2, Content.styled(x, "dim")) for x in wrap_text("building the model and the first step…", width)]
    total = f"/{p.steps_per_point}" if p.steps_per_point else ""
    step = [f"step {n}{total} ({p.phase})", f"step {n}{total}"] if p.phase else [f"step {n}{total}"]
    return [(2, Content(fit_fields([(0, step), (1, [f"{fmt_ms(p.step_ms())} per step", ""])], width)))]


def _progress_line(p: ProbeProgress, width: int) -> tuple[int, Content]:
    """A bar of the plan done (of this point where the plan's size is unknown)."""
    frac = p.plan_fraction()
    scope = "of the plan" if frac is not None else "of this point"
    frac = frac if frac is not None else p.point_fraction()
    pct = f" {100 * frac:3.0f}% {scope}" if frac is not None else " searching"
    if frac is not None and len(pct) + 4 > width:
        pct = f" {100 * frac:3.0f}%"
    bar_w = max(4, width - len(pct))
    return (1, Content.assemble((bar(frac, bar_w), "$text-primary"), pct))


def _eta_line(p: ProbeProgress, width: int) -> tuple[int, Content]:
    """The time left in the probe (in the point where the plan's size is unknown), else the points done."""
    eta_point, eta_plan = p.point_eta_s(), p.plan_eta_s()
    if eta_plan is not None:
        eta: list[Field] = [(0, [f"≈ {fmt_seconds(eta_plan)} left in this probe", f"≈ {fmt_seconds(eta_plan)} left"])]
    elif eta_point is not None:
        eta = [(0, [f"≈ {fmt_seconds(eta_point)} left in this point", f"≈ {fmt_seconds(eta_point)} left"]),
               (1, [f"{p.points_done} points done", ""])]
    else:
        eta = [(0, [f"{p.points_done} points done"])]
    return (3, Content.styled(fit_fields(eta, width), "dim"))


TABLE_COLUMNS = [("variant", "variant"), ("batch", "batch"), ("step_ms", "step ms"),
                 ("peak_gib", "peak GiB"), ("tokens_per_s", "tok/s"), ("mfu_pct", "MFU %")]


NARROW_COLUMNS = ("variant", "batch", "step_ms", "peak_gib")  # below 120 columns: the table's share is ~42
NAME_WIDTH = 14  # a variant name longer than this is written over several lines of its row


def wrap_name(name: str, width: int = NAME_WIDTH) -> str:
    """A long variant name over several lines, broken after ':', '/' or '-': every character kept."""
    import re
    parts = [p for p in re.split(r"(?<=[:/-])", name) if p]
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(lines)


class MeasurementsTable(DataTable):
    """One row per measured point (the session's `measurement_row`); out-of-memory rows say so. Below
    120 columns it shows variant, batch, step and peak (tokens/s and MFU are in the report), and a long
    variant name wraps within its row instead of pushing the other columns off the panel."""

    def __init__(self, state: DashboardState, **kw: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)
        self.state = state
        self.shown = 0
        self.narrow: bool | None = None

    def on_mount(self) -> None:
        self.sync()

    def _columns(self) -> list[tuple[str, str]]:
        return [c for c in TABLE_COLUMNS if not self.narrow or c[0] in NARROW_COLUMNS]

    def sync(self) -> None:
        narrow = not getattr(self.app, "wide", True)
        if narrow != self.narrow:  # the width class changed (or first sync): lay the table out again
            self.narrow = narrow
            self.clear(columns=True)
            for key, label in self._columns():
                self.add_column(label, key=key)
            self.shown = 0
        rows = self.state.rows
        first_probe = rows[0][0] if rows else ""
        cols = self._columns()
        for probe, row in rows[self.shown:]:
            oom = row.get("fits") is False
            variant = str(row.get("variant", "")) if probe == first_probe else f"{probe}:{row.get('variant', '')}"
            cells = [wrap_name(variant)] + [fmt_cell(row.get(k)) for k, _ in cols[1:]]
            if oom:  # no step time or peak to show: say why in their place
                cells[2], cells[3] = "OOM", str(row.get("oom_phase") or "")
            self.add_row(*[Content.styled(str(c), "bold $text-error") if oom else c for c in cells],
                         height=cells[0].count("\n") + 1)
        if len(rows) > self.shown:
            self.shown = len(rows)
            self.move_cursor(row=self.row_count - 1)


def verdict_prompt(entry: VerdictEntry) -> Content:
    v = entry.verdict
    sev = v.get("severity", "")
    return Content.assemble((f"{SEVERITY_ICON.get(sev, ' ')} {v.get('code', '')}", SEVERITY_STYLE.get(sev, "")),
                            " ", v.get("headline", ""))


class VerdictList(OptionList):
    """Verdicts as they are issued: the configuration's, then the experiments', each most severe
    first; Enter opens one."""

    def __init__(self, state: DashboardState, placeholder: str = "No verdicts yet: they appear as each probe "
                 "finishes.", **kw: Any) -> None:
        super().__init__(**kw)
        self.state = state
        self.placeholder = placeholder
        self.keys: list[tuple[str, str]] = []
        self._answered = False  # the bottom line has been shown (the run finished)

    def on_mount(self) -> None:
        self.sync()

    def sync(self) -> None:
        entries = self.state.sorted_verdicts()
        current = self.keys[self.highlighted] if self.highlighted is not None and self.highlighted < len(
            self.keys) else None
        self.clear_options()
        self.keys = []
        if self.state.finished is not None and self.state.command != "monitor":
            # the run is over: the answer first, the same rows as the console and the report
            width = self._row_width()
            for i, row in enumerate(self.state.bottom_line(width)):
                key = row.key if row.key in self.state.verdicts and not row.cont else None
                self.keys.append(key or ("", f"row{i}"))
                style = "bold" if row.title else BOTTOM_STYLE.get(row.mark, "")
                self.add_option(Option(Content.styled(row.render(width), style), disabled=key is None))
            self.keys.append(("", "sep"))
            rule = "─ every verdict: yours, then the experiments' ─"
            self.add_option(Option(Content.styled(rule if len(rule) <= width else "─ every verdict ─", "dim"),
                                   disabled=True))
        self.keys += [e.key for e in entries]
        self.add_options([Option(verdict_prompt(e), id=f"{e.key[0]}|{e.key[1]}") for e in entries])
        if not entries and self.state.finished is None:
            self.add_option(Option(Content.styled(self.placeholder, "dim"), disabled=True))
        elif self.keys:
            selectable = [k for k in self.keys if k in self.state.verdicts]
            answer = self.state.finished is not None and self.state.command != "monitor"
            if answer and not self._answered:
                # the run just finished: the answer is what to read first, whatever was highlighted
                self._answered = True
                current = None
                sep = self.keys.index(("", "sep"))
                in_answer = [k for k in selectable if self.keys.index(k) < sep]
                if not in_answer:  # nothing in the bottom line opens a verdict: stay at its top
                    self.highlighted = None
                    self.scroll_home(animate=False)
                    return
                selectable = in_answer
            if selectable:
                self.highlighted = self.keys.index(current if current in selectable else selectable[0])

    def _row_width(self) -> int:
        """Columns a row may use: the list's content width once laid out (less the scrollbar)."""
        w = self.scrollable_content_region.width or self.content_size.width
        if not w:
            w = (self.app.size.width or 80) - 6
        return max(20, min(80, w - 3))  # the option's own padding and the scrollbar

    def on_resize(self) -> None:
        if self.state.finished is not None:
            self.sync()

    def selected_verdict(self) -> dict[str, Any] | None:
        if self.highlighted is None or self.highlighted >= len(self.keys):
            return None
        entry = self.state.verdicts.get(self.keys[self.highlighted])
        return entry.verdict if entry else None


def verdict_detail(v: dict[str, Any] | None, placeholder: str = "No verdict yet.") -> Content:
    """A verdict in full: headline, evidence with units, why, and what to do."""
    if v is None:
        return Content.styled(placeholder, "dim")
    sev = v.get("severity", "")
    subject = f" · {v['subject']}" if v.get("subject") else ""
    parts = [Content.assemble((f"{SEVERITY_ICON.get(sev, '')} {v.get('code', '')} {v.get('slug', '')}",
                               SEVERITY_STYLE.get(sev, "")), f" · {sev}{subject}"),
             Content.styled(v.get("headline", ""), "bold")]
    evidence = v.get("evidence") or []
    if evidence:
        parts.append(Content.styled("\nEvidence", "bold underline"))
        for e in evidence:
            parts.append(Content("  " + Evidence(e.get("label", ""), e.get("value"), e.get("unit", "")).text()))
    if v.get("explanation"):
        parts += [Content.styled("\nWhy", "bold underline"), Content(v["explanation"])]
    if v.get("recommendation"):
        parts += [Content.styled("\nWhat to do", "bold underline"), Content(v["recommendation"])]
    return Content("\n").join(parts)


class VerdictDetail(Widget):
    """The highlighted verdict in full (wide screens; Enter opens it on any screen)."""

    DEFAULT_CSS = "VerdictDetail { height: auto; }"

    def __init__(self, placeholder: str = "No verdict yet. Verdicts appear here as the rules judge each "
                 "probe's facts; the highlighted one is shown in full.", **kw: Any) -> None:
        super().__init__(**kw)
        self.placeholder = placeholder
        self.verdict: dict[str, Any] | None = None

    def show(self, verdict: dict[str, Any] | None) -> None:
        self.verdict = verdict
        self.refresh(layout=True)

    def render(self) -> Content:
        return verdict_detail(self.verdict, self.placeholder)


class LogPane(RichLog):
    """Log lines of the run; warnings and errors in the theme's warning and error colours."""

    def __init__(self, state: DashboardState, **kw: Any) -> None:
        super().__init__(max_lines=1000, min_width=20, wrap=True, markup=False, **kw)
        self.state = state
        self.written = 0

    def sync(self) -> None:
        new = self.state.log_total - self.written
        if new <= 0:
            return
        lines = list(self.state.log)[-min(new, len(self.state.log)):]
        variables = self.app.get_css_variables()
        for line in lines:
            self.write(self._text(line, variables))
        self.written = self.state.log_total

    @staticmethod
    def _text(line: LogLine, variables: dict[str, str]) -> Text:
        var = LOG_STYLE.get(line.level)
        prefix = {"warning": "warning: ", "error": "error: "}.get(line.level, "")
        style = Style(color=variables[var]) if var and variables.get(var, "").startswith("#") else Style()
        return Text(prefix + line.text, style=style)
