"""Rule registry and evaluation: facts in, verdicts out. No torch, no device.

A rule states the facts it needs (`requires`, dotted paths into Facts). When one is missing
the engine reports the rule as inconclusive with the recorded reason instead of guessing.
"""
from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from gcdoctor.facts import Facts
from gcdoctor.facts.serde import from_dict, to_dict

SEVERITY_ORDER = {"error": 0, "critical": 1, "warning": 2, "info": 3, "ok": 4, "inconclusive": 5}

# What a verdict is about (DESIGN.md, "What the user reads first"):
# - configuration: what the user trains (the sweep's model at its settings, a watched run, the user's
#   own trace); these decide `--fail-on` and lead the bottom line.
# - experiment: what a probe's variant showed about this device and software stack (a granularity
#   or offload variant, the launch-cost microbenchmark); its severity grades that variant only.
CONFIGURATION, EXPERIMENT = "configuration", "experiment"
SCOPES = (CONFIGURATION, EXPERIMENT)
LINE_WIDTH = 72  # Verdict.line: one bottom-line row after its 6-column mark; longer lines wrap once


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
    severity: str  # error | critical | warning | info | ok | inconclusive
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


def resolve_thresholds(rule: Rule, overrides: dict[str, dict[str, float]] | None) -> dict[str, float]:
    """Defaults beside the rule, overridden by `{code or slug: {name: value}}`."""
    t = dict(rule.defaults)
    for key in (rule.slug, rule.code):
        for name, value in ((overrides or {}).get(key) or {}).items():
            t[name] = float(value)
    return t


def evaluate_rule(rule: Rule, facts: Facts, overrides: dict[str, dict[str, float]] | None = None) -> list[Verdict]:
    for path in rule.requires:
        if facts.get(path) is None:
            return [rule.inconclusive(facts.missing_reason(path))]
    out = rule.check(facts, resolve_thresholds(rule, overrides))
    return out if isinstance(out, list) else [out]


def evaluate(facts: Facts, rules: Iterable[Rule] | None = None,
             overrides: dict[str, dict[str, float]] | None = None) -> list[Verdict]:
    """All verdicts, most severe first. A rule that crashes is a bug: it is reported (status
    "error", with its traceback), not hidden, and it makes the run incomplete."""
    if rules is None:
        from gcdoctor.rules import ALL_RULES
        rules = ALL_RULES
    verdicts: list[Verdict] = []
    for rule in rules:
        try:
            verdicts.extend(evaluate_rule(rule, facts, overrides))
        except Exception as exc:  # noqa: BLE001
            verdicts.append(Verdict(rule.code, rule.slug, "error", "error",
                                    f"{rule.title}: the rule failed ({type(exc).__name__}: {exc}); this is a "
                                    "gcdoctor bug", scope=rule.scope, topic=rule.topic,
                                    traceback=traceback.format_exc()))
    return sort_verdicts(verdicts)


def sort_verdicts(verdicts: list[Verdict]) -> list[Verdict]:
    return sorted(verdicts, key=lambda v: (SEVERITY_ORDER.get(v.severity, 9), v.code, v.subject))


FAIL_SEVERITIES = {"critical": ("error", "critical"), "warning": ("error", "critical", "warning")}


def failing(verdicts: Iterable[Verdict], fail_on: str | None, include_experiments: bool = False) -> list[Verdict]:
    """The verdicts that make `--fail-on SEVERITY` fail: fired configuration verdicts of that severity
    or worse, and rules that raised. Experiments count only when asked for: their severity grades a
    probe's variant, not the user's setup."""
    if not fail_on:
        return []
    bad = FAIL_SEVERITIES[fail_on]
    return [v for v in verdicts if v.status in ("fired", "error") and v.severity in bad
            and (include_experiments or v.scope != EXPERIMENT or v.status == "error")]


def known_threshold_names(rules: Iterable[Rule]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for r in rules:
        names[r.code] = set(r.defaults)
        names[r.slug] = set(r.defaults)
    return names
