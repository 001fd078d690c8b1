"""The recipe's choice on recorded numbers (gcdoctor.recipe, torch-free)."""
from __future__ import annotations

from gcdoctor.facts.policies import PolicyCandidate, PolicyCheck, PolicyFacts, PolicySetting
from gcdoctor.facts.sweep import Measurement
from gcdoctor.recipe import ASSUMED, LARGEST, largest_batch_recipe, pareto, rank_recipes

GIB = 2**30
SEQ = 4096


def cand(policy, batch, tok_s, peak_gib, allocator="default", optimizer="adamw", opt_ms=None, **kw):
    step_ms = 1000.0 * batch * SEQ / tok_s
    m = Measurement(probe="policies", variant=policy, batch_size=batch, seq_len=SEQ, tokens_per_s=tok_s,
                    step_ms_median=step_ms, optimizer_ms_median=opt_ms, peak_allocated_bytes=int(peak_gib * GIB))
    return PolicyCandidate(setting=PolicySetting(policy, allocator, optimizer), largest_batch=batch,
                           measurement=m, **kw)


def h200() -> PolicyFacts:
    """The H200 full run: no checkpointing at batch 3 (expandable segments) against layer at 13."""
    return PolicyFacts(candidates=[
        cand("none", 3, 9688.0, 131.0, "expandable", opt_ms=105.0),
        cand("none", 2, 9415.0, 106.0, opt_ms=105.0),
        cand("layer", 13, 8386.0, 132.0, "expandable", opt_ms=105.0),
        cand("layer", 11, 8261.0, 122.0, opt_ms=105.0),
    ])


def test_h200_recipe_is_not_the_largest_batch():
    ranked = rank_recipes(h200(), seq_len=SEQ)
    top = ranked[0]
    assert (top.setting.key, top.micro_batch, top.accumulation) == ("none/expandable/adamw", 3, 1)
    assert top.predicted_tokens_per_s == 9688.0 and top.target == ASSUMED
    assert [c.setting.key for c in ranked] == ["none/expandable/adamw", "none/default/adamw",
                                               "layer/expandable/adamw", "layer/default/adamw"]
    alt = largest_batch_recipe(h200(), seq_len=SEQ)
    assert (alt.setting.key, alt.micro_batch, alt.target) == ("layer/expandable/adamw", 13, LARGEST)


def test_target_batch_needs_a_point_at_that_batch():
    ranked = rank_recipes(h200(), seq_len=SEQ, target_batch=13)
    assert [(c.setting.key, c.micro_batch, c.accumulation) for c in ranked] == [("layer/expandable/adamw", 13, 1)]
    assert rank_recipes(h200(), seq_len=SEQ, target_batch=20) == []


def test_global_batch_accumulates_each_policy_at_its_micro_batch():
    # 12 sequences: none at 2 x 6 or 3 x 4, the optimizer stepping once per 12; layer's 13 and 11 do not
    # divide 12. Six micro-steps of 2 amortise the 105 ms optimizer step more than four of 3.
    ranked = rank_recipes(h200(), seq_len=SEQ, global_batch=12)
    assert [(c.setting.key, c.micro_batch, c.accumulation) for c in ranked] == [
        ("none/default/adamw", 2, 6), ("none/expandable/adamw", 3, 4)]
    def expect(batch, tok_s, accumulation):
        step = 1000.0 * batch * SEQ / tok_s
        return 1000.0 * 12 * SEQ / (accumulation * (step - 105.0) + 105.0)
    assert abs(ranked[0].predicted_tokens_per_s - expect(2, 9415.0, 6)) < 1e-6
    assert abs(ranked[1].predicted_tokens_per_s - expect(3, 9688.0, 4)) < 1e-6
    assert round(ranked[0].predicted_tokens_per_s) == 10468 and round(ranked[1].predicted_tokens_per_s) == 10329
    assert ranked[0].target == "global batch 12"
    assert [c.micro_batch for c in rank_recipes(h200(), seq_len=SEQ, global_batch=26, devices=2)] == [13]
    assert rank_recipes(h200(), seq_len=SEQ, global_batch=7, devices=2) == []


def test_dominated_never_wins_and_failed_checks_never_count():
    pf = PolicyFacts(candidates=[
        cand("layer", 8, 5000.0, 40.0),
        cand("every-2", 6, 5000.0, 44.0),  # as fast, more memory: dominated
        cand("selective-op", 8, 9000.0, 30.0, check=PolicyCheck(ok=False, note="recomputed nothing")),
        cand("attn-only", 8, 6000.0, 45.0, dropped="dominated by layer"),
    ])
    assert [c.setting.policy for c in rank_recipes(pf, seq_len=SEQ)] == ["layer", "every-2"]
    assert [p.key for p in pareto(pf)] == ["layer/default/adamw"]


def test_within_resolution_the_smaller_peak_wins():
    pf = PolicyFacts(candidates=[cand("none", 4, 5100.0, 60.0), cand("layer", 4, 5000.0, 30.0)])
    assert rank_recipes(pf, seq_len=SEQ)[0].setting.policy == "none"
    assert rank_recipes(pf, seq_len=SEQ, within_pct=3.0)[0].setting.policy == "layer"
