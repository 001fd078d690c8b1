"""The rules, in one explicit table. Each module holds one rule; no import-time discovery."""
from __future__ import annotations

from gcdoctor.engine import Rule

ALL_RULES: list[Rule] = [
]

BY_CODE: dict[str, Rule] = {r.code: r for r in ALL_RULES}
BY_SLUG: dict[str, Rule] = {r.slug: r for r in ALL_RULES}


def find_rule(name: str) -> Rule | None:
    """A rule by code (case-insensitive) or slug."""
    return BY_CODE.get(name.upper()) or BY_SLUG.get(name.lower())
