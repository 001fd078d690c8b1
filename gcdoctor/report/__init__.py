"""Report writers: report.json, report.md (and report.html where available), console summary."""
from __future__ import annotations

import json
from pathlib import Path

from gcdoctor.types import Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.json_report import render_json
from gcdoctor.report.markdown import render_markdown


def write_reports(run_dir: str | Path, facts: Facts, verdicts: list[Verdict],
                  source_dir: str | Path | None = None) -> Path:
    """Write every report format into `run_dir`; return the path a user should open first.

    `source_dir`: the recorded run the facts came from, when it is not `run_dir` (`analyze`
    writing elsewhere): the HTML timeline reads its telemetry.csv and events.jsonl."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "report.json").write_text(json.dumps(render_json(facts, verdicts), indent=1))
    md = run_dir / "report.md"
    md.write_text(render_markdown(facts, verdicts))
    try:
        from gcdoctor.report.html import render_html
    except ImportError:
        return md
    html = run_dir / "report.html"
    html.write_text(render_html(facts, verdicts, run_dir=source_dir or run_dir))
    return html
