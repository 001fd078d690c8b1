"""Each checkpointing policy of the policy search, applied to tiny-llama (2 layers) on the CPU, does
what it claims: read from its own profiled step (the recomputed regions gcdoctor.trace.recompute
finds) and from the bytes each layer keeps (the memory counter), against exact expectations."""
from __future__ import annotations

import re

import pytest
import torch

from gcdoctor.facts.views import spread_pct
from gcdoctor.model import memory as M
from gcdoctor.model import registry as models
from gcdoctor.backends.cpu import CpuBackend
from gcdoctor.probes import _policies as P

SEQ = 32
LAYERS = 2
CHECKED = ["none", "layer", "every-2", "attn-only", "mlp-only", "selective-op", "cpu-offload"]


@pytest.fixture(scope="module")
def checks():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a shared 2-core machine: one intra-op thread is faster
    spec = models.load_spec("tiny-llama", layers=LAYERS)
    backend = CpuBackend()
    try:
        with backend.tracking():
            model = models.build_model(spec, "fp32", backend.device, seed=0)
            backend.track([*model.parameters(), *model.buffers()])
            out = {p: P.check_policy(model, p, backend, 1, SEQ, spec, "fp32") for p in CHECKED}
            # every policy undoes itself: the model is plain again
            assert all("forward" not in layer.__dict__ for layer in model.model.layers)
    finally:
        torch.set_num_threads(threads)
    return spec, out


def test_recomputed_regions_are_the_checkpointed_layers(checks):
    _, out = checks
    regions = {p: r.regions for p, r in out.items()}
    # layer: every layer's forward again; every-2: layer 0 of 2; attention- or MLP-only and selective:
    # a region per layer; none and offload: nothing
    assert regions == {"none": 0, "layer": 2, "every-2": 1, "attn-only": 2, "mlp-only": 2, "selective-op": 2,
                       "cpu-offload": 0}
    assert out["none"].recomputed_ops == 0
    assert out["every-2"].recomputed_ops * 2 == out["layer"].recomputed_ops


def test_kept_bytes_per_layer_are_what_each_policy_implies(checks):
    spec, out = checks
    full = M.layer_activation_bytes_per_token(spec, "fp32") * SEQ
    residue = M.checkpoint_residue_bytes_per_token(spec, "fp32") * SEQ
    assert out["none"].kept_per_layer == [full, full]
    assert out["layer"].kept_per_layer == [residue, residue]  # a layer keeps its input only
    assert out["every-2"].kept_per_layer == [residue, full]  # transformers checkpoints layers 0, 2, ...
    assert out["cpu-offload"].kept_per_layer == [full, full]  # on the CPU "offloaded" tensors stay put
    for part in ("attn-only", "mlp-only"):
        kept = out[part].kept_per_layer[0]
        assert residue < kept < full


def test_selective_op_saves_matmul_and_attention_outputs_and_recomputes_pointwise_ops(checks):
    spec, out = checks
    sel = out["selective-op"]
    # q, k, v, o, gate, up, down per layer, and one attention per layer
    assert sel.selective.saved == {"mm": 7 * LAYERS, "_scaled_dot_product_flash_attention_for_cpu": LAYERS}
    recomputed = set(sel.selective.recomputed)
    assert not recomputed & P.SAVE_OP_NAMES
    assert {"mul", "rsqrt", "silu", "add"} <= recomputed
    h, f, hd = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.n_heads * hd, spec.n_kv_heads * hd
    want = 4 * (q + 2 * kv + h + 2 * f + h + q + h) + 4 * spec.n_heads
    assert sel.kept_per_layer == [want * SEQ] * LAYERS
    assert sel.check.expected_saved_bytes_per_layer == want * SEQ


def test_every_check_passes_with_its_band(checks):
    _, out = checks
    for policy, r in out.items():
        assert r.check.ok is True, (policy, r.check.note)
    assert out["none"].check.expected_recompute_max_pct == 0.0
    assert out["every-2"].check.expected_recompute_max_pct == 50.0
    assert out["layer"].check.recompute_share_pct > 0.0


