"""The bottom line: the answer to "is checkpointing doing what I think, and what should I change?" in
at most 12 lines of 80 columns, the same in the console summary, report.md, report.html's first screen
and the TUI's verdict panel.

In order: the prescription (the recipe: the first row after the title, and never the row that is
cut), what stopped the run from being complete (a crashed probe, a rule that raised, an
interruption), the configuration verdicts that fired (most severe first) or, when none did, the ones
that passed, at most three device findings from the experiments, and how many further findings there
are below. Verdicts the recipe folds in (`Verdict.folds`: its allocator setting, its optimizer) are
not repeated as rows of their own. The rules decide what each line says (`Verdict.line`) and which
experiment verdicts are device findings; this module only selects by scope and severity, orders, wraps
and counts.
"""
from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from gcdoctor.types import CONFIGURATION, EXPERIMENT, Verdict, verdict_order
from gcdoctor.facts import Facts
from gcdoctor.report.format import term_safe

MAX_LINES = 12
WIDTH = 80
MARK_WIDTH = 6  # "  warn " : two spaces, a four-letter mark, one space
MARK = {"error": "err", "critical": "crit", "warning": "warn", "info": "note", "ok": "ok",
        "inconclusive": "?"}
PRESCRIPTION = "prescription"  # Verdict.topic of the prescription rule (GC007)
MAX_DEVICE_FINDINGS = 3


@dataclass
class Row:
    """One line of the bottom line: a mark and the text, and the verdict it comes from (if any)."""

    mark: str
    text: str
    key: tuple[str, str] | None = None  # (code, subject) of its verdict: the TUI opens it on Enter
    cont: bool = False  # a continuation of the row above
    title: bool = False  # the first row: "Bottom line: <what ran where>"

    def render(self, width: int = WIDTH) -> str:
        # one row is one line: a newline or a control character inside a name (a device called
        # "H200\n  ok   ...") must not forge a row of its own
        text = " ".join(term_safe(self.text).replace("\t", " ").split("\n"))
        if self.title:
            return f"  {text}" if self.cont else text
        head = "" if self.cont else self.mark
        return f"  {head:<4} {text}"


def _wrap(mark: str, text: str, key: tuple[str, str] | None, width: int) -> list[Row]:
    """A text on one row, or wrapped over as many rows as it needs: never cut (a block that does not
    fit the bottom line's budget is left out whole and counted in the pointer)."""
    avail = width - MARK_WIDTH - 1
    # a number keeps its unit: never a row ending "-21" and the next starting "%)"
    glued = re.sub(r"(?<=\d) (?=%)", "\u00a0", " ".join(text.split()))
    parts = [p.replace("\u00a0", " ") for p in textwrap.wrap(glued, avail, break_on_hyphens=False)] or [""]
    return [Row(mark, p, key, cont=i > 0) for i, p in enumerate(parts)]


def _text(v: Verdict) -> str:
    return v.line or v.headline


def run_title(what: str, device: str | None, layers: int | None = None, layers_full: int | None = None,
              seq_len: int | None = None, dtype: str | None = None, optimizer: str | None = None) -> str:
    """The run's title, one wording for every front end: 'llama3-8b (2 of 32 layers) on NVIDIA
    H200, seq 4096, bf16, AdamW'; the parts not given are left out."""
    if layers and layers_full and layers < layers_full:
        what += f" ({layers} of {layers_full} layers)"
    parts = [f"{what} on {device or 'an unknown device'}"]
    if seq_len:
        parts.append(f"seq {seq_len}")
    if dtype:
        parts.append(str(dtype))
    if optimizer:
        parts.append({"adamw": "AdamW", "sgd": "SGD"}.get(optimizer, str(optimizer)))
    return ", ".join(parts)


def title_of(facts: Facts) -> str:
    """'llama3-8b on NVIDIA H200, seq 4096, bf16, AdamW' from what the facts hold (nothing invented)."""
    m, e, st = facts.model, facts.environment, facts.settings
    what = m.name if m is not None and m.name else ("your trace" if st.command == "analyze" else "the run")
    device = e.device_name or e.device_kind or 'an unknown device'
    d = facts.distributed
    if d is not None:  # a sharded run: every rank's device
        device = f"{d.world_size}x {device} { {'zero3': 'ZeRO-3'}.get(d.strategy, d.strategy.upper())}"
    if m is None:
        return run_title(what, device)
    return run_title(what, device, m.n_layers, m.n_layers_full, st.seq_len, st.dtype, st.optimizer)


