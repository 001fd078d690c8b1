"""GC007 from the policy search (facts.policies) and the bottom line around it, on recorded facts: the
H200 full run (the recipe is not the largest batch), the half model on a 48 GB budget (checkpointing,
fused AdamW and expandable segments composed into one setting), nothing fitting, and ten rows competing
with the recipe."""
from __future__ import annotations

import copy
from pathlib import Path

from gcdoctor.engine import evaluate, evaluate_rule
from gcdoctor.types import CONFIGURATION, EXPERIMENT, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.policies import PolicyCandidate, PolicyFacts, PolicySetting, RecipeConfirmation
from gcdoctor.facts.sweep import Measurement
from gcdoctor.recipe import rank_recipes
from gcdoctor.report.bottom_line import bottom_line, bottom_line_for, bottom_line_text
from gcdoctor.rules.prescription import PrescriptionRule

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
GIB = 2**30
SEQ = 4096
_W3: Facts | None = None


def w3() -> Facts:
    """The H200 full default run (wave 3): every default probe, allocator and optimizer."""
    global _W3
    if _W3 is None:
        _W3 = Facts.load(SAMPLES / "h200-llama3-8b-diagnose-w3" / "facts.json")
    return copy.deepcopy(_W3)


def cand(policy, batch, tok_s, peak_gib, allocator="default", optimizer="adamw", fits=True):
    m = Measurement(probe="policies", variant=policy, batch_size=batch, seq_len=SEQ, fits=fits,
                    tokens_per_s=tok_s if fits else None, step_ms_median=1000.0 * batch * SEQ / tok_s if fits else None,
                    peak_allocated_bytes=int(peak_gib * GIB) if fits else None)
    return PolicyCandidate(setting=PolicySetting(policy, allocator, optimizer),
                           largest_batch=batch if fits else None, measurement=m)


def h200_policies() -> PolicyFacts:
    """The H200 full run's numbers: no checkpointing at batch 3 with expandable segments 9,688 tok/s,
    layer checkpointing at 13 (expandable) 8,386 tok/s; the default allocator's 2 and 11 beside them."""
    return PolicyFacts(candidates=[
        cand("none", 3, 9688.0, 131.0, "expandable"), cand("none", 2, 9415.0, 106.0),
        cand("layer", 13, 8386.0, 132.0, "expandable"), cand("layer", 11, 8261.0, 122.0)])


def gc007(facts: Facts) -> Verdict:
    [v] = evaluate_rule(PrescriptionRule(), facts)
    return v


def test_h200_full_run_the_recipe_is_not_the_largest_batch_and_says_it_is_unconfirmed():
    facts = w3()
    facts.policies = h200_policies()
    v = gc007(facts)
    assert (v.status, v.severity, v.topic) == ("fired", "info", "prescription")
    assert v.headline == "Use no checkpointing, batch 3, expandable segments: 9,688 tokens/s (predicted, unconfirmed)"
    assert v.line == ("no checkpointing, batch 3, expandable segments: 9,688 tok/s, peak 131.0 GiB predicted, "
                      "unconfirmed; +16 % over every layer checkpointed at batch 13 (the largest batch)")
    assert "assumes gradient accumulation reaches your global batch" in v.explanation
    assert "It is unconfirmed: no fresh process ran the whole setting" in v.explanation
    assert v.recommendation.startswith("Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the job's "
                                       "environment before the device initialises; turn checkpointing off; "
                                       "train at per-device batch 3.")
    assert v.folds == ["GC009"]
    rows = bottom_line_for(facts, evaluate(facts))
    assert [r.render() for r in rows[1:4]] == [
        "  try  no checkpointing, batch 3, expandable segments: 9,688 tok/s, peak 131.0",
        "       GiB predicted, unconfirmed; +16 % over every layer checkpointed at batch",
        "       13 (the largest batch)"]


