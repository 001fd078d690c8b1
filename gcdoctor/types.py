"""What judging produces, for everything that reads it: Verdict, Evidence, the verdict scopes, the
one severity vocabulary (order, marks, words, icons), and the Rule base every rule extends. No
torch, no rules: rules, writers, the TUI and the console import this module; the engine (which
evaluates the rules) imports it too, so nothing imports back up into the engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import inspect
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from gcdoctor.facts.serde import from_dict, to_dict

if TYPE_CHECKING:
    from gcdoctor.facts import Facts

# What a verdict is about:
# - configuration: what the user trains (the sweep's model at its settings, a watched run, the user's
#   own trace); these decide `--fail-on` and lead the bottom line.
# - experiment: what a probe's variant showed about this device and software stack (a granularity
#   or offload variant, the launch-cost microbenchmark); its severity grades that variant only.
CONFIGURATION, EXPERIMENT = "configuration", "experiment"
SCOPES = (CONFIGURATION, EXPERIMENT)
LINE_WIDTH = 72  # Verdict.line: one bottom-line row after its 6-column mark; longer lines wrap once


@dataclass(frozen=True)
class Severity:
    """One severity and every way it is written."""
    name: str
    mark: str  # the bottom line's and compare's column: err, crit, warn, note, ok, ?
    label: str  # the Markdown heading's: ERROR, CRITICAL, WARNING, note, ok, ?
    word: str  # the HTML counts': error, critical, warning, note, passed, could not run
    console: str  # the live console's two columns
    icon: str  # the TUI's glyph
    style: str  # the TUI's Textual style

    @property
    def badge(self) -> str:
        """The HTML badge: the label in capitals."""
        return self.label.upper()


# most severe first; the position is the sort order
SEVERITIES: tuple[Severity, ...] = (
    Severity("error", "err", "ERROR", "error", "E!", "✗", "bold $text-error"),
    Severity("critical", "crit", "CRITICAL", "critical", "!!", "✖", "bold $text-error"),
    Severity("warning", "warn", "WARNING", "warning", "! ", "▲", "bold $text-warning"),
    Severity("info", "note", "note", "note", "i ", "●", "$text-primary"),
    Severity("ok", "ok", "ok", "passed", "ok", "✔", "$text-success"),
    Severity("inconclusive", "?", "?", "could not run", "  ", "?", "dim"),
)
SEVERITY = {s.name: s for s in SEVERITIES}
SEVERITY_ORDER = {s.name: i for i, s in enumerate(SEVERITIES)}
UNKNOWN_RANK = 9  # a severity outside the vocabulary sorts last


def severity_rank(severity: str) -> int:
    return SEVERITY_ORDER.get(severity, UNKNOWN_RANK)


@dataclass
class Evidence:
    label: str
    value: float | int | str | None
    unit: str = ""

    def text(self) -> str:
        v = self.value
        if v is None:
            return f"{self.label}: unavailable"
        if self.unit == "GiB" and isinstance(v, (int, float)) and not isinstance(v, bool):
            from gcdoctor.units import fmt_gib_value
            return f"{self.label}: {fmt_gib_value(float(v))}"
        if isinstance(v, float):
            v = f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        elif isinstance(v, int):
            v = f"{v:,}"
        return f"{self.label}: {v}{(' ' + self.unit) if self.unit else ''}"


@dataclass
class Verdict:
    code: str
    slug: str
    status: str  # fired | passed | inconclusive | error (the rule raised: a bug, kept in `traceback`)
    severity: str  # error | critical | warning | info | ok | inconclusive (SEVERITIES)
    headline: str
    evidence: list[Evidence] = field(default_factory=list)
    explanation: str = ""
    recommendation: str = ""
    subject: str = ""  # what it is about (a variant, a trace window), when a rule judges several
    scope: str = CONFIGURATION  # configuration | experiment (SCOPES)
    # a line (best within LINE_WIDTH characters, at most two) for the bottom line. Configuration verdicts: the finding
    # in short. Experiment verdicts: set only on a *device finding*, a lesson about this device that
    # changes what the user should do ("CPU activation offload costs +188 % here: avoid it"); the
    # bottom line shows at most three of them, most severe first.
    line: str = ""
    topic: str = ""  # the report section it belongs to: sweep, memory, granularity, offload, jitter, trace, ...
    traceback: str = ""  # status "error": where the rule raised
    # codes of the verdicts this one folds in (the recipe's allocator and optimizer): the bottom line
    # does not repeat them as rows of their own
    folds: list[str] = field(default_factory=list)
    # the bottom line's mark for this verdict where the rule chooses it: the recipe is "use" once a
    # fresh process confirmed it and "try" while it is not confirmed; empty: the mark of its kind
    mark: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Verdict":
        return from_dict(cls, data)

    @property
    def key(self) -> tuple[str, str]:
        return (self.code, self.subject)


class Rule:
    """Base of every rule. Subclasses set code, slug, title, requires, defaults and `check`.

    The docstring has four sections, in this order: What it checks, Why it matters,
    Evidence, How to fix. `gcdoctor explain CODE` prints it.
    """

    code: str = ""
    slug: str = ""
    title: str = ""
    requires: tuple[str, ...] = ()
    defaults: dict[str, float] = {}
    scope: str = CONFIGURATION  # of its verdicts, unless a verdict says otherwise
    topic: str = ""

    def check(self, facts: Facts, t: dict[str, float]) -> Verdict | list[Verdict]:
        raise NotImplementedError

    # helpers for subclasses -------------------------------------------------------------
    def fired(self, severity: str, headline: str, evidence: Sequence[Evidence], explanation: str,
              recommendation: str, subject: str = "", *, scope: str | None = None, line: str = "",
              topic: str | None = None) -> Verdict:
        return Verdict(self.code, self.slug, "fired", severity, headline, list(evidence),
                       explanation, recommendation, subject, scope or self.scope, line,
                       self.topic if topic is None else topic)

    def passed(self, headline: str, evidence: Sequence[Evidence] = (), subject: str = "",
               explanation: str = "", *, scope: str | None = None, line: str = "",
               topic: str | None = None) -> Verdict:
        return Verdict(self.code, self.slug, "passed", "ok", headline, list(evidence),
                       explanation, "", subject, scope or self.scope, line, self.topic if topic is None else topic)

    def inconclusive(self, reason: str, subject: str = "", *, scope: str | None = None,
                     topic: str | None = None) -> Verdict:
        return Verdict(self.code, self.slug, "inconclusive", "inconclusive",
                       f"{self.title}: could not be judged: {reason}", [], "", "", subject,
                       scope or self.scope, "", self.topic if topic is None else topic)

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")


def verdict_order(v: Verdict) -> tuple[int, str, str]:
    """The one order of verdicts: most severe first, then by code and subject."""
    return (severity_rank(str(v.severity)), str(v.code), str(v.subject))  # odd types from a broken rule never compare


def sort_verdicts(verdicts: Iterable[Verdict]) -> list[Verdict]:
    return sorted(verdicts, key=verdict_order)
