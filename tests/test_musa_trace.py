"""A trace shaped as torch_musa's profiler writes one (tests/data/musa-trace.json, made by
tests/data/make_musa_trace.py with hand-chosen intervals) is read as a MUSA device trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcdoctor import cli
from gcdoctor.trace import compute_metrics, load_trace

TRACE = Path(__file__).resolve().parent / "data" / "musa-trace.json"


def test_musa_trace_metrics_are_exact() -> None:
    t = load_trace(TRACE)
    assert t.device_kind == "musa"
    m = compute_metrics(t)
    assert sorted(m) == ["all", "steady", "step:0", "step:1"]
    a = m["all"]
    assert (a.device_kind, a.kernel_count, a.kernel_time_us, a.busy_us) == ("musa", 6, 328.0, 368.0)
    assert (a.launched_kernel_count, a.runtime_call_count, a.runtime_call_us, a.sync_call_us) == (6, 10, 92.0, 40.0)
    assert (a.device_window_us, a.idle_us) == (1420.0, 1052.0)
    h2d = a.memcpy["HtoD"]
    assert (h2d.count, h2d.bytes, h2d.time_us, h2d.pageable_count) == (2, 2 << 20, 40.0, 2)
    assert (m["step:0"].kernel_count, m["step:0"].busy_us) == (3, 184.0)


@pytest.mark.parametrize("cat", ["cuda_runtime", "privateuse1_runtime", "runtime"])
def test_musa_calls_under_another_category_still_read_musa(tmp_path: Path, cat: str) -> None:
    """Whatever category a torch_musa build files its calls under, musa* names make it MUSA."""
    doc = json.loads(TRACE.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "musa_runtime":
            e["cat"] = cat
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    t = load_trace(p)
    assert t.device_kind == "musa"
    assert compute_metrics(t)["all"].launched_kernel_count == 6


def test_analyze_names_the_musa_device(tmp_path: Path, capsys) -> None:
    assert cli.main(["analyze", str(TRACE), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "musa" in out.lower()
    facts = json.loads((tmp_path / "o" / "facts.json").read_text())
    assert facts["environment"]["device_kind"] == "musa"
