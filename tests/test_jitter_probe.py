"""The jitter probe, run for real on the CPU with a micro Llama, judged by GC030."""
from __future__ import annotations

import torch

from gcdoctor.config import RunConfig
from gcdoctor.facts import Facts
from gcdoctor.probes.jitter import JitterProbe
from gcdoctor.rules.loss_jitter import LossJitterRule, classify
from gcdoctor.run.session import Session

RULE = LossJitterRule()


def run_jitter(micro_llama, out, probe: JitterProbe | None = None, **kw) -> Session:
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["jitter"], seq_len=32, profile=False,
                    out=str(out), telemetry_hz=5.0, **kw)
    session = Session(cfg)
    if probe is not None:
        session.probes = [probe]
    session.run()
    return session


def kind(facts: Facts, name: str) -> str:
    j = facts.jitter
    c = j.comparison(name)
    return classify(c, j.comparison(c.baseline), j.run(c.reference).losses, j.unit_roundoff, RULE.defaults).kind


def test_default_cpu_run_is_identical_and_catches_the_lost_rng_state(micro_llama, tmp_path):
    s = run_jitter(micro_llama, tmp_path / "r", JitterProbe(steps=3))
    j = s.facts.jitter
    assert [r.name for r in j.runs] == ["no_gc_a", "no_gc_b", "gc", "no_gc_dropout", "no_gc_dropout_b",
                                        "gc_dropout_rng_preserved", "gc_dropout_no_rng"]
    assert all(len(r.losses) == 3 and r.error is None for r in j.runs)
    assert j.run("gc").losses == j.run("no_gc_a").losses  # bitwise, every step
    assert j.run("no_gc_dropout").losses != j.run("no_gc_a").losses  # dropout is really on
    assert j.comparison("gc").grads_bitwise_equal is True
    assert "use_reentrant=False" in j.gc_api and j.unit_roundoff == 2.0**-24
    # the redrawn mask leaves the first forward alone and changes the gradients and what follows
    control = j.comparison("gc_dropout_no_rng")
    assert control.loss_step0_equal is True and control.grads_bitwise_equal is False
    assert control.first_loss_diff_step == 1
    verdicts = {v.subject: v for v in s.verdicts if v.code == "GC030"}
    assert verdicts["checkpointing on vs off"].status == "passed"
    assert verdicts["attention dropout 0.1, preserve_rng_state=True"].status == "passed"
    assert (verdicts["attention dropout 0.1, preserve_rng_state=False (control)"].severity) == "info"
    assert kind(s.facts, "gc") == "identical" and kind(s.facts, "gc_dropout_no_rng") == "systematic"
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## Loss jitter from recomputation" in report
    assert "| gc | main | gc vs no_gc_a | yes | yes |" in report  # the comparison row: bitwise identical
    assert Facts.load(tmp_path / "r" / "facts.json").jitter == j


def test_deterministic_runs_restore_the_global_setting(micro_llama, tmp_path):
    assert not torch.are_deterministic_algorithms_enabled()
    s = run_jitter(micro_llama, tmp_path / "r", JitterProbe(steps=2, dropout=False, deterministic=True))
    j = s.facts.jitter
    assert [r.name for r in j.runs] == ["no_gc_a", "no_gc_b", "gc", "no_gc_det", "gc_det"]
    assert [r.deterministic for r in j.runs] == [False, False, False, True, True]
    assert j.comparison("gc_det").grads_bitwise_equal is True
    assert not torch.are_deterministic_algorithms_enabled()


def test_micro_batched_checkpointing_is_a_benign_rounding_difference(micro_llama, tmp_path):
    # bf16, batch 2 as two accumulated micro-batches in the checkpointed run: the same gradient
    # summed in another order. Real rounding, not bitwise equal, and judged benign.
    probe = JitterProbe(steps=3, dropout=False, gc_micro_batches=2)
    s = run_jitter(micro_llama, tmp_path / "r", probe, dtype="bf16", probe_batch=2)
    j = s.facts.jitter
    gc = j.comparison("gc")
    assert j.run("gc").micro_batches == 2 and j.run("no_gc_a").micro_batches == 1
    assert gc.grads_bitwise_equal is False and gc.grad_rel_l2 > 0
    assert j.comparison("no_gc_b").grads_bitwise_equal is True
    assert kind(s.facts, "gc") in ("within_noise", "training_dynamics")
    (v,) = [v for v in s.verdicts if v.code == "GC030"]
    assert (v.status, v.subject) == ("passed", "checkpointing on vs off")
