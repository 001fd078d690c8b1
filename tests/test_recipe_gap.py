"""GC013: a watched job against a diagnose run's recipe (`analyze --against`, `watch --against`), on
recorded runs."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.facts.against import AgainstFacts
from gcdoctor.facts.policies import PolicySetting, RecipeChoice, RecipeConfirmation
from gcdoctor.recipe_code import against_facts
from gcdoctor.rules.recipe_gap import RecipeGapRule

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
WATCHED = SAMPLES / "watch" / "h200-w3" / "trainer-gc"  # 4 layers of Llama-3-8B, batch 2, seq 2048, layer GC
DIAGNOSED = SAMPLES / "h200-llama3-8b-4layers-sweep"  # the same 4 layers, seq 4096, sweep only


def judge(facts: Facts):
    [v] = evaluate_rule(RecipeGapRule(), facts)
    return v


def watched() -> Facts:
    return Facts.load(WATCHED / "facts.json")


def test_analyze_against_says_how_far_the_job_is_in_tokens_and_settings(tmp_path, capsys):
    assert main(["analyze", str(WATCHED), "--against", str(DIAGNOSED), "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:3] == [
        "  use  your job: 40,898 tok/s, recipe 53,176 predicted at seq 4096 (+30 %);",
        "       change every layer checkpointed -> no checkpointing; batch 2 -> 4"]
    saved = Facts.load(tmp_path / "o" / "facts.json")
    assert saved.against.recipe.setting.policy == "none" and saved.against.source.startswith("batch sweep")
    v = judge(saved)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == ("Your job is 30% below the recipe's tokens/s: every layer checkpointed -> no "
                          "checkpointing; batch 2 -> 4")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["optimizer, job / recipe"] == "adamw / adamw"
    assert ev["note"] == "the job runs sequences of 2048, the recipe 4096"


def recipe_with(policy="layer", micro=2, allocator="expandable", optimizer="adamw-fused") -> AgainstFacts:
    choice = RecipeChoice(PolicySetting(policy, allocator, optimizer), micro, 1, "t", 42000.0)
    return AgainstFacts(run_dir="d", source="policy search", n_params=1923125248, device_name="NVIDIA H200",
                        seq_len=2048, recipe=choice,
                        confirmation=RecipeConfirmation(choice=choice, fits=True, tokens_per_s=41000.0))


def test_the_allocator_and_the_fused_optimizer_are_read_from_the_job():
    facts = watched()
    facts.against = recipe_with()
    v = judge(facts)
    assert v.line == ("your job: 40,898 tok/s, recipe 41,000 confirmed (+0 %); change fused AdamW; expandable "
                      "segments")
    assert v.severity == "info"
    facts.watch.optimizer_impl = "fused"
    facts.watch.alloc_conf = "garbage_collection_threshold:0.8, expandable_segments:True"
    v = judge(facts)
    assert (v.status, v.line) == ("passed", "your job runs the recipe: 40,898 tok/s, recipe 41,000 confirmed (+0 %)")


def test_on_the_recipe_but_slower_says_the_time_goes_elsewhere():
    facts = watched()
    facts.against = recipe_with(allocator="default", optimizer="adamw")
    facts.against.confirmation.tokens_per_s = 48000.0
    v = judge(facts)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.line == ("your job has the recipe's settings: 40,898 tok/s, recipe 48,000 confirmed (+17 %): the "
                      "time goes elsewhere")


def test_a_different_model_is_not_judged():
    facts = watched()
    facts.against = recipe_with()
    facts.against.n_params = 8_030_261_248
    v = judge(facts)
    assert v.status == "inconclusive"
    assert v.line == ("recipe gap not judged: the job's model has 1,923,125,248 parameters, the diagnosed one "
                      "8,030,261,248: a different model, the recipe does not apply")


@pytest.mark.parametrize("argv, message", [
    (["analyze", str(WATCHED), "--against", "/no/run"],
     "gcdoctor: error: --against /no/run: not a gcdoctor run directory (no facts.json)"),
    (["analyze", str(WATCHED), "--against", str(WATCHED)],
     f"gcdoctor: error: --against {WATCHED}: not a gcdoctor diagnose run (no policy search or batch sweep)"),
    (["analyze", str(DIAGNOSED), "--against", str(DIAGNOSED)],
     f"gcdoctor: error: --against: {DIAGNOSED} is not a watched run (gcdoctor watch, or gcdoctor.watch in a script)"),
    (["watch", "--against", "/no/run", "--", "true"],
     "gcdoctor: error: --against /no/run: not a gcdoctor run directory (no facts.json)"),
])
def test_bad_against_is_one_line_and_exit_2(argv, message, capsys, tmp_path):
    assert main(argv + (["--out", str(tmp_path / "o")] if argv[0] == "analyze" else [])) == 2
    assert capsys.readouterr().err.splitlines() == [message]


def test_watch_against_records_the_recipe_and_rewrites_the_reports(tmp_path, capsys):
    from gcdoctor.watching.autowatch import hold_against
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(WATCHED / "facts.json", run / "facts.json")
    hold_against(run, against_facts(str(DIAGNOSED)))
    assert Facts.load(run / "facts.json").against.recipe.micro_batch == 4
    assert "recipe 53,176 predicted at seq 4096" in (run / "report.md").read_text()
    assert capsys.readouterr().err.startswith("gcdoctor watch: your job: 40,898 tok/s, recipe 53,176")
