"""The launch-cost what-if: the max-plus response of recorded H200 traces, the break-even table
of the recorded H200 granularity run, and the emulated launch cost on the CPU."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from gcdoctor.facts import Facts, Measurement
from gcdoctor.facts.granularity import (HostResponse, LaunchEmulation, LaunchWhatIf, GranularityFacts,
                                        GranularityGroup, GranularityVariant, emulation_check,
                                        predict_emulated_step_ms, predict_step_ms)
from gcdoctor.trace import load_trace
from gcdoctor.trace.launch_response import _envelope, fill_whatif, read_steps

RUN = Path(__file__).resolve().parents[1] / "samples" / "h200-llama3-8b-diagnose"
TRACES = RUN / "traces"


def _trace(name: str) -> Path:
    return TRACES / f"granularity-{name}.json.gz"


@pytest.fixture(scope="module")
def h200():
    """The recorded H200 granularity run with its what-if filled in from its own traces."""
    facts = Facts.load(RUN / "facts.json")
    fill_whatif(facts, RUN)
    return facts


# -- the envelope ------------------------------------------------------------------------------

def test_envelope_is_the_maximum_of_all_lines_for_every_extra_time():
    import numpy as np
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 40)
        a = np.array([rng.uniform(0, 100) for _ in range(n)])
        b = np.array([rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()]) for _ in range(n)])
        env = _envelope(a, b)
        assert [x[1] for x in env] == sorted(x[1] for x in env)  # by slope
        for s in (0.0, 0.5, 3.0, 17.0, 250.0, 1e4):
            want = max(a + b * s)
            got = max(x + y * s for x, y in env)
            assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_host_response_sums_its_stretches():
    r = HostResponse(segments=[[[10.0, 0.0], [4.0, 0.5]], [[2.0, 0.5]]])
    assert r.step_ms(0) == 12.0
    assert r.added_ms(0) == 0.0
    # first stretch: max(10, 4 + 0.5 S); second: 2 + 0.5 S
    assert r.added_ms(8.0) == pytest.approx(4.0)  # 10 + 6 - 12
    assert r.added_ms(20.0) == pytest.approx(14.0 + 12.0 - 12.0)


# -- the max-plus model on recorded traces ------------------------------------------------------

@pytest.mark.parametrize("path", sorted(TRACES.glob("granularity-*.json.gz")), ids=lambda p: p.name[12:-8])
def test_response_at_the_native_cost_reproduces_the_profiled_step(path):
    """With nothing added and the profiler left in, the model is the profiled step itself (all 18
    recorded variants, 2 steps each: within 5%, 0.1-4.3% below it)."""
    steps = read_steps(load_trace(path), profiler_us_per_event=0.0)
    assert len(steps) == 2
    for r in steps:
        assert r.per_launch.step_ms(0.0) == pytest.approx(r.step_ms, rel=0.05)
        assert r.launches > 200 and r.segments >= 1


def test_launch_calls_blocked_on_a_full_queue_are_removed_from_the_host_time():
    """Llama-3-8B's device-bound step runs so far ahead of the device that the optimizer's launches
    wait on the launch queue (tens of ms); the tiny synthetic stack never fills it."""
    big = read_steps(load_trace(_trace("model-none")))
    small = read_steps(load_trace(_trace("synthetic-small-none")))
    assert all(r.blocked_ms > 15.0 for r in big)
    assert all(r.blocked_ms < 1.0 for r in small)
    assert all(r.host_issue_ms < r.host_ms - r.blocked_ms + 1e-6 for r in big)


def test_device_bound_step_absorbs_extra_host_time_a_host_bound_one_does_not():
    big = read_steps(load_trace(_trace("model-none")), profiler_us_per_event=2.8)
    small = read_steps(load_trace(_trace("synthetic-small-none")), profiler_us_per_event=2.8)
    for r in big:  # host issue ~19 ms of a ~97 ms device-bound step
        assert r.per_launch.added_ms(20.0) < 2.0
        assert r.per_launch.added_ms(200.0) > 100.0
    for r in small:  # the device idles 93%: every extra millisecond shows
        for s in (5.0, 20.0, 80.0):
            assert r.per_launch.added_ms(s) == pytest.approx(s, rel=0.02)


# -- the break-even table of the recorded H200 run ----------------------------------------------

def test_profiler_cost_is_measured_from_the_host_bound_variants(h200):
    # (profiled - unprofiled) / events of the synthetic h256 variants and the per-Linear h4096 ones
    assert 2.0 < h200.granularity.profiler_us_per_event < 4.0


def test_break_even_and_predictions_on_the_h200(h200):
    g = h200.granularity
    assert g.whatif_launch_us == [20.0, 50.0, 100.0]
    model = g.group("model")
    none, layer = model.get("none"), model.get("layer")
    assert all(v.whatif.method == "trace" for v in model.variants)
    # the model's step is device-bound: its host keeps ahead until launches cost several times 8.7 us
    assert 40.0 < none.break_even_launch_us < 100.0
    assert layer.break_even_launch_us < none.break_even_launch_us  # recompute adds host work, not slack
    # the tiny synthetic stack is host-bound already: break-even at about this device's launch cost
    small = g.group("synthetic-small").get("none")
    assert small.break_even_launch_us < 12.0
    for group in g.groups:
        for v in group.variants:
            preds = [v.step_ms] + v.predicted_step_ms
            assert all(b >= a - 1e-9 for a, b in zip(preds, preds[1:])), (group.name, v.variant)
            assert v.predicted_overhead_pct[0] is not None
    assert none.predicted_overhead_pct == [0.0, 0.0, 0.0]
    # layer checkpointing's overhead grows once the device's launch cost passes its break-even
    assert layer.predicted_overhead_pct[2] > layer.predicted_overhead_pct[0] + 5.0


def test_predict_step_ms_below_the_measured_cost_is_the_measured_step(h200):
    v = h200.granularity.group("model").get("layer")
    base = h200.granularity.launch.launch_us
    assert predict_step_ms(v, base - 1.0, base) == v.step_ms
    assert predict_step_ms(v, base, base) == v.step_ms


def test_facts_with_the_whatif_round_trip(h200, tmp_path):
    h200.save(tmp_path / "facts.json")
    back = Facts.load(tmp_path / "facts.json")
    a = h200.granularity.group("model").get("sub-layer")
    b = back.granularity.group("model").get("sub-layer")
    assert b.whatif.per_launch[0].segments == a.whatif.per_launch[0].segments
    assert b.predicted_step_ms == a.predicted_step_ms and b.break_even_launch_us == a.break_even_launch_us


def test_without_a_trace_the_totals_give_the_break_even(tmp_path):
    """A run without profiling (or its traces deleted): step = max(measured, host time + extra)."""
    facts = Facts.load(RUN / "facts.json")
    run = tmp_path / "run"
    run.mkdir()
    row = facts.granularity.group("model").get("none")
    row.host_ms = 40.0  # unprofiled host time to the final synchronise (not in the old recording)
    fill_whatif(facts, run)  # no traces there
    assert row.whatif.method == "totals"
    assert row.whatif.slack_ms == pytest.approx(row.step_ms - 40.0)
    assert row.break_even_launch_us == pytest.approx(
        facts.granularity.launch.launch_us + 1e3 * (row.step_ms - 40.0) / row.kernels_per_step)


# -- emulation arithmetic ------------------------------------------------------------------------

def _row(step_ms: float, slack_ms: float, ops: dict[str, int], passthrough: int) -> GranularityVariant:
    v = GranularityVariant(group="g", variant="v", step_ms=step_ms, launch_ops_by_phase=ops,
                           passthrough_ops_per_step=passthrough)
    v.measurement = Measurement(probe="granularity", variant="v", batch_size=1, seq_len=1)
    v.whatif = LaunchWhatIf(method="totals", slack_ms=slack_ms, launches_per_step=sum(ops.values()))
    return v


def test_emulated_step_adds_delayed_ops_times_the_read_back_cost_beyond_the_slack():
    v = _row(100.0, 30.0, {"forward": 400, "backward": 500, "optimizer": 100}, passthrough=2000)
    emu = LaunchEmulation(target_us=50.0, readback_extra_us=51.0, passthrough_cost_us=4.0)
    # 1000 ops x 51 us + 2000 x 4 us = 59 ms of host time, 30 of it absorbed
    assert predict_emulated_step_ms(v, emu) == pytest.approx(129.0)
    emu.readback_extra_us = None  # not read back: the target
    assert predict_emulated_step_ms(v, emu) == pytest.approx(128.0)


def test_emulation_check_pairs_variants_and_reports_the_error():
    native = GranularityFacts(groups=[GranularityGroup(name="g", variants=[
        _row(100.0, 30.0, {"forward": 1000}, 0)])])
    emu_row = _row(125.0, 0.0, {"forward": 1000}, 0)
    emulated = GranularityFacts(groups=[GranularityGroup(name="g", variants=[emu_row])],
                                emulation=LaunchEmulation(target_us=50.0, readback_extra_us=50.0))
    (c,) = emulation_check(native, emulated)
    assert (c.predicted_step_ms, c.measured_step_ms) == (pytest.approx(120.0), 125.0)
    assert c.error_pct == pytest.approx(-4.0)
    with pytest.raises(ValueError):
        emulation_check(native, native)


# -- the emulated launch cost on the CPU ---------------------------------------------------------

def test_launch_delay_charges_launching_ops_and_lets_views_and_other_devices_through():
    import time

    import torch

    from gcdoctor.probes.launch_cost import LaunchDelay
    x = torch.zeros(4, requires_grad=True)
    d = LaunchDelay("cpu", spin_us=0.0)
    with d:
        y = (x * 2).view(2, 2).t()  # mul: delayed; view and t: views
        y.sum().backward()  # sum, and the backward's ops: delayed
    assert d.passed >= 2 and d.delayed >= 3
    other = LaunchDelay("cuda")  # CPU tensors do not launch on a CUDA device
    with other:
        (x.detach() + 1).sum()
    assert other.delayed == 0 and other.passed >= 2
    slow = LaunchDelay("cpu", spin_us=2000.0)
    t0 = time.perf_counter()
    with slow:
        for _ in range(10):
            x.detach().add(1)  # detach: through; add: 2 ms
    assert slow.delayed == 10
    assert time.perf_counter() - t0 >= 0.020  # a busy-wait on the wall clock: at least 10 x 2 ms


def test_launch_delay_counts_by_phase_when_asked():
    import torch

    from gcdoctor.probes.launch_cost import LaunchDelay
    d = LaunchDelay("cpu")
    phase = {"now": "forward"}
    d.phase_of = lambda: phase["now"]
    x = torch.ones(3)
    with d:
        x + 1
        phase["now"] = "optimizer"
        x * 2
        x.view(-1)
    assert d.by_phase == {"forward": 1, "optimizer": 1} and d.passed_by_phase == {"optimizer": 1}
    d.reset_counts()
    assert (d.delayed, d.passed, d.by_phase) == (0, 0, {})


def test_calibration_subtracts_the_modes_own_cost():
    from gcdoctor.backends import get_backend
    from gcdoctor.probes.launch_cost import calibrate_emulation, measure_launch_cost
    backend = get_backend("cpu")
    native, _ = measure_launch_cost(backend, launches=300, repeats=1, region_reps=3)
    emu, delay = calibrate_emulation(backend, 500.0, native, launches=300)
    assert emu.mode_cost_us > 0 and emu.passthrough_cost_us >= 0
    assert emu.spin_us == pytest.approx(500.0 - emu.mode_cost_us)
    assert delay.spin_ns == round(emu.spin_us * 1e3)
    low, delay0 = calibrate_emulation(backend, 0.0, native, launches=300)
    assert low.spin_us == 0.0 and delay0.spin_ns == 0
    assert "less than the emulation's own cost" in low.notes[0]


def test_analyze_gives_a_run_recorded_before_the_whatif_its_whatif(tmp_path, capsys):
    from gcdoctor.cli import main
    assert main(["analyze", str(RUN), "--out", str(tmp_path / "an")]) == 0
    capsys.readouterr()
    facts = Facts.load(tmp_path / "an" / "facts.json")
    assert facts.granularity.group("model").get("layer").break_even_launch_us == pytest.approx(53.0, abs=0.1)
    assert facts.offload.link_check is not None and facts.offload.whatif_links == ["PCIe Gen4 x16", "PCIe Gen3 x16"]
    md = (tmp_path / "an" / "report.md").read_text()
    assert "### What-if: step time on a device with costlier launches" in md
    assert "### What-if: a slower host link" in md