def title_from_settings(settings: dict, environment: dict) -> str:
    """The same title from a RunStarted event's settings and environment (the TUI has no Facts)."""
    return run_title(settings.get("model") or "the run",
                     environment.get("device_name") or environment.get("device_kind"),
                     settings.get("layers"), settings.get("layers_full"), settings.get("seq_len"),
                     settings.get("dtype"), settings.get("optimizer"))


def problems_of(facts: Facts) -> list[str]:
    """What makes the run incomplete: an interruption, an error, probes that crashed."""
    st = facts.settings
    out = []
    if st.interrupted:
        out.append("the run was interrupted: the verdicts judge what was measured before it stopped")
    if st.error:
        out.append(f"the run ended with an error: {st.error}")
    for name, error in sorted(facts.failed_probes.items()):
        out.append(f"probe {name} crashed ({error}): its verdicts are missing")
    return out


UNJUDGED = ": could not be judged: "


def unjudged_reasons(facts: Facts, verdicts: list[Verdict]) -> list[tuple[str, str]]:
    """(code, reason) of the configuration rules that had their data and still could not judge it
    (step times too noisy, too few steps): the reason the user can act on, unlike a probe not run."""
    from gcdoctor.rules import find_rule
    out: list[tuple[str, str]] = []
    for v in verdicts:
        if v.scope == EXPERIMENT or v.status != "inconclusive" or UNJUDGED not in v.headline:
            continue
        rule = find_rule(v.code)
        if rule is None or any(facts.get(path) is None for path in rule.requires):
            continue
        reason = v.headline.split(UNJUDGED, 1)[1]
        if all(reason != r for _, r in out):
            out.append((v.code, reason))
    return out


@dataclass
class _Selection:
    """The verdicts the bottom line draws on, by the role each plays in it."""

    prescription: list[Verdict]
    fired: list[Verdict]  # configuration verdicts that fired
    passed: list[Verdict]  # configuration verdicts that passed with a line of their own
    passed_quiet: list[Verdict]  # ... and without one
    experiments: list[Verdict]
    errors: list[Verdict]  # experiment rules that raised
    findings: list[Verdict]  # the device findings offered a row


def _select(verdicts: list[Verdict]) -> _Selection:
    ordered = sorted(verdicts, key=verdict_order)
    prescription = [v for v in ordered if v.topic == PRESCRIPTION and (v.status != "inconclusive" or v.line)]
    folded = {code for v in prescription if v.status == "fired" for code in v.folds}
    ordered = [v for v in ordered if v.code not in folded or v.status == "error"]
    config = [v for v in ordered if v.scope != EXPERIMENT and v.topic != PRESCRIPTION]
    experiments = [v for v in ordered if v.scope == EXPERIMENT]
    return _Selection(
        prescription=prescription,
        fired=[v for v in config if v.status in ("fired", "error")],
        passed=[v for v in config if v.status == "passed" and v.line],
        passed_quiet=[v for v in config if v.status == "passed" and not v.line],
        experiments=experiments,
        errors=[v for v in experiments if v.status == "error"],
        findings=[v for v in experiments if v.line and v.status == "fired"][:MAX_DEVICE_FINDINGS])


def _verdict_block(kind: str, mark: str, v: Verdict, width: int) -> tuple[str, list[Row]]:
    return kind, _wrap(mark, _text(v), (v.code, v.subject), width)


def _healthy_block(sel: _Selection, unjudged: list[tuple[str, str]] | None, width: int) -> list[Row]:
    """The row that says why nothing fired: the rules that passed quietly, or why nothing was judged."""
    if sel.passed_quiet:  # rules that passed without a line of their own: say they did
        codes = ", ".join(sorted({v.code for v in sel.passed_quiet}))
        return _wrap("ok", f"no problem found in what you train: {codes} passed", None, width)
    if unjudged:  # say why: the first reason, and how many rules gave one
        code, reason = unjudged[0]
        more = f"; {len(unjudged) - 1} more reasons in the report" if len(unjudged) > 1 else ""
        return _wrap("?", f"nothing about your configuration could be judged: {reason} ({code}{more})", None, width)
    return _wrap("?", "nothing about your configuration could be judged from what was measured", None, width)


