"""The batch-sweep probe on the CPU with an injected allocation limit."""
from __future__ import annotations

import pytest

from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.model.registry import build_model, load_spec
from gcdoctor.run.session import Session


def run_sweep(micro_llama, out, **kw):
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=32, profile=False,
                    measure_steps=1, warmup_steps=1, out=str(out), telemetry_hz=5.0, **kw)
    session = Session(cfg)
    session.run()
    return session


def test_search_finds_the_largest_batch_under_the_limit(micro_llama, tmp_path):
    # First, the exact peak of every batch without a limit: the CPU backend counts storages exactly.
    free = run_sweep(micro_llama, tmp_path / "free", batch_sizes=list(range(1, 13)))
    peaks = {(m.variant, m.batch_size): m.peak_allocated_bytes for m in free.facts.sweep.measurements}
    limit = peaks[("no_gc", 5)] + 1  # batch 5 fits without GC, batch 6 does not
    assert peaks[("no_gc", 6)] > limit
    expected_gc = max(b for b in range(1, 13) if peaks[("gc", b)] <= limit)
    assert expected_gc > 5

    s = run_sweep(micro_llama, tmp_path / "limited", memory_limit_bytes=limit, max_batch=12)
    sweep = s.facts.sweep
    assert sweep.searched
    assert sweep.max_batch == {"no_gc": 5, "gc": expected_gc}
    # guided by the memory model (exact on the CPU): the predicted boundary, then its neighbour
    assert sweep.strategy == {"no_gc": "model-guided", "gc": "model-guided"}
    assert sweep.predicted_max_batch == {"no_gc": 5, "gc": expected_gc}
    assert [(t.batch_size, t.fits) for t in sweep.trials if t.variant == "no_gc"] == [(5, True), (6, False)]
    assert [(t.batch_size, t.fits) for t in sweep.trials if t.variant == "gc"][:2] == [
        (expected_gc, True), (expected_gc + 1, False)]
    assert sweep.search_ooms == {"no_gc": 1, "gc": 1}
    assert [t.oom_kind for t in sweep.trials if not t.fits] == ["capacity", "capacity"]
    # the equal-batch point of the checkpointed variant is measured for the comparison rules
    assert sweep.common_batches() == [5]
    # after every OOM, memory went back to the baseline: every trial starts from the model alone
    before = [m.allocated_before_bytes for m in sweep.measurements if m.variant == "no_gc"]
    assert len(before) == 2 and len(set(before)) == 1
    assert all(m.allocated_after_bytes == m.allocated_before_bytes for m in sweep.measurements)
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # RoPE inv_freq
    assert before[0] == sweep.measurements[0].param_bytes + buffers
    assert all(m.oom_phase in ("forward", "backward", "optimizer") for m in sweep.measurements if not m.fits)


@pytest.mark.parametrize("guess,trials", [
    (2, [(2, True), (3, True), (6, False), (4, True), (5, True)]),  # short: double on, then bisect
    (9, [(9, False), (8, False), (4, True), (6, False), (5, True)]),  # long: below, then bisect
    (None, [(1, True), (2, True), (4, True), (8, False), (6, False), (5, True)]),  # no model: doubling
])
def test_a_wrong_prediction_falls_back_to_doubling_and_bisection(micro_llama, tmp_path, monkeypatch, guess, trials):
    from gcdoctor.probes.batch_sweep import SweepProbe
    free = run_sweep(micro_llama, tmp_path / "free", batch_sizes=[5])
    limit = free.facts.sweep.get("no_gc", 5).peak_allocated_bytes + 1
    monkeypatch.setattr(SweepProbe, "_prediction", staticmethod(lambda ctx, variant: guess))
    s = run_sweep(micro_llama, tmp_path / "limited", memory_limit_bytes=limit, max_batch=12)
    sweep = s.facts.sweep
    assert [(t.batch_size, t.fits) for t in sweep.trials if t.variant == "no_gc"] == trials
    assert sweep.max_batch["no_gc"] == 5
    assert sweep.strategy["no_gc"] == ("model-guided" if guess else "doubling")
    assert sweep.search_ooms["no_gc"] == sum(1 for _, fits in trials if not fits)


def test_checkpointing_lowers_peak_at_equal_batch(micro_llama, tmp_path):
    s = run_sweep(micro_llama, tmp_path / "r", batch_sizes=[4])
    sweep = s.facts.sweep
    off, on = sweep.get("no_gc", 4), sweep.get("gc", 4)
    assert on.peak_allocated_bytes < off.peak_allocated_bytes
    assert on.activation_after_forward_bytes < off.activation_after_forward_bytes
    # model states are the same tensors either way
    assert on.model_state_bytes == off.model_state_bytes
    assert off.param_bytes == 4 * 151_872  # fp32 parameters of the micro Llama, exactly
    assert "use_reentrant=False" in sweep.gc_api


def test_run_directory_is_complete_and_reloadable(micro_llama, tmp_path):
    s = run_sweep(micro_llama, tmp_path / "r", batch_sizes=[1, 2])
    assert (s.facts.sweep.searched, s.facts.sweep.fixed_by) == (False, "--batch-sizes")
    run = tmp_path / "r"
    for name in ("config.json", "facts.json", "events.jsonl", "report.md", "report.json"):
        assert (run / name).is_file(), name
    facts = Facts.load(run / "facts.json")
    assert facts.to_dict() == s.facts.to_dict()
    assert [m.batch_size for m in facts.sweep.measurements] == [1, 2, 1, 2]
