"""Property-based fuzzing of the trace loader: any JSON value in any field of any event
gives either a correct reading or gcdoctor's one-line UserError; never another exception, never an
event placed at time 0 because it had no ts, never a negative duration in the tables. The analysis
and the rules run on whatever loads (a rule that raises is a verdict of status "error": none may).

Thousands of cases in CI, well under a minute. The seeds of every bug found are regression cases
below (test_regressions)."""
from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcdoctor.engine import evaluate
from gcdoctor.errors import UserError
from gcdoctor.trace import compute_metrics, load_trace
from gcdoctor.trace.to_facts import facts_from_trace

HANDMADE = json.loads((Path(__file__).parent / "data" / "handmade-trace.json").read_text())
FIELDS = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")
ARG_FIELDS = ("correlation", "stream", "bytes", "External id")

# any JSON value: the odd ones a hostile or broken writer produces
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 2**63, -(2**63) - 1, 2**64 + 5, 10**30]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e300, -1e300, 1e-300, 5e15, -0.0]),
    st.text(max_size=8), st.sampled_from(["kernel", "cpu_op", "X", "cuda_runtime", "\ud800", "ProfilerStep#1"]))
json_values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                          st.dictionaries(st.text(max_size=4), kids, max_size=3)),
                           max_leaves=6)


def _dump(doc: dict) -> str:
    return json.dumps(doc, allow_nan=False)


@st.composite
def mutated_traces(draw):
    events = copy.deepcopy(HANDMADE["traceEvents"])
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(events) - 1))
        e = events[i]
        how = draw(st.sampled_from(("set", "drop", "arg", "entry")))
        if not isinstance(e, dict):
            continue
        if how == "set":
            e[draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif how == "drop":
            e.pop(draw(st.sampled_from(FIELDS)), None)
        elif how == "arg":
            a = e.get("args") if isinstance(e.get("args"), dict) else {}  # a deep copy: HANDMADE stays intact
            a[draw(st.sampled_from(ARG_FIELDS))] = draw(json_values)
            e["args"] = a
        else:
            events[i] = draw(json_values)
    doc = {k: v for k, v in HANDMADE.items() if k != "traceEvents"}
    doc["traceEvents"] = events
    return doc


def _check_tables(t) -> None:
    for tab in (t.ops, t.runtime, t.cpu_ops, t.ranges):
        assert (tab.dur_ns >= 0).all()
        assert tab.start_ns.dtype == np.int64
    # no event without a usable ts is placed at 0: the handmade trace lives at 5e12 us
    if len(t.ops):
        assert (t.ops.start_ns != 0).all() or any(e.get("ts") in (0, 0.0, -0.0) for e in HANDMADE["traceEvents"])


def _analyse(path: Path, decoder: str) -> None:
    try:
        t = load_trace(path, decoder=decoder, block_bytes=512)
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    _check_tables(t)
    for m in compute_metrics(t).values():
        if m.idle_us is not None:
            assert m.idle_us >= -1e-9 and m.busy_us <= m.device_window_us + 1e-9
        if m.host_idle is not None:
            h = m.host_idle
            assert min(h.sync_us, h.setup_us, h.dispatch_us, h.data_us, h.python_us, h.unrecorded_us,
                       h.queued_us) >= 0


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated_traces(), decoder=st.sampled_from(["msgspec", "json"]))
def test_loader_is_total_over_mutated_events(tmp_path_factory, doc, decoder):
    p = tmp_path_factory.mktemp("fz") / "t.json"
    p.write_text(_dump(doc))
    _analyse(p, decoder)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=mutated_traces())
def test_rules_never_raise_on_what_loads(tmp_path_factory, doc):
    p = tmp_path_factory.mktemp("fr") / "t.json"
    p.write_text(_dump(doc))
    try:
        facts = facts_from_trace(p)
    except UserError:
        return
    errors = [v for v in evaluate(facts) if v.status == "error"]
    assert not errors, errors[0].traceback


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=300))
def test_loader_is_total_over_bytes(tmp_path_factory, data):
    p = tmp_path_factory.mktemp("fb") / "t.json"
    p.write_bytes(b'{"traceEvents": [' + data)
    try:
        load_trace(p, block_bytes=64)
    except UserError:
        pass


def _with(event: dict) -> dict:
    doc = {k: v for k, v in HANDMADE.items() if k != "traceEvents"}
    doc["traceEvents"] = copy.deepcopy(HANDMADE["traceEvents"]) + [event]
    return doc


KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5000000000100.0, "dur": 1.0}
# every bug the hardening campaign and this fuzz test found, as the input that showed it
REGRESSIONS = {
    "device event without ts (was placed at 0: 'idle 100%')": {k: v for k, v in KERNEL.items() if k != "ts"},
    "negative dur": dict(KERNEL, dur=-5.0),
    "ts beyond 64 bits of ns": dict(KERNEL, ts=2**70),
    "float ts beyond a float64": "1e400",
    "tid beyond 64 bits": dict(KERNEL, tid=2**64 + 5),
    "correlation beyond 64 bits": dict(KERNEL, args={"correlation": 2**64 + 1}),
    "unhashable cat": dict(KERNEL, cat=["kernel"]),
    "dict name": dict(KERNEL, name={"a": 1}),
    "dur needing exact arithmetic": dict(KERNEL, dur=2**45 + 0.001),
    "lone surrogate in a name": dict(KERNEL, name="\ud800"),
    "deeply nested args": "deep",
    "5000-digit ts": "digits",
}


@pytest.mark.parametrize("case", list(REGRESSIONS))
@pytest.mark.parametrize("decoder", ["msgspec", "json"])
def test_regressions(tmp_path, case, decoder):
    e = REGRESSIONS[case]
    p = tmp_path / "t.json"
    if e == "1e400":
        text = _dump(_with(dict(KERNEL, ts=12345.0))).replace("12345.0", "1e400")
    elif e == "deep":
        text = _dump(_with(dict(KERNEL, args={"x": 0}))).replace('"x": 0', '"x": ' + "[" * 3000 + "]" * 3000)
    elif e == "digits":
        text = _dump(_with(dict(KERNEL, ts=12345.0))).replace("12345.0", "9" * 5000)
    else:
        text = json.dumps(_with(e))
    p.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        t = load_trace(p, decoder=decoder)
    except UserError as exc:
        assert case == "deeply nested args"
        assert "event 55 of traceEvents ('k'): field 'args' is nested more than 64 levels deep" in str(exc)
        return
    _check_tables(t)
    compute_metrics(t)
    if case.startswith("device event without ts"):
        assert t.dropped == {"no numeric ts": 1}
        m = compute_metrics(t)["all"]
        assert m.idle_us / m.device_window_us < 0.5
    if case == "negative dur":
        assert t.dropped == {"negative dur": 1}


def test_decimal_durations_are_exact(tmp_path):
    p = tmp_path / "t.json"
    # a trace living at 2^44 us (every event: one far from the others is dropped as outside the span)
    p.write_text(_dump({"traceEvents": [dict(KERNEL, ts=12345.0, dur=0.001), dict(KERNEL, ts=23456.0, dur=2.0)]})
                 .replace("12345.0", "17592186044416.001").replace("23456.0", "17592186044417.5"))
    t = load_trace(p)
    row = int(np.argmin(t.ops.start_ns))
    assert int(t.ops.start_ns[row]) == int(Decimal(2**44) * 1000) + 1 and int(t.ops.dur_ns[row]) == 1
