"""GC021 host-bound-step: on the recorded CPU run (samples/cpu-tiny-llama-offload) with hand-made
device traces under its variants, and on the hand-made traces analysed bare."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.facts.telemetry import SeriesSummary
from gcdoctor.rules import BY_CODE
from gcdoctor.trace import facts_from_trace

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "cpu-tiny-llama-offload" / "facts.json"
DATA = REPO / "tests" / "data"
RULE = BY_CODE["GC021"]
ZERO2 = "deepspeed-zero2-offload+gc"


def judge(facts: Facts, **overrides: float) -> dict[str, object]:
    verdicts = evaluate(facts, [RULE], overrides={"GC021": overrides} if overrides else None)
    return {v.subject: v for v in verdicts}


def bare(name: str) -> Facts:
    return facts_from_trace(DATA / f"offload-{name}.json")


def tel(**means: float) -> dict[str, SeriesSummary]:
    return {k: SeriesSummary(mean=v, min=v, max=v, n=10) for k, v in means.items()}


BUSY = tel(cpu_pct=97.0, cpu_max_core_pct=100.0, proc_cpu_pct=190.0)  # CPU Adam on every core
IDLE = tel(cpu_pct=20.0, cpu_max_core_pct=40.0, proc_cpu_pct=30.0)
# every variant of the recorded run given a device trace without host wait, ZeRO-Offload one with it
CLEAN = {v: "clean" for v in ("gc", "gc+save_on_cpu-pinned", "gc+save_on_cpu-pageable", "save_on_cpu-pinned",
                              "deepspeed-ckpt-cpu", ZERO2)}


def test_inconclusive_on_the_recorded_cpu_run():
    (v,) = judge(Facts.load(SAMPLE)).values()
    assert v.status == "inconclusive"
    assert v.headline.endswith("CPU run: the traces have no device, so there is no device to starve")


def test_bare_trace_host_optimizer_fires_on_the_trace_alone():
    # the optimizer's host time is inside ops (1940 of 2025 us): the host inside ops, not Python; in 3
    # gaps of 600 us, far longer than launches: host work inside ops (a CPU optimizer), no CUDA-graph advice
    v = judge(bare("hostopt"))["trace"]
    assert (v.status, v.severity) == ("fired", "critical")
    assert v.headline == ("trace: the device waits on host work inside ops 61% of the step, mostly in the "
                          "optimizer step")
    assert "CUDA graph" not in v.recommendation and "CPU optimizer" in v.recommendation
    ev = {e.label: e.value for e in v.evidence}
    assert ev["device idle, dispatch"] == pytest.approx(0.6125)  # ms per steady step
    assert ev["window judged"].startswith("2 steady-state profiler step(s)")


def test_bare_trace_idle_host_is_python_not_dispatch():
    # the host outside any op while the device waits: GC025's (Python between ops), not GC021's
    (v,) = judge(bare("hostwait")).values()
    assert v.status == "passed"
    assert v.headline == "trace: dispatching ops idles the device 2% of the steady-state time"
    (p,) = evaluate(bare("hostwait"), [BY_CODE["GC025"]])
    assert p.status == "fired"
    assert p.headline == "trace: the device waits on Python between ops 61% of the step, mostly in the optimizer step"


@pytest.mark.parametrize("name", ["clean", "pageable", "overlapped"])
def test_bare_trace_without_host_wait_is_silent(name):
    (v,) = judge(bare(name)).values()
    assert v.status == "passed"


def test_fires_on_the_zero_offload_variant_with_a_saturated_cpu(offload_gpu_like):
    verdicts = judge(offload_gpu_like({**CLEAN, ZERO2: "hostopt"}, {ZERO2: BUSY}))
    assert list(verdicts) == [f"offload/{ZERO2}"]
    v = verdicts[f"offload/{ZERO2}"]
    assert v.headline.endswith("host work inside ops 61% of the step, mostly in the optimizer step")
    assert "see GC020" in v.explanation
    ev = {e.label: e.value for e in v.evidence}
    assert ev["process CPU mean (100 = one core)"] == 190.0


def test_telemetry_of_an_idle_cpu_overrides_the_trace(offload_gpu_like):
    (v,) = judge(offload_gpu_like({**CLEAN, ZERO2: "hostopt"}, {ZERO2: IDLE})).values()
    assert v.status == "passed"


def test_silent_when_no_variant_waits_on_the_host(offload_gpu_like):
    (v,) = judge(offload_gpu_like(CLEAN, {ZERO2: BUSY})).values()
    assert v.status == "passed"


def test_threshold_override_silences_it(offload_gpu_like):
    (v,) = judge(offload_gpu_like({**CLEAN, ZERO2: "hostopt"}, {ZERO2: BUSY}), min_share=0.7).values()
    assert v.status == "passed"


def test_granularity_experiments_are_left_to_gc010():
    facts = bare("hostopt")
    facts.trace = {k.replace("all", "granularity/synthetic-small/block", 1) if k == "all" else
                   f"granularity/synthetic-small/block|{k}": v for k, v in facts.trace.items()}
    (v,) = judge(facts).values()
    assert v.status == "inconclusive"
    assert "no profiled training step" in v.headline


# -- the H200 run (samples/h200-llama3-8b-diagnose) ------------------------------------------------

H200 = REPO / "samples" / "h200-llama3-8b-diagnose" / "facts.json"


def test_h200_only_the_cpu_adam_variant_waits_on_the_host():
    # every other profiled step (sweep, offload) leaves host-wait idle under 20%: no verdict for them
    verdicts = judge(Facts.load(H200))
    assert list(verdicts) == [f"offload/{ZERO2}"]
    v = verdicts[f"offload/{ZERO2}"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == f"offload/{ZERO2}: the device waits on a saturated host 72% of the step, mostly in the optimizer step"
    ev = {e.label: e.value for e in v.evidence}
    label = "where the host spent it: optimizer (host time the device did not match, share of the host-wait idle)"
    assert round(ev[label], 1) == 95.5
    assert round(ev["device utilisation mean"], 1) == 27.1


def test_h200_pageable_copies_are_not_a_host_bound_step():
    # the pageable variant's device idles, but inside its copies (host-wait 5%): GC020's, not GC021's
    facts = Facts.load(H200)
    row = facts.offload.get("gc+save_on_cpu-pageable")
    assert round(row.host_wait_share, 3) == 0.052 and round(row.exposed_copy_share, 2) == 0.93
    assert "offload/gc+save_on_cpu-pageable" not in judge(facts)
