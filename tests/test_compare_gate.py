"""`gcdoctor compare --fail-on-regression PCT` gates on measurements, never on predictions, and the
console output opens with its own bottom line (regressions first), in 80 columns.

On the two recorded H200 runs of Llama-3-8B (2026-11-30 and the wave-3 run) the measured batch
boundaries are equal and the step times within 1 %, while the memory model's predicted boundaries
moved (3 -> 2 without checkpointing, 13 -> 11 with): a changed prediction is reported, not failed on.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.report.compare import compare_json
from gcdoctor.report.compare import load_run, render_text

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
A = SAMPLES / "h200-llama3-8b-diagnose"
B = SAMPLES / "h200-llama3-8b-diagnose-w3"


@pytest.fixture(scope="module")
def h200():
    return load_run(A), load_run(B)


def test_a_changed_prediction_is_reported_not_a_regression(h200, capsys):
    a, b = h200
    data = compare_json(a, b, 5.0)
    assert data["regressions"] == []
    pred = {r["label"]: (r["a"], r["b"]) for r in data["prediction_changes"]}
    assert pred["largest batch no_gc, predicted"] == (3, 2)
    assert pred["largest batch gc, predicted"] == (13, 11)
    assert main(["compare", str(A), str(B), "--fail-on-regression", "5"]) == 0
    out = capsys.readouterr().out
    assert "no regression beyond 5% in the measurements" in out
    assert main(["compare", str(A), str(B), "--fail-on-regression", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressions"] == []


def test_a_measured_regression_still_fails_and_leads_the_bottom_line(tmp_path, capsys):
    slower = tmp_path / "slower"
    slower.mkdir()
    shutil.copy(B / "config.json", slower / "config.json")
    data = json.loads((B / "facts.json").read_text())
    for m in data["sweep"]["measurements"]:
        if m.get("step_ms_median"):
            m["step_ms_median"] *= 1.2
    (slower / "facts.json").write_text(json.dumps(data))
    assert main(["compare", str(A), str(slower), "--fail-on-regression", "5"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    start = lines.index("Bottom line, B against A (beyond 5%):")
    assert lines[start + 1].startswith("  worse  step time with checkpointing: 1,080.7 ms -> 1,290.5 ms (19.4% worse)")
    assert lines.index("regressions beyond 5% in the measurements (B against A):") > lines.index("Details")


def test_console_output_opens_with_its_bottom_line_in_80_columns(h200):
    a, b = h200
    text = render_text(a, b, width=80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    head = lines[:lines.index("Details")]
    assert len(head) <= 20  # the answer is on the first screen; the details (2,000 lines) follow
    assert head[0] == "gcdoctor compare: llama3-8b on NVIDIA H200, B against A"
    body = "\n".join(head)
    assert "Bottom line, B against A (beyond 5%):" in body
    assert "  same   no measured metric moved beyond 5%" in head
    assert "  pred   largest batch no_gc, predicted: 3 -> 2 (a prediction: not gated)" in head
    assert "  pred   largest batch gc, predicted: 13 -> 11 (a prediction: not gated)" in head
    # the checked marks come before the details, regressions (none here) first, then the rest
    marks = [ln[2:8].strip() for ln in head if ln.startswith("  ") and ln[2:8].strip()]
    order = ["worse", "new", "sev", "better", "gone", "same", "pred", "setup", "..."]
    assert [order.index(m) for m in marks if m in order] == sorted(order.index(m) for m in marks if m in order)
