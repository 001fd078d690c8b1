"""docs/report-schema.md is the contract of report.json: its reference matches the code, and
report.json files of real recorded runs conform to it key by key and type by type."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.report.json_report import REPORT_SCHEMA, render_json
from gcdoctor.report.schema import render_reference, splice

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "report-schema.md"
RUNS = sorted(p.parent for p in (REPO / "samples").rglob("facts.json"))
PRIMITIVE = {"int", "float", "str", "bool", "null", "any"}


def documented_objects(text: str) -> dict[str, dict[str, str]]:
    """{object name: {field: type}} from every '### Name' table of the document."""
    objects: dict[str, dict[str, str]] = {}
    current = None
    for line in text.splitlines():
        h = re.match(r"^### (\w+)\s*$", line)
        if h:
            current = objects.setdefault(h.group(1), {})
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if current is not None and len(cells) >= 2 and cells[0].startswith("`"):
            current[cells[0].strip("`")] = cells[1].strip("`")
    return objects


def split_top(text: str, sep: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == sep and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


def check(value, tp: str, path: str, objects: dict[str, dict[str, str]], errors: list[str], exact: bool) -> None:
    """Append to `errors` every place where `value` does not have the documented type `tp`."""
    alts = split_top(tp, "|")
    if len(alts) > 1:
        for alt in alts:
            errs: list[str] = []
            check(value, alt, path, objects, errs, exact)
            if not errs:
                return
        errors.append(f"{path}: {value!r:.60} is none of {tp}")
        return
    if tp == "any":
        return
    if tp == "null":
        if value is not None:
            errors.append(f"{path}: expected null")
    elif tp == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: expected int, got {value!r:.40}")
    elif tp == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append(f"{path}: expected float, got {value!r:.40}")
    elif tp == "str":
        if not isinstance(value, str):
            errors.append(f"{path}: expected str, got {value!r:.40}")
    elif tp == "bool":
        if not isinstance(value, bool):
            errors.append(f"{path}: expected bool, got {value!r:.40}")
    elif tp.startswith("list[") and tp.endswith("]"):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            check(item, tp[5:-1], f"{path}[{i}]", objects, errors, exact)
    elif tp.startswith("dict[") and tp.endswith("]"):
        key_tp, val_tp = split_top(tp[5:-1], ",")
        if not isinstance(value, dict):
            errors.append(f"{path}: expected an object")
            return
        for k, v in value.items():
            check(v, val_tp, f"{path}[{k!r}]", objects, errors, exact)
    elif tp in objects:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a {tp} object")
            return
        fields = objects[tp]
        undocumented = set(value) - set(fields)
        if undocumented:
            errors.append(f"{path}: keys not in the schema of {tp}: {sorted(undocumented)}")
        missing = set(fields) - set(value)
        if exact and missing:
            errors.append(f"{path}: documented keys of {tp} missing: {sorted(missing)}")
        for name, ftp in fields.items():
            if name in value:
                check(value[name], ftp, f"{path}.{name}", objects, errors, exact)
    else:
        errors.append(f"{path}: the schema names an undocumented type {tp!r}")


def conform(report: dict, exact: bool) -> list[str]:
    errors: list[str] = []
    check(report, "Report", "report", documented_objects(DOC.read_text()), errors, exact)
    return errors


def fresh_report(run: Path) -> dict:
    facts = Facts.load(run / "facts.json")
    return json.loads(json.dumps(render_json(facts, evaluate(facts))))


def test_generated_reference_matches_the_code():
    doc = DOC.read_text()
    assert splice(doc, render_reference()) == doc, (
        "docs/report-schema.md is stale: run `python -m gcdoctor.report.schema --write`")


def test_every_type_the_document_names_is_documented():
    objects = documented_objects(DOC.read_text())
    assert {"Report", "Verdict", "Evidence", "Facts", "Environment", "SweepFacts", "Measurement"} <= set(objects)
    for name, fields in objects.items():
        for field, tp in fields.items():
            names = set(re.findall(r"[A-Za-z_]\w*", tp)) - PRIMITIVE - {"list", "dict"}
            assert names <= set(objects), f"{name}.{field}: {tp}"


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_report_rendered_from_a_recorded_run_conforms_exactly(run):
    report = fresh_report(run)
    assert report["schema"] == REPORT_SCHEMA == "gcdoctor.report/2"
    assert conform(report, exact=True) == []


@pytest.mark.parametrize("run", [r for r in RUNS if (r / "report.json").is_file()],
                         ids=[r.name for r in RUNS if (r / "report.json").is_file()])
def test_recorded_report_json_conforms(run):
    # written when the run ended, possibly by an older gcdoctor of the same schema version: every key
    # it has must be documented with its type (newer fields may be absent)
    assert conform(json.loads((run / "report.json").read_text()), exact=False) == []


def test_a_report_that_breaks_the_schema_is_caught():
    if not RUNS:
        pytest.skip("no recorded runs under samples/")
    report = fresh_report(RUNS[0])
    bad = copy.deepcopy(report)
    bad["facts"]["settings"]["seq_len"] = "128"
    bad["verdicts"][0]["severity"] = None
    bad["facts"]["environment"]["gpu_name"] = "x"
    del bad["generated_at"]
    errors = conform(bad, exact=True)
    assert "report.facts.settings.seq_len: expected int, got '128'" in errors
    assert any(e.startswith("report.verdicts[0].severity") for e in errors)
    assert "report.facts.environment: keys not in the schema of Environment: ['gpu_name']" in errors
    assert "report: documented keys of Report missing: ['generated_at']" in errors
