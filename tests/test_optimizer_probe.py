"""The optimizer probe on the CPU: foreach, for-loop and fused AdamW at batch 1 with layer
checkpointing, each measured (the CPU counter is exact) and predicted by the memory model."""
from __future__ import annotations

from gcdoctor.config import RunConfig
from gcdoctor.run.session import Session


def _run(micro_llama, out, **kw):
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["optimizer"], seq_len=32, profile=False, measure_steps=1,
                    warmup_steps=1, out=str(out), telemetry_hz=5.0, **kw)
    s = Session(cfg)
    s.run()
    return s


def test_each_adamw_is_measured_and_predicted_to_the_byte(micro_llama, tmp_path):
    s = _run(micro_llama, tmp_path / "r")
    opt = s.facts.optimizer
    assert opt.batch_size == 1 and opt.skipped == {}
    assert [m.variant for m in opt.measurements] == ["adamw", "adamw-forloop", "adamw-fused"]
    base, loop, fused = (opt.get(n) for n in ("adamw", "adamw-forloop", "adamw-fused"))
    assert base.peak_phase == "optimizer step"
    for m in (base, loop, fused):
        assert m.peak_allocated_bytes == opt.predicted_peak_bytes[m.variant], m.variant
    # foreach makes one copy of every parameter; the for-loop two of one; fused none
    params = base.param_bytes
    assert base.peak_optimizer_allocated_bytes - fused.peak_optimizer_allocated_bytes == params
    assert fused.peak_phase == "forward+backward"
    assert loop.peak_allocated_bytes < base.peak_allocated_bytes


def test_only_adamw_is_probed(micro_llama, tmp_path):
    s = _run(micro_llama, tmp_path / "r", optimizer="sgd")
    assert s.facts.optimizer is None and "SGD" in s.facts.unavailable["optimizer"].upper()
