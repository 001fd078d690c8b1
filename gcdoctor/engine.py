"""Rule registry and evaluation: facts in, verdicts out. No torch, no device.

A rule states the facts it needs (`requires`, dotted paths into Facts). When one is missing
the engine reports the rule as inconclusive with the recorded reason instead of guessing.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from gcdoctor.facts import Facts
from gcdoctor.facts.serde import from_dict, to_dict

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2, "ok": 3, "inconclusive": 4}


@dataclass
class Evidence:
    label: str
    value: float | int | str | None
    unit: str = ""

    def text(self) -> str:
        v = self.value
        if v is None:
            return f"{self.label}: unavailable"
        if isinstance(v, float):
            v = f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        elif isinstance(v, int):
            v = f"{v:,}"
        return f"{self.label}: {v}{(' ' + self.unit) if self.unit else ''}"


@dataclass
class Verdict:
    code: str
    slug: str
    status: str  # fired | passed | inconclusive
    severity: str  # critical | warning | info | ok | inconclusive
    headline: str
    evidence: list[Evidence] = field(default_factory=list)
    explanation: str = ""
    recommendation: str = ""
    subject: str = ""  # what it is about (a variant, a trace window), when a rule judges several

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

    def check(self, facts: Facts, t: dict[str, float]) -> Verdict | list[Verdict]:
        raise NotImplementedError

    # helpers for subclasses -------------------------------------------------------------
    def fired(self, severity: str, headline: str, evidence: Sequence[Evidence], explanation: str,
              recommendation: str, subject: str = "") -> Verdict:
        return Verdict(self.code, self.slug, "fired", severity, headline, list(evidence),
                       explanation, recommendation, subject)

    def passed(self, headline: str, evidence: Sequence[Evidence] = (), subject: str = "",
               explanation: str = "") -> Verdict:
        return Verdict(self.code, self.slug, "passed", "ok", headline, list(evidence),
                       explanation, "", subject)

    def inconclusive(self, reason: str, subject: str = "") -> Verdict:
        return Verdict(self.code, self.slug, "inconclusive", "inconclusive",
                       f"{self.title}: could not be judged: {reason}", [], "", "", subject)

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
    """All verdicts, most severe first. A rule that crashes is a bug: it is reported, not hidden."""
    if rules is None:
        from gcdoctor.rules import ALL_RULES
        rules = ALL_RULES
    verdicts: list[Verdict] = []
    for rule in rules:
        try:
            verdicts.extend(evaluate_rule(rule, facts, overrides))
        except Exception as exc:  # noqa: BLE001
            verdicts.append(Verdict(rule.code, rule.slug, "inconclusive", "inconclusive",
                                    f"{rule.title}: rule failed with {type(exc).__name__}: {exc}"))
    return sort_verdicts(verdicts)


def sort_verdicts(verdicts: list[Verdict]) -> list[Verdict]:
    return sorted(verdicts, key=lambda v: (SEVERITY_ORDER.get(v.severity, 9), v.code, v.subject))


def known_threshold_names(rules: Iterable[Rule]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for r in rules:
        names[r.code] = set(r.defaults)
        names[r.slug] = set(r.defaults)
    return names