def test_a_policy_that_does_not_do_what_it_claims_is_caught(checks):
    spec, out = checks
    fake = P.CheckResult(check=P.PolicyCheck(), regions=0, kept_per_layer=list(out["none"].kept_per_layer))
    P._judge(fake, "layer", spec, "fp32", SEQ, 0.0)  # "layer" that recomputed nothing and kept everything
    assert fake.check.ok is False
    assert "0 recomputed regions in the trace, 2 expected" in fake.check.note


def test_the_compilers_memory_budget_keeps_less_the_lower_it_is():
    torch.set_num_threads(1)
    spec = models.load_spec("tiny-llama", layers=1)
    backend = CpuBackend()
    with backend.tracking():
        model = models.build_model(spec, "fp32", backend.device, seed=0)
        backend.track([*model.parameters(), *model.buffers()])
        low = P.check_policy(model, "budget-0.1", backend, 1, 16, spec, "fp32")
    full = M.layer_activation_bytes_per_token(spec, "fp32") * 16
    assert low.regions == 0  # compiled: the recompute is inside the compiled backward
    assert 0 < low.kept_per_layer[0] < full / 2
    assert low.check.ok is True


def test_the_chunked_loss_is_the_librarys_loss():
    torch.manual_seed(0)
    spec = models.load_spec("tiny-llama", layers=1)
    model = models.build_model(spec, "fp32", "cpu", seed=0)
    ids = torch.randint(spec.vocab_size, (2, 24))
    from gcdoctor.run.capture import _causal_lm_loss
    ref = _causal_lm_loss(model, ids)
    ref.backward()
    g_ref = model.lm_head.weight.grad.clone()
    model.zero_grad()
    got = P.chunked_causal_lm_loss(model, ids, chunks=5)
    got.backward()
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert torch.allclose(model.lm_head.weight.grad, g_ref, rtol=1e-4, atol=1e-7)


def test_the_policy_peak_is_the_timelines_at_both_ends():
    spec = models.load_spec("llama3-8b")
    full = M.layer_activation_bytes_per_token(spec, "bf16")
    residue = M.checkpoint_residue_bytes_per_token(spec, "bf16")
    for kept, gc in ((residue, True), (full, False)):
        assert M.policy_peak_bytes(spec, 2, 4096, kept, "bf16") == M.predict(spec, M.Workload(2, 4096, gc=gc)).peak_bytes
    mid = M.policy_peak_bytes(spec, 2, 4096, (full + residue) / 2, "bf16")
    assert M.policy_peak_bytes(spec, 2, 4096, residue, "bf16") < mid < M.policy_peak_bytes(spec, 2, 4096, full, "bf16")
    # Llama-3's 128k vocabulary: the logits and the fp32 loss set the checkpointed peak; chunks lower it
    assert M.policy_peak_bytes(spec, 8, 4096, residue, "bf16", loss_chunks=8) < \
        M.policy_peak_bytes(spec, 8, 4096, residue, "bf16")
    room = 139 * M.GiB
    assert M.policy_max_batch(spec, room, 4096, residue, "bf16") == M.max_batch(spec, room, 4096, gc=True)


# -- the probe, end to end ------------------------------------------------------------------------

