"""Property-based tests (hypothesis) of the second hardening round, one per class of input:

1. deep nesting anywhere in a trace file: a reading, or one line naming the place;
2. impossible events (ts 0 among real timestamps, a duration of days, before or after everything
   else): dropped and counted, the count in the facts and the report, no verdict changed;
   a trace of a few events fires no offload stall;
4. run directories: a non-empty --out is refused unless --force, which empties only a run directory;
5. every text from a trace or a device is neutralised for its sink: Markdown rendered by a
   CommonMark renderer with inline HTML on has no live markup and no link from it, HTML neither,
   the terminal gets no control or bidi character, a name's newline forges no bottom-line row;
6. command lines: absurd numbers are one line and exit 2;
7. a rule that raises or returns nonsense on odd facts is an `error` verdict, never a crash.

(3, signals, is tests/test_late_signals.py.) Bugs these found are kept as regression seeds at the
end of each part. Small example counts: the whole file runs in well under a minute.
"""
from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcdoctor.cli import main
from gcdoctor.engine import evaluate
from gcdoctor.types import Rule
from gcdoctor.errors import UserError
from gcdoctor.trace import load_trace
from gcdoctor.trace.to_facts import facts_from_trace

REPO = Path(__file__).resolve().parents[1]
HOST = REPO / "samples" / "traces" / "h200-host"
BASES = {name: json.load(gzip.open(HOST / f"{name}.json.gz")) for name in ("healthy", "item")}
KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5000000000100.0, "dur": 1.0}


def fast(n: int):
    return settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _fired(facts) -> set[tuple[str, str, str]]:
    return {(v.code, v.subject, v.severity) for v in evaluate(facts) if v.status in ("fired", "error")}


# -- 1. deep nesting ----------------------------------------------------------------------------

def _nest(depth: int, kind: str) -> str:
    return ("[" * depth + "]" * depth) if kind == "list" else ('{"a":' * depth + "0" + "}" * depth)


@given(where=st.sampled_from(["before", "after", "event-field", "args", "entry", "last-key"]),
       depth=st.one_of(st.integers(1, 80), st.sampled_from([999, 1001, 3000, 20000, 100000])),
       kind=st.sampled_from(["list", "dict"]), decoder=st.sampled_from(["msgspec", "json"]),
       gz=st.booleans())
@fast(60)
def test_deep_nesting_anywhere_is_a_reading_or_one_line_naming_the_place(tmp_path_factory, where, depth, kind,
                                                                         decoder, gz) -> None:
    deep = _nest(depth, kind)
    ev = json.dumps(KERNEL)
    events = {"event-field": f'[{ev}, {json.dumps(dict(KERNEL, ts=5000000000200.0))[:-1]}, "extra": {deep}}}]',
              "args": f'[{ev}, {json.dumps(dict(KERNEL, ts=5000000000200.0))[:-1]}, "args": {deep}}}]',
              "entry": f"[{ev}, {deep}]"}.get(where, f"[{ev}]")
    text = {"before": f'{{"meta": {deep}, "traceEvents": {events}}}',
            "after": f'{{"traceEvents": {events}, "meta": {deep}}}',
            "last-key": f'{{"traceEvents": {events}, "a": 1, "meta": {deep}}}'}.get(where, f'{{"traceEvents": {events}}}')
    p = tmp_path_factory.mktemp("deep") / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    try:
        t = load_trace(p, decoder=decoder, block_bytes=4096)
    except UserError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) < 400
        assert "nested" in msg and depth > 64, msg
        if where in ("before", "after", "last-key"):
            assert f"metadata {'before' if where == 'before' else 'after'} traceEvents: field 'meta'" in msg
        return
    assert len(t.ops) >= 1  # the kernel is read, whatever sits beside it


def test_regression_deep_metadata_before_and_after(tmp_path: Path) -> None:
    """The campaign's crash: RecursionError from the metadata decoder (exit 3, "please report it")."""
    ev = json.dumps(KERNEL)
    for where, text in (("before", '{"x": ' + _nest(100000, "list") + ', "traceEvents": [' + ev + "]}"),
                        ("after", '{"traceEvents": [' + ev + '], "x": ' + _nest(100000, "list") + "}")):
        p = tmp_path / f"{where}.json"
        p.write_text(text)
        with pytest.raises(UserError, match=rf"metadata {where} traceEvents: field 'x' is nested more than 64 "
                                            r"levels deep \(at byte \d+\), too deep to decode"):
            load_trace(p)


# -- 2. impossible events -----------------------------------------------------------------------