def test_h200_confirmed_beside_predicted_and_the_rejected_candidate_said():
    facts = w3()
    pf = facts.policies = h200_policies()
    first, second = rank_recipes(pf, seq_len=SEQ)[:2]
    pf.confirmations = [
        RecipeConfirmation(choice=first, fits=True, tokens_per_s=9100.0, off_pct=-6.1,
                           rejected="9,100 tok/s, 6.1 % below the prediction (more than 5 %)"),
        RecipeConfirmation(choice=second, fits=True, tokens_per_s=9420.0, peak_allocated_bytes=int(106.2 * GIB),
                           off_pct=0.05)]
    v = gc007(facts)
    assert v.line == ("no checkpointing, batch 2: 9,420 tok/s, peak 106.2 GiB confirmed (predicted 9,415, "
                      "106.0 GiB); +12 % over every layer checkpointed at batch 13 (the largest batch)")
    assert ("No checkpointing, batch 3, expandable segments was confirmed first and rejected: 9,100 tok/s, "
            "6.1 % below the prediction (more than 5 %).") in v.explanation
    assert v.folds == []  # the default allocator: GC009's rows stay
    assert v.mark == "use"  # confirmed in a fresh process: the bottom line says "use", not "try"
    assert bottom_line_for(facts, evaluate(facts))[1].render().startswith("  use  no checkpointing, batch 2:")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["confirmation 1"].endswith(": rejected (9,100 tok/s, 6.1 % below the prediction (more than 5 %))")
    assert ev["confirmation 2"] == "no checkpointing, batch 2: 9,420 tok/s, peak 106.2 GiB, +0.1% against predicted"


def test_a_confirmation_inside_the_steps_own_spread_says_so():
    facts = w3()
    pf = facts.policies = h200_policies()
    first = rank_recipes(pf, seq_len=SEQ)[0]
    pf.confirmations = [
        RecipeConfirmation(choice=first, fits=True, tokens_per_s=1.12 * first.predicted_tokens_per_s,
                           peak_allocated_bytes=int(131.2 * GIB), step_ms=[100.0, 105.0, 115.0], off_pct=12.0,
                           tolerance_pct=15.0)]
    v = gc007(facts)
    assert v.line.startswith(f"no checkpointing, batch 3, expandable segments: "
                             f"{1.12 * first.predicted_tokens_per_s:,.0f} tok/s, peak 131.2 GiB confirmed within "
                             f"the steps' 15 % spread (predicted {first.predicted_tokens_per_s:,.0f}, ")


def test_a_target_batch_only_the_largest_fits_goes_to_layer_checkpointing():
    facts = w3()
    facts.policies = h200_policies()
    facts.policies.target_batch = 13
    v = gc007(facts)
    assert v.line == ("every layer checkpointed, batch 13, expandable segments: 8,386 tok/s, peak 132.0 GiB "
                      "predicted, unconfirmed")
    assert "The target is target batch 13." in v.explanation


def test_a_target_batch_nothing_fits_accumulates_to_it():
    facts = w3()
    facts.policies = h200_policies()
    facts.policies.target_batch = 26
    v = gc007(facts)
    assert (v.status, v.severity) == ("fired", "warning")
    # 26 sequences per step: 2 x 13 without checkpointing beats 13 x 2 with it
    assert v.line == ("no measured setting fits batch 26 per device: the largest is 13 (every layer "
                      "checkpointed); micro-batch 2 x 13 accumulation reaches it at 9,415 tok/s")


def half_model_48gb() -> Facts:
    """Half of Llama-3-8B on a 48 GB budget: no checkpointing does not fit batch 1; layer checkpointing
    peaks at 42.3 GiB, 34.0 with fused AdamW, and expandable segments fit batch 2 with it."""
    facts = w3()
    facts.model.n_layers = 16
    facts.settings.memory_limit_bytes = 48 * 10**9
    facts.policies = PolicyFacts(candidates=[
        cand("none", 1, 1.0, 0.0, fits=False),
        cand("layer", 1, 8100.0, 42.3),
        cand("layer", 1, 8350.0, 34.0, optimizer="adamw-fused"),
        cand("layer", 2, 8900.0, 43.9, "expandable", "adamw-fused"),
        cand("every-2", 1, 8600.0, 43.8, "expandable", "adamw-fused")])
    return facts


