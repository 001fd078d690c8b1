"""The exit-code contract (docs/exit-codes.md), code by code: 0 ok, 1 --fail-on fired, 2 user
error, 3 incomplete (a probe or a rule crashed, a crash, a run cut short), 130 interrupted."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gcdoctor import cli
from gcdoctor.errors import EXIT_FAIL_ON, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "samples" / "cpu-tiny-llama-sweep"


def _copy(tmp_path: Path, edit=None) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    data = json.loads((SWEEP / "facts.json").read_text())
    if edit:
        edit(data)
    (run / "facts.json").write_text(json.dumps(data))
    return run


def test_0_ok(tmp_path: Path) -> None:
    assert cli.main(["analyze", str(SWEEP), "--out", str(tmp_path / "o")]) == EXIT_OK
    assert cli.main(["rules"]) == EXIT_OK


def test_1_fail_on_judges_configuration_verdicts(tmp_path: Path) -> None:
    # the sample's GC001 warning is a configuration verdict: it fails --fail-on warning
    assert cli.main(["analyze", str(SWEEP), "--out", str(tmp_path / "o"), "--fail-on", "warning"]) == EXIT_FAIL_ON
    assert cli.main(["analyze", str(SWEEP), "--out", str(tmp_path / "p"), "--fail-on", "critical"]) == EXIT_OK


def test_1_fail_on_experiments_only_with_the_flag(tmp_path: Path) -> None:
    gran = REPO / "samples" / "h200-llama3-8b-diagnose"
    from gcdoctor.engine import evaluate
    from gcdoctor.types import EXPERIMENT
    from gcdoctor.facts import Facts
    verdicts = evaluate(Facts.load(gran / "facts.json"))
    exp = [v for v in verdicts if v.scope == EXPERIMENT and v.status == "fired" and v.severity == "critical"]
    conf = [v for v in verdicts if v.scope != EXPERIMENT and v.status == "fired" and v.severity == "critical"]
    assert exp and not conf
    assert cli.main(["analyze", str(gran), "--out", str(tmp_path / "a"), "--fail-on", "critical"]) == EXIT_OK
    assert cli.main(["analyze", str(gran), "--out", str(tmp_path / "b"), "--fail-on", "critical",
                     "--fail-on-experiments"]) == EXIT_FAIL_ON


def test_2_user_error(tmp_path: Path, capsys) -> None:
    assert cli.main(["diagnose", "--seq-len", "1000000000000"]) == EXIT_USAGE
    assert cli.main(["analyze", str(tmp_path / "missing")]) == EXIT_USAGE
    assert cli.main(["analyze", "/dev/null"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("gcdoctor: error:") for line in err)
    assert "not a run directory or a trace file" in err[-1]


def test_3_a_probe_failed(tmp_path: Path, capsys) -> None:
    run = _copy(tmp_path, lambda d: d["unavailable"].update(granularity="probe failed: RuntimeError: boom"))
    assert cli.main(["analyze", str(run), "--out", str(tmp_path / "o")]) == EXIT_INCOMPLETE
    assert "incomplete" in capsys.readouterr().err


def test_3_a_rule_crashed(tmp_path: Path, monkeypatch) -> None:
    from gcdoctor.rules import ALL_RULES
    rule = ALL_RULES[0]

    def boom(self, facts, t):
        raise ZeroDivisionError("planted")
    monkeypatch.setattr(type(rule), "check", boom)
    assert cli.main(["analyze", str(SWEEP), "--out", str(tmp_path / "o")]) == EXIT_INCOMPLETE


def test_3_a_crashed_or_killed_run(tmp_path: Path) -> None:
    run = _copy(tmp_path, lambda d: d["settings"].update(error="RuntimeError: planted"))
    assert cli.main(["analyze", str(run), "--out", str(tmp_path / "o")]) == EXIT_INCOMPLETE
    killed = tmp_path / "k"
    shutil.copytree(SWEEP, killed)
    data = json.loads((killed / "facts.json").read_text())
    data["settings"]["finished_at"] = None  # SIGKILL: the run never wrote its end
    (killed / "facts.json").write_text(json.dumps(data))
    assert cli.main(["analyze", str(killed), "--out", str(tmp_path / "o2")]) == EXIT_INCOMPLETE


def test_3_unexpected_exception_one_line_and_traceback_kept(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)

    def boom(args):
        raise RuntimeError("planted bug")
    monkeypatch.setitem(cli.COMMANDS, "rules", boom)
    assert cli.main(["rules"]) == EXIT_INCOMPLETE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error: RuntimeError: planted bug" in err[0]
    logs = list((tmp_path / "gcdoctor-runs").glob("crash-*.log"))
    assert logs and "Traceback" in logs[0].read_text()


def test_3_traceback_goes_into_the_open_run_directory(tmp_path: Path, monkeypatch) -> None:
    from gcdoctor.run.rundir import RunDirectory

    def boom(args):
        rd = RunDirectory(tmp_path / "r")
        rd.close()
        raise KeyError("planted")
    monkeypatch.setitem(cli.COMMANDS, "rules", boom)
    assert cli.main(["rules"]) == EXIT_INCOMPLETE
    assert "KeyError" in (tmp_path / "r" / "error.log").read_text()


def test_130_interrupted(monkeypatch) -> None:
    def stop(args):
        raise KeyboardInterrupt
    monkeypatch.setitem(cli.COMMANDS, "rules", stop)
    assert cli.main(["rules"]) == EXIT_INTERRUPTED


def test_re_judged_interrupted_run_is_incomplete_not_130(tmp_path: Path) -> None:
    run = _copy(tmp_path, lambda d: d["settings"].update(interrupted=True))
    assert cli.main(["analyze", str(run), "--out", str(tmp_path / "o")]) == EXIT_INCOMPLETE


def test_contract_is_documented() -> None:
    doc = (REPO / "docs" / "exit-codes.md").read_text()
    for code in ("0", "1", "2", "3", "130"):
        assert f"| {code} " in doc
    # the rows' newer clauses, each exercised elsewhere: late signals (test_late_signals.py), watch's
    # codes, --force, a live or early-killed run (test_fuzz_hardening.py)
    for clause in ("SIGTERM counts as Ctrl-C: 130, not 143", "never CMD's own code", "unless\n`--force`",
                   "is still in progress", "killed before its first `facts.json`"):
        assert clause in doc, clause
    assert "docs/exit-codes.md" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("command", [["rules"], ["models"], ["explain", "GC001"],
                                     ["plan", "--device-memory", "80GB"]])
def test_json_on_every_printing_command(command, capsys) -> None:
    assert cli.main([*command, "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)


def test_compare_json_and_fail_on_regression(tmp_path: Path, capsys) -> None:
    slower = tmp_path / "slower"
    shutil.copytree(SWEEP, slower)
    data = json.loads((slower / "facts.json").read_text())
    for m in data["sweep"]["measurements"]:
        if m.get("step_ms_median"):
            m["step_ms_median"] *= 1.5
    (slower / "facts.json").write_text(json.dumps(data))
    assert cli.main(["compare", str(SWEEP), str(slower), "--json", "--fail-on-regression", "10"]) == EXIT_FAIL_ON
    out = json.loads(capsys.readouterr().out)
    assert any(r["label"].startswith("step time") and r["worse_pct"] > 40 for r in out["regressions"])
    assert cli.main(["compare", str(SWEEP), str(slower), "--fail-on-regression", "60"]) == EXIT_OK
    assert cli.main(["compare", str(SWEEP), str(SWEEP), "--fail-on-regression", "1"]) == EXIT_OK
    assert "no regression" in capsys.readouterr().out