def _impossible(base: dict, how: str, cat: str) -> dict:
    real = [e for e in base["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    ts0 = min(e["ts"] for e in real)
    span = max(e["ts"] + e.get("dur", 0) for e in real) - ts0
    name = {"kernel": "gemm", "gpu_memcpy": "Memcpy HtoD (Pageable -> Device)", "cpu_op": "aten::mm",
            "cuda_runtime": "cudaLaunchKernel"}[cat]
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat in ("kernel", "gpu_memcpy") else real[0]["pid"],
          "tid": 7, "ts": ts0 + span / 2, "dur": 10.0, "args": {"bytes": 1 << 20, "correlation": 987654321}}
    if how == "ts0":
        ev["ts"] = 0
    elif how == "before":
        ev["ts"] = ts0 - 1000 * span - 3.6e9  # an hour and a thousand spans before everything else
    elif how == "after":
        ev["ts"] = ts0 + 1e13
    elif how == "dur-1e12":
        ev["dur"] = 1e12
    elif how == "dur-day":
        ev["dur"] = 86400e6 + 1
    return ev


@given(base=st.sampled_from(sorted(BASES)),
       bad=st.lists(st.tuples(st.sampled_from(["ts0", "before", "after", "dur-1e12", "dur-day"]),
                              st.sampled_from(["kernel", "gpu_memcpy", "cpu_op", "cuda_runtime"])),
                    min_size=1, max_size=3))
@fast(12)
def test_impossible_events_are_dropped_counted_and_decide_nothing(tmp_path_factory, base, bad) -> None:
    from gcdoctor.report.markdown import render_markdown
    doc = copy.deepcopy(BASES[base])
    doc["traceEvents"] += [_impossible(BASES[base], how, cat) for how, cat in bad]
    p = tmp_path_factory.mktemp("imp") / "t.json"
    p.write_text(json.dumps(doc))
    facts = facts_from_trace(p)
    whole = facts.trace["all"]
    assert whole.dropped_events == len(bad)
    assert sum(whole.dropped.values()) == len(bad)
    clean = facts_from_trace(HOST / f"{base}.json.gz")
    # the verdicts are the clean trace's; GC026 says what was left out
    assert {f for f in _fired(facts) if f[0] != "GC026"} == {f for f in _fired(clean) if f[0] != "GC026"}
    [gc026] = [v for v in evaluate(facts) if v.code == "GC026"]
    assert gc026.status == "fired" and f"{len(bad)} events could not be placed" in gc026.headline
    md = render_markdown(facts, evaluate(facts))
    assert f"all: {len(bad)} impossible or unplaceable events left out of the trace" in md


def test_real_traces_lose_no_event() -> None:
    for f in sorted(HOST.glob("*.json.gz")) + sorted((REPO / "samples" / "traces" / "recompute").glob("*.json.gz")):
        t = load_trace(f)
        assert not {"ts far outside the trace's span", "dur longer than the trace could hold"} & set(t.dropped), f


events = st.fixed_dictionaries({
    "ph": st.just("X"), "cat": st.sampled_from(["kernel", "gpu_memcpy", "cpu_op", "cuda_runtime", "gpu_memset",
                                                "user_annotation"]),
    "name": st.sampled_from(["k", "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)",
                             "aten::mm", "aten::item", "cudaLaunchKernel", "cudaDeviceSynchronize", "ProfilerStep#1",
                             "gcdoctor/recompute/0"]),
    "pid": st.sampled_from([0, 1]), "tid": st.sampled_from([1, 7]),
    "ts": st.floats(0, 1e4), "dur": st.sampled_from([0.0, 1.0, 100.0, 1e6, 1e12])})


@given(evs=st.lists(events, min_size=1, max_size=3))
@fast(40)
def test_a_trace_of_a_few_events_fires_no_offload_stall_or_granularity_verdict(tmp_path_factory, evs) -> None:
    """(The host-idle rules' own evidence floors are tested with them.)"""
    p = tmp_path_factory.mktemp("few") / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    try:
        facts = facts_from_trace(p)
    except UserError:
        return
    verdicts = evaluate(facts)
    assert not [v for v in verdicts if v.status == "error"], [v.traceback for v in verdicts if v.status == "error"]
    assert not [v for v in verdicts if v.code in ("GC010", "GC020") and v.status == "fired"]


def test_regression_region_idle_of_9900_percent(tmp_path: Path) -> None:
    """A recompute range, an item() and a copy: "checkpointed regions idle the device 9900% of the step"."""
    evs = [{"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": 10.0, "dur": 100.0},
           {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
            "ts": 500.0, "dur": 1.0},
           {"ph": "X", "cat": "user_annotation", "name": "gcdoctor/recompute/0", "pid": 1, "tid": 1, "ts": 0.0,
            "dur": 1e4}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    [v] = [v for v in evaluate(facts_from_trace(p)) if v.code == "GC010"]
    assert v.status != "fired", v.headline


def test_regression_one_memcpy_is_no_critical_offload_stall(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> "
                                              "Device)", "ts": 100.0, "dur": 1e6, "pid": 0, "tid": 7}]}))
    [v] = [v for v in evaluate(facts_from_trace(p)) if v.code == "GC020"]
    assert v.status == "inconclusive" and "too few events to judge an offload stall: 0 kernel(s) and 1 copy" in \
        v.headline


