"""Rule registry and evaluation: facts in, verdicts out. No torch, no device.

A rule states the facts it needs (`requires`, dotted paths into Facts). When one is missing
the engine reports the rule as inconclusive with the recorded reason instead of guessing.
"""
from __future__ import annotations

import traceback
from typing import Iterable

from gcdoctor.facts import Facts
# the verdict vocabulary and the Rule base live in gcdoctor.types; re-exported here for code that imports
# them from the engine
from gcdoctor.types import (CONFIGURATION, EXPERIMENT, LINE_WIDTH, SCOPES, SEVERITY_ORDER, Evidence,  # noqa: F401
                            Rule, Verdict, sort_verdicts)


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
    out = out if isinstance(out, list) else [out]
    for v in out:  # a verdict the writers cannot read is the rule's bug, caught here, not in a writer
        if not isinstance(v, Verdict):
            raise TypeError(f"{rule.code} returned {type(v).__name__}, not a Verdict")
        for name in ("code", "slug", "status", "severity", "headline", "subject", "scope", "line", "topic"):
            if not isinstance(getattr(v, name), str):
                raise TypeError(f"{rule.code}: verdict field {name} is {type(getattr(v, name)).__name__}, not str")
        if v.severity not in SEVERITY_ORDER:
            raise ValueError(f"{rule.code}: unknown severity {v.severity!r}")
    return out


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
        except Exception as exc:  # noqa: BLE001 - RecursionError and MemoryError on odd facts too
            msg = (str(exc).splitlines() or [""])[0][:300]
            verdicts.append(Verdict(str(rule.code), str(rule.slug), "error", "error",
                                    f"{rule.title}: the rule failed ({type(exc).__name__}: {msg}); this is a "
                                    "gcdoctor bug", scope=rule.scope, topic=rule.topic,
                                    traceback=traceback.format_exc()))
    return sort_verdicts(verdicts)


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


def rule_errors_text(verdicts: Iterable[Verdict]) -> str:
    """The tracebacks of the rules that raised, as error.log keeps them ("" when none did)."""
    return "".join(f"rule {v.code} ({v.slug}) raised{' on ' + v.subject if v.subject else ''}:\n{v.traceback}"
                   + ("" if v.traceback.endswith("\n") else "\n")
                   for v in verdicts if v.status == "error" and v.traceback)


def known_threshold_names(rules: Iterable[Rule]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for r in rules:
        names[r.code] = set(r.defaults)
        names[r.slug] = set(r.defaults)
    return names
