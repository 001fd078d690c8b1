"""report.json: a versioned, documented schema (docs/report-schema.md) for other tools."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from gcdoctor.types import Verdict
from gcdoctor.facts import Facts

REPORT_SCHEMA = "gcdoctor.report/2"


def render_json(facts: Facts, verdicts: list[Verdict]) -> dict[str, Any]:
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": facts.to_dict()["environment"],
        "verdicts": [v.to_dict() for v in verdicts],
        "facts": facts.to_dict(),
    }