# -- 4. run directories -------------------------------------------------------------------------

entries = st.lists(st.tuples(st.sampled_from(["facts.json", "events.jsonl", "report.md", "notes.txt", "src",
                                              "traces", "rank-0", ".gcdoctor.lock", "data.bin"]),
                             st.booleans()), max_size=4, unique_by=lambda e: e[0])


@given(content=entries, force=st.booleans())
@fast(40)
def test_a_non_empty_out_is_refused_unless_force_which_empties_only_a_run(tmp_path_factory, content, force) -> None:
    from gcdoctor.run.rundir import RUN_MARKERS, prepare_run_dir
    d = tmp_path_factory.mktemp("out")
    for name, is_dir in content:
        (d / name).mkdir() if is_dir else (d / name).write_text("x")
    before = sorted(p.name for p in d.iterdir())
    others = [n for n in before if n != ".gcdoctor.lock"]
    run_like = any(n in RUN_MARKERS and not (n == ".gcdoctor.lock") or n in RUN_MARKERS for n in before)
    try:
        prepare_run_dir(d, force)
    except UserError as exc:
        assert "\n" not in str(exc)
        assert others and (not force or not run_like)
        assert sorted(p.name for p in d.iterdir()) == before  # nothing touched
        return
    assert not others or (force and run_like)
    assert [p.name for p in d.iterdir() if p.name != ".gcdoctor.lock"] == []


def test_analyze_twice_into_one_out(tmp_path: Path, capsys) -> None:
    trace, out = str(HOST / "healthy.json.gz"), str(tmp_path / "out")
    assert main(["analyze", trace, "--out", out]) == 0
    assert main(["analyze", trace, "--out", out]) == 2
    assert "--force to empty it first" in capsys.readouterr().err
    (tmp_path / "out" / "stale.txt").write_text("from the first run")
    assert main(["analyze", trace, "--out", out, "--force"]) == 0
    assert not (tmp_path / "out" / "stale.txt").exists() and (tmp_path / "out" / "report.md").is_file()
    assert main(["analyze", out, "--out", out, "--force"]) == 2  # never empties what it reads


def test_analyze_of_a_live_run_says_so_and_of_a_run_killed_early_names_it(tmp_path: Path, capsys) -> None:
    from gcdoctor.run.rundir import RunDirectory
    trace = str(HOST / "healthy.json.gz")
    run = tmp_path / "run"
    assert main(["analyze", trace, "--out", str(run)]) == 0
    capsys.readouterr()
    held = RunDirectory(run)  # the lock of a run still writing
    try:
        rc = main(["analyze", str(run), "--out", str(tmp_path / "a")])
        err = capsys.readouterr().err
        assert "killed" not in err
        assert rc == 0  # a bare trace's facts have no diagnose end to miss
        early = tmp_path / "early"
        held2 = RunDirectory(early)  # started, nothing measured yet
        assert main(["analyze", str(early), "--out", str(tmp_path / "b")]) == 3
        assert "a gcdoctor run still starting (pid" in capsys.readouterr().err
        held2.close()
        assert main(["analyze", str(early), "--out", str(tmp_path / "c")]) == 3
        assert "the run was killed before it measured anything" in capsys.readouterr().err
    finally:
        held.close()


def test_analyze_of_a_live_diagnose_is_in_progress_not_killed(tmp_path: Path, capsys) -> None:
    import shutil

    from gcdoctor.run.rundir import RunDirectory
    run = tmp_path / "run"
    shutil.copytree(REPO / "samples" / "cpu-tiny-llama-sweep", run)
    facts = json.loads((run / "facts.json").read_text())
    facts["settings"]["finished_at"] = None
    (run / "facts.json").write_text(json.dumps(facts))
    assert main(["analyze", str(run), "--out", str(tmp_path / "a")]) == 3
    assert "killed before it finished" in capsys.readouterr().err
    held = RunDirectory(run)
    try:
        assert main(["analyze", str(run), "--out", str(tmp_path / "b")]) == 3
        err = capsys.readouterr().err
        assert "the run is still in progress (pid" in err and "killed" not in err
    finally:
        held.close()


