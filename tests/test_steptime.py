"""plan's step-time prediction on a card we do not have (gcdoctor/model/steptime.py), checked where it can
be: scaling the recorded 4-layer H200 probe to the full model it predicts the measured H200 sweep."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.model.registry import load_spec
from gcdoctor.model.plan import run_plan
from gcdoctor.model.steptime import H200_REFERENCE, load_reference, reference_from_facts, section
from gcdoctor.trace.launch_response import fill_whatif

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "samples" / "h200-llama3-8b-diagnose"


@pytest.fixture(scope="module")
def recorded():
    facts = Facts.load(RUN / "facts.json")
    fill_whatif(facts, RUN)
    return facts


def test_the_builtin_reference_is_the_recorded_h200_run(recorded):
    ref = reference_from_facts(recorded, "x")
    assert (ref.device_name, ref.model, ref.n_layers, ref.seq_len, ref.batch_size, ref.dtype) == (
        H200_REFERENCE.device_name, H200_REFERENCE.model, 4, 4096, 1, "bf16")
    assert ref.launch_us == pytest.approx(H200_REFERENCE.launch_us, abs=0.01)
    for got, want in zip(ref.variants, H200_REFERENCE.variants, strict=True):
        for f in dataclasses.fields(got):
            a, b = getattr(got, f.name), getattr(want, f.name)
            assert a == b if isinstance(a, str) else a == pytest.approx(b, abs=0.006), (got.variant, f.name)


def test_scaled_to_the_full_model_it_predicts_the_measured_h200_sweep(recorded):
    """The 4-layer batch-1 probe, scaled to 32 layers and batches 1-11 on the same card, against the
    sweep's measured steps of the same run: within 10% (+1.8% to +7.7% on this recording)."""
    spec = load_spec("llama3-8b")
    measured = [(m.variant, m.batch_size, m.step_ms_median) for m in recorded.sweep.measurements if m.fits]
    assert len(measured) == 8  # no_gc at 1, 2; gc at 1, 2, 4, 8, 10, 11
    for variant, batch, ms in measured:
        _, data = section(spec, 4096, "bf16", "h200", batch_size=batch)
        name = {"no_gc": "none", "gc": "layer"}[variant]
        (p,) = [p for p in data["predictions"] if p["variant"] == name]
        assert p["step_ms"] == pytest.approx(ms, rel=0.10), (variant, batch)


def test_on_its_own_configuration_it_gives_back_the_measured_steps(recorded):
    _, data = section(load_spec("llama3-8b", layers=4), 4096, "bf16", "h200")
    assert data["launch_us"] == [H200_REFERENCE.launch_us] and "measured on this card" in data["launch_source"]
    g = recorded.granularity.group("model")
    for p in data["predictions"]:
        v = g.get(p["variant"])
        assert p["step_ms"] == pytest.approx(v.step_ms, abs=0.02)
        assert p["break_even_launch_us"] == pytest.approx(v.break_even_launch_us, abs=0.1)


def test_an_mtt_s4000_without_a_measured_launch_cost_gets_a_range():
    lines, data = section(load_spec("llama3-8b"), 4096, "bf16", "mtt-s4000")
    assert data["kind"] == "prediction" and data["launch_us"] == [20.0, 50.0, 100.0]
    assert "not known for this card" in data["launch_source"]
    assert data["peak_tflops"] == 100.0 and data["bandwidth_gbs"] == 768.0
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("Predicted step time per checkpointing granularity on ")
    by = {(p["variant"], p["launch_us"]): p for p in data["predictions"]}
    # a tenth of the H200's FLOP/s: the step is the device's at any of these launch costs
    assert by[("layer", 100.0)]["step_ms"] == by[("layer", 20.0)]["step_ms"]
    assert by[("layer", 20.0)]["overhead_pct"] > 5.0 and by[("none", 20.0)]["overhead_pct"] == 0.0
    assert by[("layer", 20.0)]["break_even_launch_us"] > 100.0


def test_a_given_launch_cost_and_a_run_directory(tmp_path):
    lines, data = section(load_spec("llama3-8b"), 4096, "bf16", "mtt-s4000", launch_us=30.0,
                          granularity_run=str(RUN))
    assert data["launch_us"] == [30.0] and data["reference"] == str(RUN)
    with pytest.raises(UserError, match="between 0 and 100000"):
        section(load_spec("llama3-8b"), 4096, "bf16", "mtt-s4000", launch_us=-1.0)
    with pytest.raises(UserError, match="no facts.json"):
        load_reference(tmp_path)
    cpu = ROOT / "samples" / "granularity" / "cpu-tiny-llama"
    with pytest.raises(UserError, match="no profiled model variant with a trace-based what-if"):
        load_reference(cpu)


def test_an_emulated_run_is_no_reference(recorded):
    from gcdoctor.facts.granularity import LaunchEmulation
    recorded.granularity.emulation = LaunchEmulation(target_us=50.0)
    try:
        with pytest.raises(UserError, match="emulated launch cost"):
            reference_from_facts(recorded, "emu")
    finally:
        recorded.granularity.emulation = None


def test_plan_shows_it_beside_memory_for_a_named_card_only():
    text, data = run_plan(model="llama3-8b", device_memory="48GB", device="musa", card="mtt-s4000", launch_us=30)
    assert data["step_time"]["launch_us"] == [30.0]
    assert "Predicted step time per checkpointing granularity" in text
    assert "no batch fits this card's memory" in text  # 59.8 GiB of model states on 48 GB
    text, data = run_plan(model="llama3-8b", device_memory="48GB", device="musa")
    assert "step_time" not in data and "Predicted step time" not in text
    with pytest.raises(UserError, match="need --device CARD"):
        run_plan(model="llama3-8b", device_memory="48GB", device="musa", launch_us=30)