def _blocks(sel: _Selection, problems: list[str] | None, unjudged: list[tuple[str, str]] | None,
            width: int) -> list[tuple[str, list[Row]]]:
    """The candidate blocks in priority order, the recipe first; each is shown whole or not at all."""
    blocks: list[tuple[str, list[Row]]] = [("problem", _wrap("stop", p, None, width)) for p in problems or []]
    blocks += [_verdict_block("fired", MARK.get(v.severity, "?"), v, width) for v in sel.fired + sel.errors]
    # the healthy answers ("costs +22 %, saves 67 %") come before advice
    blocks += [_verdict_block("ok", "ok", v, width) for v in sel.passed]
    blocks += [_verdict_block("use", (v.mark or "use") if v.status != "inconclusive" else "?", v, width)
               for v in sel.prescription]
    blocks += [_verdict_block("dev", "dev", v, width) for v in sel.findings]
    if not sel.fired and not sel.errors and not problems and not sel.passed:
        blocks.insert(0, ("healthy", _healthy_block(sel, unjudged, width)))
    # the recipe is placed first and always shown: it is never the block that is cut
    blocks.sort(key=lambda b: b[0] != "use")
    return blocks


def _fill(blocks: list[tuple[str, list[Row]]], budget: int) -> tuple[list[tuple[str, list[Row]]], dict[str, int]]:
    """The blocks that fit `budget` rows in priority order (the recipe always), and how many of each
    kind were left out."""
    shown: list[tuple[str, list[Row]]] = []
    used = 0
    left_out: dict[str, int] = {}
    for kind, rows in blocks:
        if kind == "use" or used + len(rows) <= budget:
            shown.append((kind, rows))
            used += len(rows)
        else:
            left_out[kind] = left_out.get(kind, 0) + 1
    return shown, left_out


BLOCK_ORDER = ["use", "problem", "healthy", "fired", "ok", "dev"]


def bottom_line(verdicts: list[Verdict], title: str, problems: list[str] | None = None,
                width: int = WIDTH, max_lines: int = MAX_LINES,
                unjudged: list[tuple[str, str]] | None = None) -> list[Row]:
    """The rows, title first, at most `max_lines` of at most `width` columns."""
    sel = _select(verdicts)
    blocks = _blocks(sel, problems, unjudged, width)
    titles = [Row("", t.strip(), title=True, cont=i > 0) for i, t in enumerate(
        textwrap.wrap(f"Bottom line: {title}", width, subsequent_indent="  ", break_on_hyphens=False))]
    pointer_len = 1  # rows kept for the pointer to the rest; more if it wraps
    while True:
        shown, left_out = _fill(blocks, max_lines - len(titles) - pointer_len)
        # a device finding left out for room counts among the ones "below"
        shown_dev = {rows[0].key for kind, rows in shown if kind == "dev"}
        pointer = _pointer(sel.experiments, [v for v in sel.findings if (v.code, v.subject) in shown_dev], left_out)
        pointer_rows = _wrap("...", pointer, None, width) if pointer else []
        if len(pointer_rows) <= pointer_len or pointer_len >= max_lines:
            break
        pointer_len = len(pointer_rows)  # the pointer wraps: fill again with the room that leaves
    shown.sort(key=lambda b: BLOCK_ORDER.index(b[0]))
    out = list(titles)
    for _, rows in shown:
        out += rows
    return out + pointer_rows


def _pointer(experiments: list[Verdict], findings: list[Verdict], left_out: dict[str, int]) -> str:
    more = [v for v in experiments if v.status == "fired" and v not in findings]
    by_topic: dict[str, int] = {}
    for v in more:
        by_topic[v.topic or "other"] = by_topic.get(v.topic or "other", 0) + 1
    parts = []
    if left_out.get("fired") or left_out.get("problem"):
        n = left_out.get("fired", 0) + left_out.get("problem", 0)
        parts.append(f"{n} more configuration finding{'s' if n != 1 else ''}")
    if by_topic:
        n = sum(by_topic.values())
        parts.append(f"{n} more experiment finding{'s' if n != 1 else ''} ("
                     + ", ".join(f"{t} {k}" for t, k in sorted(by_topic.items(), key=lambda x: -x[1])) + ")")
    if not parts:
        return ""
    return " and ".join(parts) + " below"


def bottom_line_for(facts: Facts, verdicts: list[Verdict], width: int = WIDTH) -> list[Row]:
    return bottom_line(verdicts, title_of(facts), problems_of(facts), width=width,
                       unjudged=unjudged_reasons(facts, verdicts))


def bottom_line_text(facts: Facts, verdicts: list[Verdict], width: int = WIDTH) -> str:
    return "\n".join(r.render(width) for r in bottom_line_for(facts, verdicts, width))


__all__ = ["CONFIGURATION", "MAX_LINES", "Row", "bottom_line", "bottom_line_for", "bottom_line_text",
           "problems_of", "run_title", "title_of"]