# -- 5. sinks -----------------------------------------------------------------------------------

HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))",
           "![i](javascript:alert(1))", "<javascript:alert(1)>", "<https://evil.example/x>", "\x1b[2J\x1b]0;t\x07",
           "\u202egnp.exe\u202c", "\u2066iso\u2069", "\x9b31m", "a|b|c", "\n| forged | row |\n", "```\n<b>x</b>\n```",
           "~~~\n<i>y</i>", "<!-- c -->", "[r]: javascript:alert(1)", "&lt;script&gt;", "\r\n# heading"]
hostile_text = st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3).map("".join) | st.text(max_size=12)
_LIVE_TOKENS = ("html_inline", "html_block", "link_open", "image")


def _tokens(md: str):
    from markdown_it import MarkdownIt
    stack = list(MarkdownIt("commonmark", {"html": True}).parse(md))
    while stack:
        t = stack.pop()
        yield t
        stack.extend(t.children or [])


def _check_every_sink(facts, verdicts) -> None:
    from gcdoctor.report.bottom_line import bottom_line_for
    from gcdoctor.report.console import summary
    from gcdoctor.report.html import render_html
    from gcdoctor.report.markdown import render_markdown
    md = render_markdown(facts, verdicts)
    live = [(t.type, t.content, t.attrs) for t in _tokens(md) if t.type in _LIVE_TOKENS]
    assert not live, live  # gcdoctor's own Markdown has no link or HTML either: any is from the trace
    html = render_html(facts, verdicts)
    assert not re.search(r"<(script|img|iframe|svg on|a href=\"?javascript)", html, re.I)
    assert "javascript:" not in re.sub(r"&[a-z#0-9]+;", "", " ".join(re.findall(r'href="([^"]*)"', html)))
    console = summary(facts, verdicts, "report.html")
    for sink in (md, html, console):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", sink)
    rows = [r.render() for r in bottom_line_for(facts, verdicts)]
    assert all("\n" not in r for r in rows)


@given(names=st.lists(hostile_text, min_size=4, max_size=4), device=hostile_text)
@fast(15)
def test_no_text_from_a_trace_or_device_is_live_in_any_sink(tmp_path_factory, names, device) -> None:
    doc = copy.deepcopy(BASES["item"])
    i = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and not str(e.get("name", "")).startswith("ProfilerStep"):
            e["name"] = names[i % len(names)] + str(e.get("name"))
            i += 1
    for props in doc.get("deviceProperties", []):
        props["name"] = device
    p = tmp_path_factory.mktemp("sink") / "t.json"
    p.write_text(json.dumps(doc))
    facts = facts_from_trace(p)
    _check_every_sink(facts, evaluate(facts))


def test_regression_a_newline_in_a_device_name_forges_no_bottom_line_row(tmp_path: Path) -> None:
    from gcdoctor.report.markdown import render_markdown
    doc = copy.deepcopy(BASES["healthy"])
    for props in doc["deviceProperties"]:
        props["name"] = "H200\n  crit  forged row <script>x</script>"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    facts = facts_from_trace(p)
    md = render_markdown(facts, evaluate(facts))
    fence = md.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert fence[0].startswith("Bottom line: your trace on H200   crit  forged row <script>")
    assert not [row for row in fence if row.lstrip().startswith("crit  forged")]


# -- 6. command lines ---------------------------------------------------------------------------

absurd = st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e-300", "1e400", "2" + "0" * 40, str(2**70), "1e30",
                          "10" * 30, "x", "", "0x10", "-0"])


@given(flag=st.sampled_from(["--seq-len", "--batch-sizes", "--layers", "--shard", "--launch-us", "--device-memory"]),
       value=absurd)
@fast(30)
def test_plan_refuses_absurd_numbers_in_one_line(flag, value, capsys) -> None:
    if flag == "--launch-us" and value == "1e-300":
        return  # a launch cost of about 0 us is a real what-if (it reads the recorded granularity run: slow)
    rc = main(["plan", "--device", "h200", f"{flag}={value}"])
    cap = capsys.readouterr()
    assert rc == 2 and cap.err.count("\n") == 1 and cap.err.startswith("gcdoctor: error: "), (cap.out[-300:], cap.err)


def test_regression_plan_of_2_70_tokens_and_a_batch_of_1e30(capsys) -> None:
    """It printed "7,066,429,290,321,018,880 GiB" and exit 0 where diagnose refuses."""
    assert main(["plan", "--device", "h200", "--seq-len", str(2**70)]) == 2
    assert main(["plan", "--device", "h200", "--batch-sizes", str(10**30)]) == 2
    assert "GiB" not in capsys.readouterr().out


