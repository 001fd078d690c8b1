"""The offload probe, run for real on the CPU through a Session: save_on_cpu variants, DeepSpeed
activation checkpointing routed through deepspeed.checkpointing.checkpoint, and DeepSpeed ZeRO-2
with the optimizer offloaded to the CPU (DeepSpeed's CPU Adam, compiled on first use)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import OffloadFacts
from gcdoctor.model.registry import load_spec
from gcdoctor.probes import _deepspeed, offload
from gcdoctor.run.session import Session

MICRO_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
}
ALL = [v.name for v in offload.VARIANTS]


def _config(tmp: Path, **kw) -> RunConfig:
    cfg_path = tmp / "micro-llama" / "config.json"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(json.dumps(MICRO_LLAMA))
    base = dict(device="cpu", model=str(cfg_path), probes=["offload"], out=str(tmp / "run"), seq_len=32,
                warmup_steps=1, measure_steps=1, tui=False)
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture(scope="module")
def run(tmp_path_factory, request) -> Session:
    pytest.importorskip("deepspeed")
    status = _deepspeed.cpu_adam_status()
    if not (status.prebuilt or status.cached):  # say why the next minute is quiet: shown even under -q
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled():
            print("\ntests/test_offload_probe.py: compiling DeepSpeed's CPU Adam op for the ZeRO-2 variant "
                  "(about a minute, once; cached for later runs)", flush=True)
    s = Session(_config(tmp_path_factory.mktemp("offload")))
    s.run()
    return s


def test_every_variant_runs_on_the_cpu(run):
    o = run.facts.offload
    assert [v.variant for v in o.variants] == ALL
    assert [v.variant for v in o.variants if not v.ran] == []


def test_zero2_offload_keeps_fp32_master_and_adam_moments_on_the_host(run):
    v = run.facts.offload.get("deepspeed-zero2-offload+gc")
    assert v.optimizer.startswith("DeepSpeedZeroOptimizer(DeepSpeedCPUAdam)")
    n_params = load_spec(run.config.model).param_count()
    # fp32 master partition + exp_avg + exp_avg_sq, 4 bytes each (DeepSpeed may pad the flat partition)
    assert 12 * n_params <= v.host_state_bytes < 12 * (n_params + 1024)


def test_zero2_offload_config_is_saved_in_the_run_directory(run):
    v = run.facts.offload.get("deepspeed-zero2-offload+gc")
    cfg = json.loads((run.rundir.path / v.ds_config).read_text())
    assert cfg["zero_optimization"]["stage"] == 2
    assert cfg["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert cfg["bf16"]["enabled"] is False  # fp32 on the CPU


def test_deepspeed_checkpointing_computes_the_same_losses_as_torch_checkpointing(run):
    o = run.facts.offload
    assert o.get("deepspeed-ckpt-cpu").measurement.losses == o.get("gc").measurement.losses


def test_deepspeed_checkpoint_regions_are_labelled_and_recomputed(run):
    # the recompute label comes only from the wrapper around deepspeed.checkpointing.checkpoint
    rec = run.facts.trace["offload/deepspeed-ckpt-cpu|recompute"]
    assert rec.range_count == 2 * MICRO_LLAMA["num_hidden_layers"]  # 2 profiled steps x layers


def test_ckpt_cpu_is_not_verifiable_on_the_cpu(run):
    v = run.facts.offload.get("deepspeed-ckpt-cpu")
    cfg = json.loads((run.rundir.path / v.ds_config).read_text())
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is False
    assert v.ckpt_check.method == "" and v.ckpt_check.expected_offload_bytes_per_step is None
    assert v.ckpt_check.detail.startswith("not checkable on the CPU")


def test_save_on_cpu_variants_wrap_forward_and_loss(run):
    o = run.facts.offload
    assert o.get("gc+save_on_cpu-pageable").checkpointing == (
        "activation_checkpointing_enable(use_reentrant=False); forward+loss inside "
        "torch.autograd.graph.save_on_cpu(pin_memory=False)")
    assert o.get("save_on_cpu-pinned").checkpointing.startswith("none; ")


def test_rows_carry_telemetry_from_the_measured_steps(run):
    v = run.facts.offload.get("gc")
    assert v.host_rss_max_bytes is not None and v.host_rss_max_bytes > 0
    assert v.cpu_pct_mean is not None


def test_stall_rules_are_inconclusive_without_a_device(run):
    by_code = {(v.code, v.subject): v for v in run.verdicts}
    assert by_code[("GC020", "")].status == "inconclusive"
    assert "CPU run" in by_code[("GC020", "")].headline
    # whether cpu_checkpointing moved the checkpoints cannot be checked where host and device are one
    ck = by_code[("GC020", "deepspeed-ckpt-cpu: checkpoints on the host")]
    assert ck.status == "inconclusive" and "not checkable on the CPU" in ck.headline
    assert by_code[("GC021", "")].status == "inconclusive"


def test_report_has_the_offload_section(run):
    md = (run.rundir.path / "report.md").read_text()
    assert "## Offload: checkpointing with CPU offload" in md
    assert "| deepspeed-zero2-offload+gc |" in md


def test_facts_round_trip(run):
    again = Facts.load(run.rundir.path / "facts.json")
    assert again.offload == run.facts.offload


def test_init_distributed_is_idempotent(run):
    ds, _ = _deepspeed.load("cpu")
    assert _deepspeed.init_distributed(ds, "cpu") == _deepspeed.init_distributed(ds, "cpu") == "gloo"


def test_default_cpu_run_skips_zero2_while_cpu_adam_is_not_compiled(run, monkeypatch):
    monkeypatch.setattr(_deepspeed, "cpu_adam_status", lambda: _deepspeed.OpStatus(prebuilt=False, cached=False))
    ctx = SimpleNamespace(backend=SimpleNamespace(kind="cpu", index=0), facts=Facts(), log=lambda *a, **k: None)
    state = offload._DeepSpeedState(ctx, OffloadFacts(), explicit=False)
    assert "--probes offload" in state.skip_reason(offload.ZERO2)
    assert "not compiled yet" in state.skip_reason(offload.ZERO2)
    assert state.skip_reason(offload.CKPT_CPU) is None


def test_default_cpu_run_skips_zero2_even_when_cpu_adam_is_cached(run, monkeypatch):
    monkeypatch.setattr(_deepspeed, "cpu_adam_status", lambda: _deepspeed.OpStatus(prebuilt=False, cached=True))
    ctx = SimpleNamespace(backend=SimpleNamespace(kind="cpu", index=0), facts=Facts(), log=lambda *a, **k: None)
    state = offload._DeepSpeedState(ctx, OffloadFacts(), explicit=False)
    reason = state.skip_reason(offload.ZERO2)
    assert "--probes offload" in reason and "not compiled" not in reason


def test_without_deepspeed_the_torch_variants_still_run(tmp_path, monkeypatch):
    monkeypatch.setattr(_deepspeed, "load", lambda kind: (None, "deepspeed is not importable (test)"))
    # the reference and the two DeepSpeed variants are enough to show it (and keep the test short)
    monkeypatch.setattr(offload, "VARIANTS", tuple(v for v in offload.VARIANTS if v.name in
                                                   ("gc", offload.CKPT_CPU, offload.ZERO2)))
    s = Session(_config(tmp_path, profile=False, warmup_steps=0))
    s.run()
    o = s.facts.offload
    assert [v.variant for v in o.variants if v.ran] == ["gc"]
    assert o.get(offload.CKPT_CPU).skipped == o.get(offload.ZERO2).skipped == "deepspeed is not importable (test)"
    assert s.facts.unavailable["offload.deepspeed"] == "deepspeed is not importable (test)"
