"""Host-side causes of device idle (gcdoctor/trace/hostidle.py, rules GC021-GC027): on real H200 and
CPU recordings of each cause (samples/traces/h200-host, samples/traces/host; bench/record_host_traces.py),
and on small hand-built traces whose answer is worked out by hand."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate
from gcdoctor.facts.trace import IDLE_CAUSES, TraceKey
from gcdoctor.report.markdown import render_markdown
from gcdoctor.rules import BY_CODE
from gcdoctor.trace import compute_metrics, facts_from_trace, load_trace

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "samples" / "traces" / "h200-host"
CPU = REPO / "samples" / "traces" / "host"
HOST_RULES = ("GC021", "GC022", "GC023", "GC024", "GC025")
RULES = [BY_CODE[c] for c in (*HOST_RULES, "GC010", "GC020", "GC026")]


def fired(path: Path) -> dict[str, object]:
    return {v.code: v for v in evaluate(facts_from_trace(path), RULES) if v.status == "fired"}


# -- real recordings ---------------------------------------------------------------------------

@pytest.mark.parametrize("cause, code, words", [
    ("dataloader", "GC024", "waits on the DataLoader"),
    ("item", "GC022", "cudaStreamSynchronize under aten::item"),
    ("tiny", "GC021", "dispatching ops"),
])
def test_h200_each_recorded_cause_is_named_by_its_rule(cause, code, words):
    f = fired(H200 / f"{cause}.json.gz")
    assert code in f and words in f[code].headline
    assert not {"GC020", "GC010", "GC023"} & set(f)  # no offload, no checkpointing, no setup in steady state


def test_h200_a_slow_loader_after_a_draining_copy_is_data_not_sync():
    """The Trainer with a 60 ms-per-sample Dataset (samples/watch/h200-w3/trainer-slow-data): each
    step's batch copy (aten::to, a pageable cudaStreamSynchronize) empties the queue just before
    accelerate fetches the next batch (enumerate(DataLoader), 121-123 ms). The device waits on the
    loader: GC024, not GC022 (which once named it "synchronisations 57%")."""
    path = H200 / "trainer-slow-data.json.gz"
    f = fired(path)
    assert "GC024" in f and "GC022" not in f
    assert f["GC024"].headline == "trace: the device waits on the DataLoader 56% of the step"
    steady = compute_metrics(load_trace(path))["all"].host_idle
    assert steady.data_us == pytest.approx(243611.3, abs=0.5)
    assert steady.sync_us < 0.02 * steady.data_us


def test_h200_item_names_the_fix():
    v = fired(H200 / "item.json.gz")["GC022"]
    assert "every N steps" in v.recommendation
    ev = {e.label: e.value for e in v.evidence}
    # 5 .item() calls in 5 steady steps (step 5, the range after the last prof.step(), has no device work)
    assert ev["gaps with the host inside a synchronising call"] == pytest.approx(1.0)
    # the device idles only ~20 us per step while the host is inside the calls; the 2 ms "logger" sleep after
    # each .item() is Python, which the device's 25 ms of work per step would have hidden without the sync
    h = facts_from_trace(H200 / "item.json.gz").trace["steady"].host_idle
    assert h.sync_us < 0.01 * h.idle_us and h.python_us > 0.8 * h.idle_us
    assert ev["device idle the synchronisations cost"] == pytest.approx(h.sync_exposed_us / 5 / 1e3)
    assert h.sync_exposed_us == pytest.approx(h.sync_us + h.after_sync_us)


def test_h200_healthy_steps_are_silent_and_warm_up_is_apart():
    f = fired(H200 / "healthy.json.gz")
    assert not set(HOST_RULES) & set(f)
    m = compute_metrics(load_trace(H200 / "healthy.json.gz"))
    assert m["all"].warmup_steps == [0, 1] and m["all"].steady_steps == [2, 3, 4, 5]
    assert m["step:0"].step_phase == "warm-up" and m["step:3"].step_phase == "steady"


def test_h200_setup_only_trace_says_so_and_judges_nothing():
    f = fired(H200 / "setup.json.gz")
    assert list(f) == ["GC026"]
    assert "only one-time setup" in f["GC026"].headline


@pytest.mark.parametrize("name", ["healthy", "dataloader", "item", "tiny"])
def test_no_idle_time_is_judged_twice(name):
    facts = facts_from_trace(H200 / f"{name}.json.gz")
    h = facts.trace["steady"].host_idle
    parts = sum(getattr(h, f"{c}_us") for c in IDLE_CAUSES)
    assert parts == pytest.approx(h.idle_us, abs=1e-3)  # every idle nanosecond in exactly one cause
    judged = {"GC021": h.dispatch_us, "GC022": h.sync_us, "GC023": h.setup_us, "GC024": h.data_us,
              "GC025": h.python_us}
    fired_us = sum(judged[v.code] for v in evaluate(facts, RULES) if v.status == "fired" and v.code in judged)
    assert fired_us <= h.idle_us + 1e-6


@pytest.mark.parametrize("name", ["healthy", "dataloader", "item", "tiny", "setup"])
def test_cpu_recordings_say_there_is_no_device_and_judge_nothing(name):
    facts = facts_from_trace(CPU / f"{name}.json.gz")
    verdicts = evaluate(facts)
    fired_codes = [v.code for v in verdicts if v.status == "fired"]
    assert fired_codes == ["GC026"]
    md = render_markdown(facts, verdicts)
    assert "behaves as expected" not in md
    assert "adamw" not in md and "host None" not in md and "None CPUs" not in md


# -- hand-built traces -------------------------------------------------------------------------

def ev(cat, name, ts, dur, pid=1, tid=1, **args):
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


def write(tmp_path: Path, events: list, name="t.json", **meta) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({**meta, "traceEvents": events}))
    return p


def kernel(ts, dur, corr, cat="kernel"):
    return ev(cat, "k", ts, dur, pid=0, tid=7, correlation=corr, stream=7)


def launch(ts, corr, cat="cuda_runtime", name="cudaLaunchKernel"):
    return ev(cat, name, ts, 2, correlation=corr)


def steps(n, length=1000, t0=0):
    return [ev("user_annotation", f"ProfilerStep#{i}", t0 + i * length, length) for i in range(n)]


def busy_steps(n, length=1000, t0=0, cat="kernel", rt="cuda_runtime", start=100):
    """Steps whose device is busy from `start` us in to 20 us before the step's end."""
    out = steps(n, length, t0)
    for i in range(n):
        a = t0 + i * length
        out.append(ev("cpu_op", "aten::mm", a + start - 5, 10))
        out += back_to_back(a + start, length - start - 20, 1000 + 10 * i, a + start - 2, cat=cat, rt=rt)
    return out


