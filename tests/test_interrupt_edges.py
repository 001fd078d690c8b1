"""Interrupt and crash edges of a real diagnose run: a second Ctrl-C 50-100 ms after the
first loses nothing; any later signal still ends with 130; a probe that fails makes the run
incomplete (exit 3) with its traceback kept; torch's own console noise goes to gcdoctor.log."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gcdoctor import cli
from gcdoctor.errors import EXIT_INCOMPLETE
from gcdoctor.facts import Facts


def _start(micro_llama: str, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gcdoctor", "diagnose", "--no-tui", "--device", "cpu",
                             "--model", micro_llama, "--probes", "sweep", "--seq-len", "32", "--steps", "300",
                             "--batch-sizes", "1,2,4,8,16", "--no-profile", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_a_measurement(proc: subprocess.Popen, out: Path) -> None:
    events = out / "events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if events.is_file() and '"MeasurementRecorded"' in events.read_text():
            return
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be interrupted"


@pytest.mark.parametrize("first, second, when", [
    (signal.SIGINT, signal.SIGINT, 0.07),  # the double Ctrl-C that used to lose report.html
    (signal.SIGTERM, signal.SIGINT, "finished"),  # a later second signal, once the results are written
])
def test_a_second_signal_loses_nothing_and_exits_130(micro_llama, tmp_path, first, second, when) -> None:
    out = tmp_path / "run"
    proc = _start(micro_llama, out)
    _wait_for_a_measurement(proc, out)
    proc.send_signal(first)
    if when == "finished":
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and \
                '"RunFinished"' not in (out / "events.jsonl").read_text():
            time.sleep(0.02)
    else:
        time.sleep(when)
    if proc.poll() is None:
        proc.send_signal(second)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    facts = Facts.load(out / "facts.json")
    assert facts.settings.interrupted is True and facts.settings.finished_at
    last = json.loads((out / "events.jsonl").read_text().strip().splitlines()[-1])
    assert last["type"] == "RunFinished"
    assert not list(out.glob("*.tmp")) and not list(out.glob(".*.tmp"))


def test_a_probe_that_fails_makes_the_run_incomplete(micro_llama, tmp_path, monkeypatch, capsys) -> None:
    from gcdoctor.probes import PROBES
    sweep = next(p for p in PROBES if p.name == "sweep")

    def broken(self, ctx):
        raise RuntimeError("planted probe failure")
    monkeypatch.setattr(type(sweep), "run", broken)
    out = tmp_path / "run"
    rc = cli.main(["diagnose", "--no-tui", "--device", "cpu", "--model", micro_llama, "--probes", "sweep",
                   "--seq-len", "32", "--batch-sizes", "1", "--no-profile", "--out", str(out)])
    assert rc == EXIT_INCOMPLETE
    cap = capsys.readouterr()
    err = cap.err
    assert "incomplete: sweep: probe failed: RuntimeError: planted probe failure" in err
    assert "planted probe failure" in (out / "error.log").read_text()
    # the traceback's frames are error.log's, never the console's
    assert "Traceback" in (out / "error.log").read_text()
    assert 'File "' not in cap.out + err and "Traceback" not in cap.out + err
    said = " ".join((cap.out + err).split())  # the console wraps at 80 columns
    assert "probe sweep failed: RuntimeError: planted probe failure (traceback in" in said
    assert str(out / "error.log") in said.replace(" ", "") or "error.log" in said
    assert (out / "report.html").is_file()


def test_a_quote_in_out_keeps_the_traces_readable(micro_llama, tmp_path) -> None:
    """torch writes the trace's own path into it unescaped: a '"' in --out made every trace
    unreadable and the verdicts quietly lost their trace metrics."""
    out = tmp_path / 'a"b' / "run"
    rc = cli.main(["diagnose", "--no-tui", "--device", "cpu", "--model", micro_llama, "--probes", "sweep",
                   "--seq-len", "16", "--batch-sizes", "1", "--steps", "1", "--warmup", "0", "--out", str(out)])
    assert rc == 0
    facts = Facts.load(out / "facts.json")
    assert facts.trace and not any(k.startswith("trace.") for k in facts.unavailable)
    from gcdoctor.trace import load_trace
    traces = sorted((out / "traces").rglob("*.pt.trace.json.gz"))
    assert len(traces) == 2
    for p in traces:
        load_trace(p)
        doc = json.loads(__import__("gzip").decompress(p.read_bytes()))
        assert doc["traceName"] == str(p)
