"""Words and units a person reads: sizes in the unit that reads best (one shared formatter), a speed-up
said as "saves", no card size said twice, no nested parentheses, no repository path quoted to users
of the wheel, a short repr of a loaded run, `--help` within 80 columns and `rules` in code order."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate
from gcdoctor.types import Evidence
from gcdoctor.facts import Facts
from gcdoctor.units import cost_words, fmt_bytes

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


def test_sizes_use_the_unit_that_reads_best():
    assert fmt_bytes(105.96 * 2**30) == "105.96 GiB"
    assert fmt_bytes(0.0783 * 2**30) == "80.2 MiB"
    assert fmt_bytes(3.73e-09 * 2**30) == "4 B"
    assert fmt_bytes(12 * 1024) == "12.0 KiB"
    assert fmt_bytes(59.8 * 2**30, gib_digits=1) == "59.8 GiB"
    assert Evidence("activation memory with GC", 0.0783, "GiB").text() == "activation memory with GC: 80.2 MiB"
    assert Evidence("model states", 59.8, "GiB").text() == "model states: 59.8 GiB"


def test_a_speed_up_is_said_as_saves():
    assert cost_words(-8.2) == "saves 8 %" and cost_words(23.0) == "costs +23 %"
    assert cost_words(11.0, "", sign=False) == "costs 11%" and cost_words(-0.3) == "costs -0 %".replace("-", "+")


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_no_verdict_says_costs_minus_or_a_small_size_in_gib(run):
    facts = Facts.load(run / "facts.json")
    for v in evaluate(facts):
        texts = [v.headline, v.line or "", v.recommendation or ""] + [e.text() for e in v.evidence]
        for t in texts:
            assert not re.search(r"costs -\d", t), t
            assert not re.search(r"\b0\.\d+ GiB|e-\d+ GiB", t), t
            assert "samples/" not in t, t


def test_plan_does_not_say_the_card_size_twice(capsys):
    assert main(["plan", "--model", "llama3-8b", "--device-memory", "48GiB"]) == 0
    out = capsys.readouterr().out
    assert "card 48 GiB;" in out and "48.0 GiB" not in out and "samples/" not in out
    assert main(["plan", "--model", "llama3-8b", "--device-memory", "48GB"]) == 0
    assert "card 48 GB = 44.7 GiB;" in capsys.readouterr().out


def test_gc026_on_a_cpu_trace_has_no_nested_parentheses(tmp_path, capsys):
    assert main(["analyze", str(SAMPLES / "traces" / "cpu-tiny-llama.json.gz"), "--out", str(tmp_path / "r"),
                 "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    gc026 = next(v for v in data["verdicts"] if v["code"] == "GC026")
    depth, deepest = 0, 0
    for ch in gc026["headline"]:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    assert deepest <= 1, gc026["headline"]


def test_repr_of_a_loaded_run_is_a_short_summary():
    pytest.importorskip("pandas")
    import gcdoctor
    r = repr(gcdoctor.load(SAMPLES / "h200-llama3-8b-diagnose-w3"))
    assert len(r) < 200 and r.startswith("<gcdoctor.Run ") and "llama3-8b on NVIDIA H200" in r


@pytest.mark.parametrize("argv", [[]] + [[c] for c in ("diagnose", "analyze", "plan", "watch", "monitor",
                                                       "compare", "rules", "explain", "models")], ids=str)
def test_help_fits_80_columns(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 80


def test_rules_are_listed_by_code(capsys):
    assert main(["rules"]) == 0
    codes = re.findall(r"^(GC\d+) ", capsys.readouterr().out, re.M)
    assert codes == sorted(codes) and len(codes) > 20


@pytest.mark.parametrize("gc", [True, False])
def test_the_trainer_example_sets_checkpointing_without_deprecation_warnings(gc, tmp_path):
    import importlib.util
    import warnings
    transformers = pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("train_with_trainer",
                                                  SAMPLES / "watch" / "train_with_trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        targs = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[],
                                               **mod.checkpointing_args(transformers.TrainingArguments, gc, False))
    assert [str(w.message) for w in caught if "checkpointing" in str(w.message)] == []
    assert bool(getattr(targs, "activation_checkpointing", None) or targs.gradient_checkpointing) is gc
