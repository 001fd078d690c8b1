"""Ctrl-C keeps what was measured; analyze re-judges a real recorded run without a device."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from gcdoctor.cli import main
from gcdoctor.facts import Facts

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_ctrl_c_mid_run_writes_the_partial_run_directory_and_report(micro_llama, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "gcdoctor", "diagnose", "--no-tui", "--device", "cpu",
                             "--model", micro_llama, "--probes", "sweep", "--seq-len", "32", "--steps", "300",
                             "--batch-sizes", "1,2,4,8,16", "--no-profile", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events = out / "events.jsonl"
    deadline = time.monotonic() + 600  # a loaded machine can take minutes for the first 300 steps
    while time.monotonic() < deadline:  # wait until one measurement is complete
        if events.is_file() and '"MeasurementRecorded"' in events.read_text():
            break
        time.sleep(0.2)
    else:
        proc.kill()
        raise AssertionError("no measurement was recorded within 600 s")
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    facts = Facts.load(out / "facts.json")
    assert facts.settings.interrupted is True
    measured = [m for m in facts.sweep.measurements if m.fits]
    assert 1 <= len(measured) < 10  # what was measured, not the whole plan (10 points of 300 steps)
    assert "The run was interrupted" in (out / "report.md").read_text()
    last = json.loads(events.read_text().strip().splitlines()[-1])
    assert last["type"] == "RunFinished" and last["interrupted"] is True


def test_analyze_rejudges_the_recorded_h200_run(tmp_path, capsys):
    rc = main(["analyze", str(SAMPLES / "h200-llama3-8b-2layers-sweep"), "--out", str(tmp_path / "an")])
    assert rc == 0
    report = json.loads((tmp_path / "an" / "report.json").read_text())
    fired = {(v["code"], v["status"]) for v in report["verdicts"]}
    assert ("GC002", "fired") in fired  # on 2 layers the loss, not the layers, holds the memory
    assert ("GC001", "passed") in fired
    assert report["environment"]["device_name"] == "NVIDIA H200"
    assert (tmp_path / "an" / "report.html").is_file() and (tmp_path / "an" / "report.md").is_file()
    # a threshold override changes the judgement, not the facts
    rc = main(["analyze", str(SAMPLES / "h200-llama3-8b-2layers-sweep"), "--out", str(tmp_path / "an2"),
               "--threshold", "GC002.min_saving_pct=20"])
    report = json.loads((tmp_path / "an2" / "report.json").read_text())
    assert {v["code"]: v["status"] for v in report["verdicts"]}["GC002"] == "passed"