@given(cmd=st.sampled_from(["diagnose", "monitor", "watch"]), value=absurd)
@fast(25)
def test_telemetry_rate_out_of_range_is_one_line(cmd, value, capsys) -> None:
    try:
        ok = 0.01 <= float(value) <= 1000 or (cmd == "watch" and float(value) == 0)
    except ValueError:
        ok = False
    if ok:
        return  # a real rate: it would start the command
    rc = main([cmd, f"--telemetry-hz={value}"] + (["--", "true"] if cmd == "watch" else []))
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--telemetry-hz" in err


def test_special_files_given_to_analyze_are_one_line(tmp_path: Path, capsys) -> None:
    import os
    import subprocess
    import sys
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # in a subprocess: a regression would hang, not stop the suite
    p = subprocess.run([sys.executable, "-m", "gcdoctor", "analyze", str(fifo), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    for path in ("/proc/self/mem", "/dev/zero", "/dev/null", tmp_path / "empty"):
        if path == tmp_path / "empty":
            path.mkdir()
        assert main(["analyze", str(path), "--out", str(tmp_path / "o")]) == 2, path
        assert capsys.readouterr().err.count("\n") == 1


def test_watch_of_a_file_that_is_not_executable_and_an_out_that_cannot_be(tmp_path: Path, capsys) -> None:
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    script.chmod(0o644)
    assert main(["watch", "--out", str(tmp_path / "w"), "--", str(script)]) == 2
    assert "permission denied" in capsys.readouterr().err
    assert main(["watch", "--out", str(script), "--", "true"]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert main(["watch", "--out", "/proc/gcdoctor-run", "--", "true"]) == 2
    assert "cannot create the run directory" in capsys.readouterr().err


@pytest.mark.parametrize("rc,code", [(0, 0), (1, 3), (7, 3), (2, 3), (130, 130), (-2, 130), (-15, 130), (-9, 3)])
def test_what_watch_returns(rc: int, code: int) -> None:
    from gcdoctor.watching.autowatch import watch_exit_code
    assert watch_exit_code(rc) == code


# -- 7. rules on odd facts ----------------------------------------------------------------------

class _Odd(Rule):
    code, slug, title = "GC999", "odd", "A rule on odd facts"

    def __init__(self, result) -> None:
        self.result = result

    def check(self, facts, t):
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


odd_results = st.one_of(
    st.sampled_from([TypeError("x"), ZeroDivisionError(), KeyError("k"), RecursionError(), ValueError("a\nb")]),
    st.sampled_from([None, 1, "verdict", [None], {"code": "GC999"}]),
    st.builds(lambda f, v: ("field", f, v), st.sampled_from(["subject", "severity", "code", "headline", "topic"]),
              st.sampled_from([None, 3, ["x"], "catastrophic"])))


@given(result=odd_results)
@fast(15)
def test_a_rule_that_raises_or_returns_nonsense_is_an_error_verdict(result) -> None:
    facts = _healthy_facts()
    rule = _Odd(result)
    if isinstance(result, tuple):
        good = rule.passed("fine")
        setattr(good, result[1], result[2])
        rule.result = [good]
    verdicts = evaluate(facts, rules=[rule, *_rules()])
    mine = [v for v in verdicts if v.slug == "odd" or v.code == "GC999"]
    if isinstance(result, tuple) and result[1] != "severity" and isinstance(result[2], str):
        assert mine[0].status == "passed"
        return
    if isinstance(result, tuple) and result[2] == "catastrophic":
        assert mine[0].status == "error"
    assert [v.status for v in mine] == ["error"] and mine[0].traceback
    _check_every_sink(facts, verdicts)


_CACHE: dict = {}


def _healthy_facts():
    if "healthy" not in _CACHE:
        _CACHE["healthy"] = facts_from_trace(HOST / "healthy.json.gz")
    return copy.deepcopy(_CACHE["healthy"])


def _rules():
    from gcdoctor.rules import ALL_RULES
    return ALL_RULES


def test_a_raising_rule_keeps_its_traceback_in_the_run_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    from gcdoctor import rules
    monkeypatch.setattr(rules, "ALL_RULES", [_Odd(TypeError("planted")), *rules.ALL_RULES])
    out = tmp_path / "out"
    assert main(["analyze", str(HOST / "healthy.json.gz"), "--out", str(out)]) == 3
    log = (out / "error.log").read_text()
    assert "rule GC999 (odd) raised:" in log and "TypeError: planted" in log
    assert "Traceback" not in capsys.readouterr().err