def back_to_back(ts, dur, corr, launched, n=4, cat="kernel", rt="cuda_runtime"):
    """n kernels covering [ts, ts + dur) back to back (one busy stretch), all launched at `launched`:
    enough device ops for the evidence floors without changing the busy time."""
    out, part = [], dur / n
    for j in range(n):
        out += [launch(launched, corr + j, cat=rt), kernel(ts + j * part, part, corr + j, cat)]
    return out


def test_sync_drain_is_attributed_to_the_call_and_the_op(tmp_path):
    evs = steps(3)
    for i in range(3):
        a = i * 1000
        evs += [launch(a + 1, 10 + i), kernel(a + 5, 300, 10 + i),
                ev("cpu_op", "aten::item", a + 10, 330), ev("cuda_runtime", "cudaStreamSynchronize", a + 20, 286),
                launch(a + 800, 20 + i), kernel(a + 805, 190, 20 + i)]
    m = compute_metrics(load_trace(write(tmp_path, evs)))
    h = m["steady"].host_idle
    # per step the gap 305..805 opens while the host is inside the sync (until 306: sync), then inside
    # aten::item (306..340: dispatch), then Python (340..800), then the launch (800..805: dispatch); the
    # head is Python (0..1) and the first launch (1..5: dispatch), the tail 995..1000 Python. A sync owns
    # the idle only while the host is inside it: the Python after it is Python.
    assert h.sync_count == 3 and h.sync_us == pytest.approx(3)
    assert h.python_us == pytest.approx(3 * (1 + 460 + 5)) and h.dispatch_us == pytest.approx(3 * (4 + 34 + 5))
    assert h.sync_ops == {"aten::item": pytest.approx(3)} and list(h.sync_calls) == ["cudaStreamSynchronize"]
    assert h.after_sync_us == pytest.approx(3 * 499)
    # without the sync the host's 714 us per step would still exceed the device's 490: nothing to hide
    assert h.sync_exposed_us == pytest.approx(3)


