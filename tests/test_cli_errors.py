"""Bad input from a user gets one clear line on stderr and exit code 2, never a traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gcdoctor.cli import main


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc: int, err: str, needle: str) -> None:
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gcdoctor: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, needle", [
    (["diagnose", "--device", "cpu", "--model", "gpt-17"], "unknown model 'gpt-17'"),
    (["diagnose", "--device", "cpu", "--layers", "99"], "--layers 99: tiny-llama has 4 decoder layers"),
    (["diagnose", "--device", "cpu", "--seq-len", "0"], "argument --seq-len: 0 must be positive"),
    (["diagnose", "--device", "cpu", "--batch-sizes", "0,2"], "batch sizes must be positive"),
    (["diagnose", "--device", "cpu", "--batch-sizes", "two"], "expected comma-separated positive integers"),
    (["diagnose", "--device", "cuda"], "no CUDA device is available"),
    (["diagnose", "--device", "musa"], "torch_musa is not installed"),
    (["diagnose", "--device", "tpu"], "expected cpu, cuda, cuda:N, musa or musa:N"),
    (["diagnose", "--device", "cpu", "--memory-limit", "lots"], "expected a size such as 48GB"),
    (["diagnose", "--device", "cpu", "--probes", "sweep,magic"], "unknown probe(s) magic"),
    (["diagnose", "--device", "cpu", "--threshold", "GC001.nope=3"], "has no threshold 'nope'"),
    (["diagnose", "--device", "cpu", "--threshold", "GC999.x=3"], "unknown rule 'GC999'"),
    (["diagnose", "--device", "cpu", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["diagnose", "--device", "cpu", "--emulate-launch-us", "-5"], "--emulate-launch-us -5: use 0 to 100000"),
    (["diagnose", "--device", "cpu", "--emulate-launch-us", "nan"], "--emulate-launch-us nan"),
    (["explain", "GC999"], "unknown rule 'GC999'"),
    (["analyze", "/nonexistent/run"], "no such file or directory"),
    (["plan", "--model", "llama3-8b", "--device-memory", "-3GB"], "--device-memory"),
    (["plan", "--model", "llama3-8b", "--device-memory", "48GB", "--launch-us", "30"], "need --device CARD"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, needle):
    argv = [a for a in argv]
    if argv[0] == "diagnose":
        argv += ["--no-tui", "--out", str(tmp_path / "run")]
    rc, _, err = run_main(capsys, *argv)
    assert_one_line_error(rc, err, needle)


def test_malformed_model_config_file(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    rc, _, err = run_main(capsys, "diagnose", "--device", "cpu", "--no-tui", "--model", str(bad))
    assert_one_line_error(rc, err, "not valid JSON")


def test_model_config_missing_fields(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    rc, _, err = run_main(capsys, "diagnose", "--device", "cpu", "--no-tui", "--model", str(bad))
    assert_one_line_error(rc, err, "missing or invalid intermediate_size, num_hidden_layers")


def test_unsupported_architecture(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "bert", "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}))
    rc, _, err = run_main(capsys, "diagnose", "--device", "cpu", "--no-tui", "--model", str(bad))
    assert_one_line_error(rc, err, "model_type 'bert' is not a supported decoder")


def test_malformed_toml_config(capsys, tmp_path):
    bad = tmp_path / "gc.toml"
    bad.write_text("[run\nseq_len = ")
    rc, _, err = run_main(capsys, "diagnose", "--device", "cpu", "--no-tui", "--config", str(bad))
    assert_one_line_error(rc, err, "not valid TOML")


def test_toml_unknown_key(capsys, tmp_path):
    bad = tmp_path / "gc.toml"
    bad.write_text("[run]\nsequence = 4\n")
    rc, _, err = run_main(capsys, "diagnose", "--device", "cpu", "--no-tui", "--config", str(bad))
    assert_one_line_error(rc, err, "unknown [run] key(s) sequence")


def test_analyze_directory_without_facts(capsys, tmp_path):
    rc, _, err = run_main(capsys, "analyze", str(tmp_path))
    assert_one_line_error(rc, err, "not a gcdoctor run directory (no facts.json)")


def test_analyze_malformed_facts(capsys, tmp_path):
    (tmp_path / "facts.json").write_text(json.dumps({"sweep": {"measurements": "many"}}))
    rc, _, err = run_main(capsys, "analyze", str(tmp_path), "--out", str(tmp_path / "out"))
    assert_one_line_error(rc, err, "not a valid gcdoctor facts file")


def test_no_traceback_from_a_real_process(tmp_path):
    """The installed console entry point, as a user runs it."""
    p = subprocess.run([sys.executable, "-m", "gcdoctor", "diagnose", "--no-tui", "--device", "cpu",
                        "--model", "nope", "--out", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "gcdoctor: error: unknown model 'nope': use one of llama2-7b, llama3-70b, llama3-8b, mistral-7b, "
        "qwen2.5-7b, tiny-llama, or a path to a config.json"]


def test_monitor_rejects_a_zero_rate_instead_of_running_forever(capsys):
    from gcdoctor.cli import main

    assert main(["monitor", "--telemetry-hz", "0", "--seconds", "1", "--no-tui"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gcdoctor: error: gcdoctor monitor: argument --telemetry-hz: 0: use a rate from 0.01 to 1000 Hz"]


def test_an_error_caused_by_a_ctrl_c_during_an_import_counts_as_interrupted():
    # a signal that lands while a module is imported can surface as a RuntimeError from a
    # dataclass's __set_name__, caused by the KeyboardInterrupt: that is an interruption (130)
    from gcdoctor.cli import _interrupted
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as k:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from k
    except RuntimeError as exc:
        assert _interrupted(exc) is True
    assert _interrupted(RuntimeError("a real bug")) is False
