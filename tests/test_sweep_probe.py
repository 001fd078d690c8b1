"""The batch-sweep probe on the CPU with an injected allocation limit."""
from __future__ import annotations

from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.models import build_model, load_spec
from gcdoctor.session import Session


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
    # doubling then bisection: 1, 2, 4, 8 (OOM), then 6 (OOM), 5
    assert [t.batch_size for t in sweep.trials if t.variant == "no_gc"] == [1, 2, 4, 8, 6, 5]
    assert [t.fits for t in sweep.trials if t.variant == "no_gc"] == [True, True, True, False, False, True]
    # after every OOM, memory went back to the baseline: every trial starts from the model alone
    before = [m.allocated_before_bytes for m in sweep.measurements if m.variant == "no_gc"]
    assert len(before) == 6 and len(set(before)) == 1
    model = build_model(load_spec(micro_llama), "fp32", "cpu")
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())  # RoPE inv_freq
    assert before[0] == sweep.measurements[0].param_bytes + buffers
    assert all(m.oom_phase in ("forward", "backward", "optimizer") for m in sweep.measurements if not m.fits)


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
    run = tmp_path / "r"
    for name in ("config.json", "facts.json", "events.jsonl", "report.md", "report.json"):
        assert (run / name).is_file(), name
    facts = Facts.load(run / "facts.json")
    assert facts.to_dict() == s.facts.to_dict()
    assert [m.batch_size for m in facts.sweep.measurements] == [1, 2, 1, 2]