def test_old_kineto_categories_and_mtia_are_device_activity(tmp_path):
    for cat, rt in (("Kernel", "Runtime"), ("mtia_ccp_events", "mtia_runtime")):
        evs = busy_steps(3, cat=cat, rt=rt)
        evs = [dict(e, cat="Operator") if e["cat"] == "cpu_op" else e for e in evs]
        t = load_trace(write(tmp_path, evs, f"{cat}.json"))
        m = compute_metrics(t)
        assert m["all"].device_unavailable is None and m["all"].kernel_count == 12
        assert m["steady"].host_idle.dispatch_us > 0


def test_range_profiler_trace_says_it_has_no_kernel_timing(tmp_path):
    evs = [ev("cpu_op", "aten::mm", 0, 10), ev("cuda_profiler_range", "range0", 0, 100, pid=0)]
    m = compute_metrics(load_trace(write(tmp_path, evs)))
    assert "CUPTI range-profiler" in m["all"].device_unavailable


def test_a_device_event_without_ts_is_left_out_not_placed_at_zero(tmp_path):
    evs = busy_steps(4, t0=10_000)
    evs.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 5})
    evs.append(dict(kernel(10_100, -5, 999)))  # a negative duration
    facts = facts_from_trace(write(tmp_path, evs))
    assert facts.trace["all"].idle_us / facts.trace["all"].device_window_us < 0.2  # not "idle 100%"
    note = next(n for n in facts.trace["all"].notes if "could not be placed" in n)
    assert "1 with no numeric ts" in note and "1 with negative dur" in note
    (v,) = evaluate(facts, [BY_CODE["GC026"]])
    assert v.status == "fired" and "left out" in v.headline


def test_setup_calls_recurring_after_warm_up_fire_gc023(tmp_path):
    evs = busy_steps(4, start=400)
    evs += [ev("cuda_runtime", "cuModuleLoadData", 10, 50)]  # the first step loads modules: warm-up
    for i in range(1, 4):  # every later step frees and allocates in its head gap (300 of its 1000 us)
        evs += [ev("cuda_runtime", "cudaFree", i * 1000 + 5, 150), ev("cuda_runtime", "cudaMalloc", i * 1000 + 160, 150)]
    facts = facts_from_trace(write(tmp_path, evs))
    assert facts.trace["all"].warmup_steps == [0]
    (v,) = evaluate(facts, [BY_CODE["GC023"]])
    assert v.status == "fired" and "cudaMalloc" in v.headline and "empty_cache" in v.recommendation


def test_queued_idle_is_not_the_host(tmp_path):
    evs = steps(2)
    for i in range(2):  # both kernels launched at the step start; the second waits on something else
        a = i * 1000
        evs += [ev("cpu_op", "aten::mm", a, 20), launch(a + 5, 20 + i), kernel(a + 700, 290, 20 + i)]
        evs += back_to_back(a + 10, 200, 100 + 10 * i, a + 1, n=5)
    h = compute_metrics(load_trace(write(tmp_path, evs)))["steady"].host_idle
    assert h.queued_us == pytest.approx(2 * 490)


def test_per_rank_folder_names_the_straggler(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for rank in range(3):
        # every rank: 500 us of compute, then an all-reduce that ends when the slowest rank joins it;
        # rank 2's host runs 300 us of Python before it launches its compute
        late = 300 if rank == 2 else 0
        evs = steps(4)
        for i in range(4):
            a = i * 1000
            evs += [ev("cpu_op", "aten::mm", a + 95 + late, 10), *back_to_back(a + 100 + late, 500, 1000 + 10 * i,
                                                                              a + 98 + late),
                    launch(a + 99 + late, 200 + i),
                    dict(kernel(a + 600 + late, 380 - late, 200 + i), name="ncclKernel_AllReduce_RING_LL_Sum_float")]
        write(d, evs, f"host_{100 + rank}.1700000000.pt.trace.json", distributedInfo={"rank": rank})
    rc = main(["analyze", str(d), "--out", str(tmp_path / "out")])
    assert rc == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    by = {(v["code"], v["subject"]): v for v in report["verdicts"]}
    assert by[("GC027", "rank/2")]["status"] == "fired"
    assert by[("GC025", "rank/2")]["status"] == "fired"
    assert TraceKey.parse("rank/2|steady") == TraceKey("rank/2", "steady")


def test_trace_key_round_trips():
    for s in ("all", "step:3", "recompute/*", "sweep/gc", "sweep/gc|step:3", "granularity/model/layer|recompute"):
        assert str(TraceKey.parse(s)) == s
    assert TraceKey.parse("sweep/gc|step:3").step == 3 and TraceKey.parse("offload/x|forward").probe == "offload"
    assert TraceKey.parse("step:3").probe == "trace"
