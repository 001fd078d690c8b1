"""Platform hardening: one owner per run directory, strict configuration, escaping for
every sink, telemetry counter tracks in the traces, the notebook API, the venv maker."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gcdoctor import cli
import gcdoctor.model.registry
from gcdoctor.config import RunConfig, load_toml, parse_size
from gcdoctor.errors import EXIT_USAGE, RunDirectoryBusy, UserError
from gcdoctor.run.rundir import RunDirectory, safe_name

REPO = Path(__file__).resolve().parents[1]
SWEEP = REPO / "samples" / "cpu-tiny-llama-sweep"


# -- one run directory, one owner ---------------------------------------------------------------
def test_a_second_process_cannot_write_into_a_run_directory_in_use(tmp_path: Path) -> None:
    rd = RunDirectory(tmp_path / "run")
    try:
        code = ("import sys; from gcdoctor import cli; "
                f"sys.exit(cli.main(['analyze', {str(SWEEP)!r}, '--out', {str(tmp_path / 'run')!r}]))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == EXIT_USAGE, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another gcdoctor process" in lines[0] and str(os.getpid()) in lines[0]
        with pytest.raises(RunDirectoryBusy):
            RunDirectory(tmp_path / "run")  # also within one process
    finally:
        rd.close()
    RunDirectory(tmp_path / "run").close()  # free again once closed


def test_temporary_files_are_unique_per_writer(tmp_path: Path) -> None:
    from gcdoctor.facts import Facts
    facts = Facts.load(SWEEP / "facts.json")
    facts.save(tmp_path / "facts.json")
    facts.save(tmp_path / "facts.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["facts.json"]  # no facts.json.tmp left, none shared
    import gcdoctor.atomic as atomic
    seen = []
    real = atomic.tempfile.mkstemp

    def spy(**kw):
        fd, name = real(**kw)
        seen.append(name)
        return fd, name
    atomic.tempfile.mkstemp = spy
    try:
        facts.save(tmp_path / "facts.json")
        facts.save(tmp_path / "facts.json")
    finally:
        atomic.tempfile.mkstemp = real
    assert len(set(seen)) == 2


@pytest.mark.parametrize("target, needle", [("file", "exists and is not a directory"),
                                            ("/proc/gcdoctor-run", "cannot create the run directory")])
def test_analyze_out_onto_a_file_or_under_proc_is_one_line(tmp_path: Path, capsys, target, needle) -> None:
    out = tmp_path / "f" if target == "file" else Path(target)
    if target == "file":
        out.write_text("x")
    assert cli.main(["analyze", str(SWEEP), "--out", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_default_run_dirs_never_collide(tmp_path: Path, monkeypatch) -> None:
    from gcdoctor.run.rundir import default_run_dir
    monkeypatch.chdir(tmp_path)
    a = default_run_dir("diagnose", "tiny-llama")
    a.mkdir(parents=True)
    b = default_run_dir("diagnose", "tiny-llama")
    assert a != b and not b.exists()


def test_safe_name_for_file_names() -> None:
    assert safe_name('a"b/c\x1b[2J..') == "a_b_c__2J"
    assert safe_name("..") == "_" and safe_name("") == "_"
    assert "/" not in safe_name("../../etc/passwd")


# -- strict configuration -------------------------------------------------------------------------
@pytest.mark.parametrize("body, needle", [
    ("run = 5", "run = 5: expected a [run] table"),
    ("thresholds = 5", "expected [thresholds.RULE] tables"),
    ('[run]\nseq_len = "abc"', "seq_len: expected int | null, got str"),
    ("[run]\nprobes = 5", "probes: expected array | null, got int"),
    ("[run]\ndevice = 5", "device: expected str | null, got int"),
    ('[run]\nbatch_sizes = "1,2"', "batch_sizes: expected array | null, got str"),
    ('[run]\nprofile = "no"', "profile: expected bool, got str"),
    ("[run]\nmemory_limit_bytes = -5", "--memory-limit -5: must be between 1"),
    ("[run]\ntelemetry_hz = nan", "--telemetry-hz nan"),
    ("[run]\nseeed = 1", "unknown [run] key(s) seeed"),
    ("[thresholds.GC001]\nmax_overhead_pct = nan", "expected a finite number"),
])
def test_toml_wrong_types_and_unknown_keys_are_one_line(tmp_path: Path, capsys, body, needle) -> None:
    p = tmp_path / "gc.toml"
    p.write_text(body)
    assert cli.main(["diagnose", "--config", str(p), "--no-tui", "--out", str(tmp_path / "r")]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "r").exists()  # refused before any work


def test_toml_memory_limit_as_a_size(tmp_path: Path) -> None:
    p = tmp_path / "gc.toml"
    p.write_text('[run]\nmemory_limit_bytes = "48GB"\nseq_len = 64\n')
    run, _ = load_toml(p)
    assert RunConfig(**run).memory_limit_bytes == 48 * 10 ** 9


def test_run_config_is_frozen_and_checks_itself() -> None:
    cfg = RunConfig()
    with pytest.raises(AttributeError):
        cfg.seq_len = 5  # type: ignore[misc]
    for bad in ({"seq_len": 10 ** 12}, {"seed": 2 ** 70}, {"telemetry_hz": float("nan")}, {"probes": []},
                {"batch_sizes": [1, 0]}, {"layers": -1}, {"max_batch": True}, {"device": "tpu"}):
        with pytest.raises(UserError):
            RunConfig(**bad)


@pytest.mark.parametrize("argv, needle", [
    (["diagnose", "--seq-len", "1000000000000"], "--seq-len 1000000000000"),
    (["diagnose", "--seed", str(2 ** 70)], "--seed"),
    (["diagnose", "--telemetry-hz", "nan"], "--telemetry-hz"),
    (["diagnose", "--probes", ","], "no probe named"),
    (["diagnose", "--threshold", "GC001.max_overhead_pct=nan"], "finite"),
    (["diagnose", "--memory-limit", "1e400"], "not a finite size"),
    (["monitor", "--seconds", "nan"], "--seconds"),
    (["monitor", "--seconds", "inf"], "--seconds"),
    (["plan", "--device-memory", "48G"], "say GB or GiB"),
])
def test_inputs_validated_before_any_work(tmp_path: Path, capsys, argv, needle) -> None:
    assert cli.main([*argv, "--no-tui"] if argv[0] != "plan" else argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.mark.parametrize("edit, needle", [
    ({"num_key_value_heads": -8}, "num_key_value_heads = -8"),
    ({"vocab_size": 10 ** 30}, "vocab_size"),
    ({"hidden_size": 2 ** 40}, "hidden_size"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
])
def test_model_config_fields_have_ranges(tmp_path: Path, capsys, edit, needle) -> None:
    cfg = json.loads((Path(gcdoctor.model.registry.__file__).parent / "model_configs" / "llama3-8b.json").read_text())
    cfg.update(edit)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    # plan must refuse it too (it printed "9.0 MiB params" for negative heads)
    assert cli.main(["plan", "--model", str(p), "--device-memory", "80GB"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert needle in err and "MiB" not in err


def test_one_size_parser() -> None:
    assert parse_size("48GB") == 48 * 10 ** 9
    assert parse_size("80GiB") == 80 * 2 ** 30
    assert parse_size("141e9") == 141 * 10 ** 9
    for bad in ("48G", "nan", "inf", "1e400", "-5", "0", "lots"):
        with pytest.raises(UserError):
            parse_size(bad, "--memory-limit")


# -- escaping, one function per sink ----------------------------------------------------------------
def test_markdown_and_terminal_escaping() -> None:
    from gcdoctor.report.format import md_escape, md_table, term_escape
    md = md_escape("<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1)) \x1b[31m")
    assert "<" not in md and not re.search(r"(?<!\\)\]\(", md)  # no tag, no link syntax (brackets escaped)
    assert "\x1b" not in md
    assert md_table(["a"], [["x|y\nz"]]).splitlines()[-1] == "| x\\|y z |"
    assert term_escape("name\x1b[2J\x07\u202e\r\x9b31m") == "name[2J31m"  # ESC, BEL, bidi, CR, C1 CSI
    assert term_escape("two\nlines\tok") == "two\nlines\tok"


def test_hostile_model_name_reaches_no_sink_raw(tmp_path: Path, capsys) -> None:
    data = json.loads((SWEEP / "facts.json").read_text())
    data["model"]["name"] = "evil\x1b[2J\n```\n<script>alert(1)</script>\n```"  # tries to close the fence
    data["model"]["source"] = "[x](javascript:alert(1))"
    run = tmp_path / "in"
    run.mkdir()
    (run / "facts.json").write_text(json.dumps(data))
    assert cli.main(["analyze", str(run), "--out", str(tmp_path / "o")]) == 0
    assert "\x1b" not in capsys.readouterr().out
    md = (tmp_path / "o" / "report.md").read_text()
    outside = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1$", "", md)  # Markdown outside the fenced blocks
    assert "\x1b" not in md and "<script" not in outside and not re.search(r"(?<!\\)\]\(javascript:", md)


# -- telemetry on the trace timeline ---------------------------------------------------------------
def _chrome_trace_ok(doc: dict) -> None:
    """The Chrome trace event format's rules that Perfetto's JSON importer relies on."""
    assert isinstance(doc["traceEvents"], list)
    for e in doc["traceEvents"]:
        assert isinstance(e.get("ph"), str) and isinstance(e.get("name"), str)
        if e["ph"] == "C":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["pid"], int)
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index") \
                or "args" in e


def test_counter_tracks_in_the_traces(tmp_path: Path) -> None:
    import shutil

    from gcdoctor.trace.perfetto import TELEMETRY_PID, annotate_run, read_telemetry
    from gcdoctor.trace import load_trace
    run = tmp_path / "run"
    shutil.copytree(SWEEP, run)
    names, rows = read_telemetry(run / "telemetry.csv")
    assert names and rows
    added = annotate_run(run)
    assert added and all(n > 0 for n in added.values()), added
    for rel in added:
        doc = json.loads(gzip.decompress((run / rel).read_bytes()))
        _chrome_trace_ok(doc)
        counters = [e for e in doc["traceEvents"] if e.get("ph") == "C"]
        assert {e["name"] for e in counters} <= set(names)
        assert all(e["pid"] == TELEMETRY_PID for e in counters)
        # inside the trace's own window (plus the margin), on its clock
        ts = [e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X"]
        assert min(ts) - 1.01e6 <= min(e["ts"] for e in counters) and max(e["ts"] for e in counters) <= max(ts) + 1.01e6
        load_trace(run / rel)  # gcdoctor's own loader still reads it
    assert annotate_run(run) == {k: 0 for k in added}  # idempotent


def test_trace_names_follow_tensorboard_trace_handler() -> None:
    import re

    from gcdoctor.trace.perfetto import trace_file_name
    assert re.fullmatch(r"[A-Za-z0-9._+=-]+_\d+\.\d{13}\.pt\.trace\.json\.gz", trace_file_name())


# -- the notebook API -------------------------------------------------------------------------------
def test_load_gives_dataframes() -> None:
    pd = pytest.importorskip("pandas")
    import gcdoctor
    run = gcdoctor.load(SWEEP)
    m = run.measurements
    assert isinstance(m, pd.DataFrame) and {"variant", "batch_size", "step_ms_median", "peak_allocated_bytes"} <= set(m)
    assert set(m["variant"]) == {"no_gc", "gc"}
    assert list(run.verdicts.columns)[:4] == ["code", "slug", "severity", "status"]
    idle = run.idle
    assert {"trace", "window", "idle_us", "idle_host_wait_us"} <= set(idle) and len(idle)
    tel = run.telemetry
    assert {"t_monotonic_s", "wall_time_s"} <= set(tel) and len(tel) > 100
    tables = run.trace_tables("sweep-gc")
    (only,) = tables.values()
    assert len(only["cpu_ops"]) > 1000 and "name" in only["cpu_ops"]
    trace_run = gcdoctor.load(REPO / "samples" / "traces" / "cpu-tiny-llama.json.gz")
    assert len(trace_run.idle) >= 1


# -- the venv that sees a vendor's torch ---------------------------------------------------------------
def test_mkvenv_sees_the_outer_environments_packages(tmp_path: Path) -> None:
    outer = tmp_path / "vendor"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(outer)], check=True)
    site = next((outer / "lib").glob("python3*/site-packages"))
    (site / "vendortorch.py").write_text("VERSION = '9.9+vendor'\n")
    inner = tmp_path / "venv"
    r = subprocess.run([str(outer / "bin" / "python"), str(REPO / "tools" / "mkvenv.py"), str(inner)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(inner / "bin" / "python"), "-c", "import vendortorch; print(vendortorch.VERSION)"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "9.9+vendor", r.stderr


def test_cpu_adam_is_built_at_install_for_a_gpu_or_for_the_tests_and_never_without_a_compiler(monkeypatch,
                                                                                               capsys) -> None:
    import importlib.util
    import shutil
    import torch
    spec = importlib.util.spec_from_file_location("mkvenv", REPO / "tools" / "mkvenv.py")
    mkvenv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mkvenv)
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/g++" if name in ("c++", "g++") else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mkvenv.main(["--cpu-adam"]) == 0 and capsys.readouterr().out == "0\n"  # no GPU: not for a run
    assert mkvenv.main(["--cpu-adam", "--tests"]) == 0 and capsys.readouterr().out == "1\n"  # the tests run it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mkvenv.main(["--cpu-adam"]) == 0 and capsys.readouterr().out == "1\n"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert mkvenv.main(["--cpu-adam", "--tests"]) == 0 and capsys.readouterr().out == "0\n"
    assert mkvenv.main(["--cpu-adam", "--bogus"]) == 2


# -- no surprise compile ----------------------------------------------------------------------------
def test_cpu_adam_compile_is_a_step_of_its_own(monkeypatch) -> None:
    from types import SimpleNamespace

    from gcdoctor.facts import Facts
    from gcdoctor.facts.offload import OffloadFacts
    from gcdoctor.probes import _deepspeed, offload
    monkeypatch.setattr(_deepspeed, "cpu_adam_status", lambda: _deepspeed.OpStatus(prebuilt=False, cached=False))

    def fake_load(st):
        st.load_s = 65.0
        return st
    monkeypatch.setattr(_deepspeed, "load_cpu_adam", fake_load)
    shown = []
    ctx = SimpleNamespace(backend=SimpleNamespace(kind="cpu", index=0), facts=Facts(), log=lambda *a, **k: None,
                          progress=lambda probe, variant="", *a, message="", **k: shown.append((probe, variant, message)))
    state = offload._DeepSpeedState(ctx, OffloadFacts(), explicit=True)
    assert state._cpu_adam() is None  # the op's own step, before the ZeRO-2 variant is measured
    assert [m for _, _, m in shown][0].startswith("compiling DeepSpeed's CPU Adam op")
    assert shown[-1] == ("offload", offload.ZERO2, "DeepSpeed's CPU Adam op ready in 65 s")