def test_half_model_on_48gb_composes_one_setting_and_folds_its_parts():
    facts = half_model_48gb()
    v = gc007(facts)
    assert v.line == ("every layer checkpointed, batch 2, fused AdamW, expandable segments: 8,900 tok/s, "
                      "peak 43.9 GiB predicted, unconfirmed; +3 % over every 2nd layer checkpointed at batch 1")
    assert v.folds == ["GC008", "GC009"]
    assert v.recommendation.startswith(
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the job's environment before the device "
        "initialises; checkpoint every decoder layer (use_reentrant=False); build the optimizer as "
        "torch.optim.AdamW(..., fused=True); train at per-device batch 2.")
    verdicts = evaluate(facts)
    assert any(x.code == "GC008" and x.status == "fired" for x in verdicts)  # the fused-AdamW finding exists...
    rows = bottom_line_for(facts, verdicts)
    assert rows[1].mark == "try" and rows[1].key == ("GC007", "")  # "try": not yet confirmed
    assert not any(r.key and r.key[0] in ("GC008", "GC009") for r in rows)  # ...and is not repeated


def test_nothing_fits_batch_1_names_the_smallest_change_from_the_memory_model():
    facts = Facts.load(SAMPLES / "h200-memory-w3" / "limit48" / "facts.json")
    facts.policies = PolicyFacts(candidates=[cand("none", 1, 1.0, 0.0, fits=False),
                                             cand("layer", 1, 1.0, 0.0, fits=False)])
    v = gc007(facts)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.line == ("nothing fits batch 1; smallest change: optimizer states and step on the host (DeepSpeed "
                      "ZeRO-Offload), batch 3 with checkpointing (memory model)")
    assert v.explanation.endswith("Also: LoRA rank 16 on every linear layer, base weights frozen: batch 4; "
                                  "Adafactor (factored second moment, no first moment): batch 4.")


def test_recorded_runs_without_policy_facts_keep_the_sweep_prescription():
    v = gc007(w3())
    assert v.line == ("layer checkpointing at batch 11: 8,261 tok/s; no checkpointing at batch 2: 9,346 tok/s "
                      "(+13 %), faster if accumulation reaches your global batch")  # as before the policy search


def test_the_recipe_survives_ten_competing_rows():
    recipe = Verdict("GC007", "prescription", "fired", "info", "Use it", topic="prescription",
                     line="every 2nd layer checkpointed, micro-batch 6 x 2 accumulation, fused AdamW, expandable "
                          "segments: 9,900 tok/s confirmed (predicted 9,800); +18 % over every layer at batch 11",
                     folds=["GC008", "GC009"])
    config = [Verdict(f"GC1{i:02d}", "x", "fired", "warning", f"h{i}", subject=f"s{i}", scope=CONFIGURATION,
                      line=f"configuration finding {i}") for i in range(10)]
    folded = [Verdict("GC008", "opt", "fired", "info", "fused", line="AdamW(fused=True): peak -20 %"),
              Verdict("GC009", "alloc", "fired", "info", "exp", line="expandable segments fit 13")]
    dev = [Verdict(f"GC2{i:02d}", "d", "fired", "warning", f"d{i}", subject=f"d{i}", scope=EXPERIMENT,
                   line=f"device finding {i}", topic="granularity") for i in range(3)]
    rows = bottom_line(config + folded + dev + [recipe], "llama3-8b on NVIDIA H200")
    assert [r.render() for r in rows] == [
        "Bottom line: llama3-8b on NVIDIA H200",
        "  use  every 2nd layer checkpointed, micro-batch 6 x 2 accumulation, fused",
        "       AdamW, expandable segments: 9,900 tok/s confirmed (predicted 9,800);",
        "       +18 % over every layer at batch 11",
        "  warn configuration finding 0",
        "  warn configuration finding 1",
        "  warn configuration finding 2",
        "  warn configuration finding 3",
        "  warn configuration finding 4",
        "  warn configuration finding 5",
        "  ...  4 more configuration findings and 3 more experiment findings (granularity",
        "       3) below",
    ]