def _probe_run(out, rank=None, **settings):
    from gcdoctor.config import RunConfig
    from gcdoctor.probes import PROBES
    from gcdoctor.run.session import Session
    probe = next(p for p in PROBES if p.name == "policies")
    cfg = RunConfig(device="cpu", model="tiny-llama", layers=2, probes=["policies"], seq_len=SEQ, measure_steps=1,
                    warmup_steps=1, out=str(out), telemetry_hz=5.0, profile=False, **settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    probe._rank_fn = rank
    try:
        session = Session(cfg)
        session.run()
    finally:
        probe._rank_fn = None
        torch.set_num_threads(threads)
    return session


def test_the_probe_measures_the_policies_and_confirms_the_next_recipe_when_one_is_off(tmp_path):
    from gcdoctor.facts import Facts
    from gcdoctor.facts.policies import RecipeChoice
    from gcdoctor.recipe import rank_recipes

    def rank(facts, *, seq_len):
        real = rank_recipes(facts, seq_len=seq_len)
        assert real, "nothing measured fits"
        best = real[0]
        # a ranking whose first recipe is predicted 10x too fast: its confirmation must be rejected
        bogus = RecipeChoice(setting=best.setting, micro_batch=best.micro_batch, accumulation=1, target="test",
                             predicted_tokens_per_s=10 * best.predicted_tokens_per_s)
        second = RecipeChoice(setting=best.setting, micro_batch=best.micro_batch, accumulation=2, target="test",
                              predicted_tokens_per_s=best.predicted_tokens_per_s)
        return [bogus, second]

    session = _probe_run(tmp_path / "run", rank=rank)
    pol = Facts.load(tmp_path / "run" / "facts.json").policies
    assert pol is not None and pol.search_seconds is not None and pol.confirm_seconds is not None
    names = [c.setting.policy for c in pol.candidates]
    assert names == ["none", "selective-op", "attn-only", "mlp-only", "every-2", "layer", "cpu-offload"]
    assert any("compiler's activation memory budget was not searched" in n for n in pol.notes)
    for c in pol.candidates:
        assert c.check is not None and c.check.ok is True, (c.setting.policy, c.check)
        assert c.setting.optimizer == "adamw-fused" and c.setting.allocator == "default"
        assert c.predicted_largest_batch == 1  # no memory wall on the CPU: --probe-batch
        # each candidate is either measured on the full model or dropped, saying why
        assert (c.measurement is not None) != (c.dropped is not None), c
    measured = [c for c in pol.candidates if c.measurement is not None]
    assert measured and all(c.measurement.fits and c.largest_batch == 1 for c in measured)
    first, second = pol.confirmations
    for c in (first, second):  # 5 %, or the spread of the steps compared where larger
        assert len(c.step_ms) == 3 and c.tolerance_pct >= 5.0
        assert c.tolerance_pct >= round(spread_pct(sorted(c.step_ms)[:-1]), 1)  # the slowest step left out
    assert first.fits is True and abs(first.off_pct) > first.tolerance_pct
    assert re.search(r"more than (5 %|[\d.]+ %, the steps' own spread) off\)$", first.rejected), first.rejected
    assert second.fits is True and second.tokens_per_s > 0 and second.choice.accumulation == 2
    if abs(second.off_pct) <= second.tolerance_pct:
        assert second.rejected is None and pol.confirmed() is second
    else:
        assert "more than" in second.rejected and pol.confirmed() is None
    # the fresh process ran the recipe's own setting
    work = (tmp_path / "run" / "policies" / "confirm-1" / "work.json").read_text()
    assert '"accumulation": 2' in work and '"optimizer": "adamw-fused"' in work
    assert session.facts.unavailable.get("policies") is None


def test_the_probe_uses_the_memory_wall_and_the_chunked_loss_under_a_limit(tmp_path):
    from gcdoctor.facts import Facts
    spec = models.load_spec("tiny-llama", layers=2)
    # room for a few sequences with checkpointing, the logits and loss being a large share
    limit = M.policy_peak_bytes(spec, 6, SEQ, M.checkpoint_residue_bytes_per_token(spec, "fp32"), "fp32",
                                "adamw-fused", "cpu")
    _probe_run(tmp_path / "run", rank=lambda facts, *, seq_len: [], memory_limit_bytes=limit)
    pol = Facts.load(tmp_path / "run" / "facts.json").policies
    by = {c.setting.policy: c for c in pol.candidates}
    assert by["layer"].predicted_largest_batch == 6  # the limit is its predicted peak at 6: exact there
    assert by["layer"].setting.chunked_loss is False
    assert by["mlp-only"].setting.chunked_loss is True  # it raises the boundary where the logits weigh more
    for c in pol.candidates:
        assert 1 <= c.predicted_largest_batch <= 16
        if c.measurement is not None and c.measurement.fits:
            assert c.measurement.peak_allocated_bytes <= limit
        elif c.measurement is not None:
            assert c.dropped.startswith("ran out of memory at batch")
    assert pol.confirmations == [] and any("no recipe to confirm" in n for n in pol.notes)


def test_a_lone_slow_step_does_not_widen_the_confirmations_tolerance():
    from gcdoctor.probes.policies import _noise_pct
    # the fresh process of a loaded host: one step 3.4x the others (recorded in a test run)
    assert _noise_pct([151.48, 39.59, 44.85]) == pytest.approx(100 * (44.85 - 39.59) / 44.85)
    assert _noise_pct([24.3, 23.6]) == 0.0 and _noise_pct([]) == 0.0