def test_every_front_end_shows_the_recipe_first():
    facts = half_model_48gb()
    verdicts = evaluate(facts)
    first = "  try  every layer checkpointed, batch 2, fused AdamW, expandable segments:"
    assert bottom_line_text(facts, verdicts).splitlines()[1] == first
    from gcdoctor.report.console import summary
    assert summary(facts, verdicts, width=80).splitlines()[1] == first
    from gcdoctor.report.markdown import render_markdown
    block = render_markdown(facts, verdicts).split("## Bottom line", 1)[1]
    assert block.split("\n")[4] == first
    from gcdoctor.report.html import render_html
    html = render_html(facts, verdicts)
    pre = html.split('id="bottom-line-text">', 1)[1].split("</pre>", 1)[0]
    assert pre.splitlines()[1] == first
    # the TUI's verdict panel: the verdicts arrive as events (dicts), folds included
    from gcdoctor.run.events import VerdictIssued
    from gcdoctor.tui.state import DashboardState
    st = DashboardState()
    for v in verdicts:
        st.apply(VerdictIssued(v.to_dict()))
    rows = st.bottom_line(80)
    assert rows[1].render() == first
    assert not any(r.key and r.key[0] in ("GC008", "GC009") for r in rows)


def confirmed_h200() -> Facts:
    facts = w3()
    pf = facts.policies = h200_policies()
    first, second = rank_recipes(pf, seq_len=SEQ)[:2]
    pf.confirmations = [RecipeConfirmation(choice=first, fits=False, rejected="out of memory at the first step"),
                        RecipeConfirmation(choice=second, fits=True, tokens_per_s=9420.0,
                                           peak_allocated_bytes=int(106.2 * GIB), off_pct=0.05)]
    return facts


def test_report_md_has_the_recipe_section_and_html_the_pareto_plot():
    facts = confirmed_h200()
    verdicts = evaluate(facts)
    from gcdoctor.report.markdown import render_markdown
    md = render_markdown(facts, verdicts)
    sec = md.split("## The recipe: checkpointing policies at the full model", 1)[1].split("\n## ", 1)[0]
    assert "| recipe | no checkpointing, batch 2 |" in sec
    assert "| confirmed in a fresh process | 9,420 tok/s |" in sec
    assert "| no checkpointing | expandable segments | 3 | 9,688 | 131.00 GiB |" in sec
    assert ("| no checkpointing, batch 3, expandable segments | 9,688 | — | — | 131.00 GiB | — | rejected: out of "
            "memory at the first step |") in sec
    from gcdoctor.report.html import render_html
    html = render_html(facts, verdicts)
    i = html.index("<title>Peak memory against throughput, every measured setting</title>")
    svg = html[html.rindex("<svg", 0, i):html.index("</svg>", i)]
    assert svg.count("<circle") == 5  # four measured settings and the recipe's mark
    assert ">recipe, confirmed 9,420 tok/s</text>" in svg
    assert "dominated or dropped" in svg and ">layer b13 exp</text>" in svg


def test_an_unconfirmed_recipe_is_marked_so_on_the_plot():
    from gcdoctor.report.sections.policies import pareto_plot
    facts = w3()
    facts.policies = h200_policies()
    assert ">recipe (unconfirmed)</text>" in pareto_plot(facts)


def test_when_every_setting_was_tried_the_one_that_ran_stands_not_confirmed():
    facts = w3()
    pf = facts.policies = h200_policies()
    pf.candidates = pf.candidates[:1]  # the search left one setting
    [only] = rank_recipes(pf, seq_len=SEQ)
    pf.confirmations = [RecipeConfirmation(choice=only, fits=True, tokens_per_s=15990.0, off_pct=65.1,
                                           rejected="15,990 tokens/s confirmed against 9,688 predicted (+65.1 %, "
                                                    "more than 5 % off)")]
    v = gc007(facts)
    assert v.line == ("no checkpointing, batch 3, expandable segments: 15,990 tok/s in a fresh process, +65 % off "
                      "the predicted 9,688: not confirmed")
    assert v.headline.endswith("(not confirmed: off the prediction)")
    assert "did not confirm it: 15,990 tokens/s confirmed against 9,688 predicted" in v.explanation
    assert "was confirmed first and rejected" not in v.explanation


def test_when_every_setting_ran_out_of_memory_in_a_fresh_process_there_is_no_recipe():
    facts = w3()
    pf = facts.policies = h200_policies()
    pf.confirmations = [RecipeConfirmation(choice=c, fits=False, rejected="out of memory at the first step")
                        for c in rank_recipes(pf, seq_len=SEQ)]
    v = gc007(facts)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.line == ("no recipe: every setting measured to fit ran out of memory in a fresh process (first: "
                      "no checkpointing, batch 3, expandable segments)")
