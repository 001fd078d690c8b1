"""GC020 offload-stall: on the offload facts of a real CPU run (samples/cpu-tiny-llama-offload), with
device metrics from the hand-made traces of tests/data/offload-*.json put under its variants (as a
GPU run would have them), and on those traces analysed bare (`gcdoctor analyze trace.json`)."""
from __future__ import annotations

import copy
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
RULE = BY_CODE["GC020"]


def judge(facts: Facts, ckpt: bool = False, **overrides: float) -> dict[str, object]:
    """GC020's verdicts by subject; the stall verdicts only unless `ckpt` (the cpu_checkpointing check)."""
    verdicts = evaluate(facts, [RULE], overrides={"GC020": overrides} if overrides else None)
    return {v.subject: v for v in verdicts if ckpt or not v.subject.endswith("checkpoints on the host")}


def tel(**means: float) -> dict[str, SeriesSummary]:
    """A telemetry summary whose series are constant at the given values."""
    return {k.replace("__", "."): SeriesSummary(mean=v, min=v, max=v, n=10) for k, v in means.items()}


# the recorded run's variants, each given a device trace without any stall
ALL_CLEAN = {"gc": "clean", "gc+save_on_cpu-pinned": "overlapped", "gc+save_on_cpu-pageable": "overlapped",
             "save_on_cpu-pinned": "overlapped", "deepspeed-ckpt-cpu": "overlapped",
             "deepspeed-zero2-offload+gc": "overlapped"}


# -- the offload probe's facts ------------------------------------------------------------------

def test_inconclusive_on_the_recorded_cpu_run():
    verdicts = judge(Facts.load(SAMPLE), ckpt=True)
    assert sorted(verdicts) == ["", "deepspeed-ckpt-cpu: checkpoints on the host"]
    assert verdicts[""].status == "inconclusive" and "CPU run" in verdicts[""].headline
    ck = verdicts["deepspeed-ckpt-cpu: checkpoints on the host"]
    assert ck.status == "inconclusive" and "not checkable on the CPU" in ck.headline


H200 = REPO / "samples" / "h200-llama3-8b-diagnose" / "facts.json"
CKPT = "deepspeed-ckpt-cpu: checkpoints on the host"


def test_the_h200_run_moved_its_checkpoints_to_the_host():
    v = judge(Facts.load(H200), ckpt=True)[CKPT]
    assert (v.status, v.scope, v.topic) == ("passed", "experiment", "offload")
    assert v.headline == "deepspeed-ckpt-cpu: the checkpoints went to the host (96.0 of 96.0 MiB per step)"


def test_checkpoints_that_stayed_on_the_device_are_a_device_finding():
    facts = Facts.load(H200)
    ck = facts.offload.get("deepspeed-ckpt-cpu").ckpt_check
    ck.trace_d2h_bytes_per_step = 0.1 * ck.expected_offload_bytes_per_step  # the probe's own flag is not read
    v = judge(facts, ckpt=True)[CKPT]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.line == "DeepSpeed cpu_checkpointing did not move the checkpoints to the host here (10%)"
    assert judge(facts, ckpt=True, min_offloaded_ratio=0.05)[CKPT].status == "passed"


def test_silent_when_every_offload_is_overlapped(offload_gpu_like):
    (v,) = judge(offload_gpu_like(ALL_CLEAN)).values()
    assert v.status == "passed"


def test_fires_critical_on_pageable_activation_offload(offload_gpu_like):
    verdicts = judge(offload_gpu_like({**ALL_CLEAN, "gc+save_on_cpu-pageable": "pageable"}))
    assert list(verdicts) == ["gc+save_on_cpu-pageable"]
    v = verdicts["gc+save_on_cpu-pageable"]
    assert (v.status, v.severity) == ("fired", "critical")
    assert v.headline == ("gc+save_on_cpu-pageable: the device stalls on the offload 40% of the step more than "
                          "without offload (pageable copies)")
    assert v.recommendation.startswith("pageable copies: pin the host memory")


def test_fires_on_a_saturated_link_seen_by_telemetry_and_trace(offload_gpu_like):
    facts = offload_gpu_like({**ALL_CLEAN, "gc+save_on_cpu-pinned": "saturated"},
                     telemetry={"gc+save_on_cpu-pinned": tel(gpu0__pcie_rx_gbs=55.0, gpu0__pcie_tx_gbs=54.0)})
    v = judge(facts)["gc+save_on_cpu-pinned"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline.endswith("20% of the step more than without offload (a saturated link)")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["PCIe RX (host to device) mean / max"] == "55.0 / 55.0"
    assert ev["copy bandwidth HtoD / DtoH"] == "60.0 / 60.0"


def test_fires_on_a_host_bound_optimizer_with_a_busy_cpu(offload_gpu_like):
    facts = offload_gpu_like({**ALL_CLEAN, "deepspeed-zero2-offload+gc": "hostopt"},
                     telemetry={"deepspeed-zero2-offload+gc": tel(cpu_pct=97.0, cpu_max_core_pct=100.0,
                                                                   proc_cpu_pct=190.0)},
                     optimizer_share={"deepspeed-zero2-offload+gc": 0.65})
    v = judge(facts)["deepspeed-zero2-offload+gc"]
    assert (v.status, v.severity) == ("fired", "critical")
    assert v.headline.endswith("65% of the step more than without offload (a host-bound optimizer step)")
    assert "more cores/threads for DeepSpeed's CPU Adam" in v.recommendation


def test_an_idle_cpu_is_not_a_host_bound_optimizer(offload_gpu_like):
    facts = offload_gpu_like({**ALL_CLEAN, "deepspeed-zero2-offload+gc": "hostopt"},
                     telemetry={"deepspeed-zero2-offload+gc": tel(cpu_pct=20.0, cpu_max_core_pct=40.0,
                                                                   proc_cpu_pct=30.0)},
                     optimizer_share={"deepspeed-zero2-offload+gc": 0.65})
    v = judge(facts)["deepspeed-zero2-offload+gc"]
    assert v.headline.endswith("(the device waiting on the host)")


def test_a_stall_the_reference_has_too_is_not_blamed_on_the_offload(offload_gpu_like):
    # the host waits just as long without offload: the offload adds nothing
    (v,) = judge(offload_gpu_like({**ALL_CLEAN, "gc": "hostwait", "gc+save_on_cpu-pinned": "hostwait"})).values()
    assert v.status == "passed"


def test_threshold_override_silences_the_warning(offload_gpu_like):
    facts = offload_gpu_like({**ALL_CLEAN, "gc+save_on_cpu-pinned": "saturated"})
    (v,) = judge(facts, min_stall_share=0.25).values()
    assert v.status == "passed"


def test_a_skipped_variant_is_ignored(offload_gpu_like):
    facts = offload_gpu_like({**ALL_CLEAN, "gc+save_on_cpu-pageable": "pageable"})
    row = facts.offload.get("gc+save_on_cpu-pageable")
    row.skipped, row.measurement = "failed: test", None
    (v,) = judge(facts).values()
    assert v.status == "passed"


# -- bare traces --------------------------------------------------------------------------------

def bare(name: str) -> Facts:
    return facts_from_trace(DATA / f"offload-{name}.json")


def test_bare_trace_pageable_copies_fire_on_the_trace_alone():
    v = judge(bare("pageable"))["trace"]
    assert (v.status, v.severity) == ("fired", "critical")
    assert v.headline == "trace: the device stalls on the offload 40% of the step (pageable copies)"
    assert "Telemetry unavailable (a bare trace): judged on the trace alone." in v.explanation


def test_bare_trace_copies_at_the_link_peak_are_a_saturated_link():
    v = judge(bare("saturated"))["trace"]
    assert (v.severity, v.headline) == ("warning", "trace: the device stalls on the offload 20% of the step "
                                                   "(a saturated link)")


def test_bare_trace_pinned_copies_below_the_link_peak_are_merely_not_overlapped():
    v = judge(bare("exposed"))["trace"]
    assert v.headline == "trace: the device stalls on the offload 20% of the step (copies not overlapped with compute)"
    assert v.recommendation.startswith("copies not overlapped with compute: overlap the copies with compute")


def test_bare_trace_host_optimizer_is_not_an_offload_stall():
    # on a bare trace an offload stall is only ever copies: the host-wait idle is GC021's
    v = judge(bare("hostopt"))["trace"]
    assert v.status == "passed"
    assert v.headline == "trace: the offload stalls the device 5% of the step, below 10%"


@pytest.mark.parametrize("name", ["overlapped", "clean"])
def test_bare_trace_silent(name):
    (v,) = judge(bare(name)).values()
    assert v.status == "passed"


def test_bare_trace_without_copies_says_so():
    (v,) = judge(bare("clean")).values()
    assert v.headline == "No host-device copy traffic to stall on: copies take 0.0% of the device time"


def test_no_offload_and_no_trace_is_inconclusive():
    facts = copy.deepcopy(Facts.load(SAMPLE))
    facts.offload, facts.trace = None, {}
    (v,) = judge(facts).values()
    assert v.status == "inconclusive"


# -- the H200 run (samples/h200-llama3-8b-diagnose: Llama-3-8B, 4 layers, seq 4096, batch 1) ----------

H200 = REPO / "samples" / "h200-llama3-8b-diagnose" / "facts.json"


@pytest.fixture(scope="module")
def h200() -> dict[str, object]:
    return judge(Facts.load(H200))


def test_h200_fires_on_every_variant_that_moves_activations_or_optimizer_states(h200):
    # gc is the reference; DeepSpeed's cpu_checkpointing moves 96 MiB/step, 97% overlapped: no stall
    assert sorted(h200) == ["deepspeed-zero2-offload+gc", "gc+save_on_cpu-pageable", "gc+save_on_cpu-pinned",
                            "save_on_cpu-pinned"]
    assert all((v.status, v.severity) == ("fired", "critical") for v in h200.values())


def test_h200_pageable_save_on_cpu_is_pageable_copies_alone(h200):
    # 5.3 GiB each way per step at 7.3 / 1.4 GB/s: far below the link, so pinning is the fix
    v = h200["gc+save_on_cpu-pageable"]
    assert v.headline == ("gc+save_on_cpu-pageable: the device stalls on the offload 93% of the step more than "
                          "without offload (pageable copies)")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["copy bandwidth HtoD / DtoH"] == "7.3 / 1.4"
    assert round(ev["pageable share of copied bytes"]) == 100


@pytest.mark.parametrize("variant, pct, gbs", [("gc+save_on_cpu-pinned", 61, "55.4 / 55.3"),
                                               ("save_on_cpu-pinned", 76, "55.3 / 55.2")])
def test_h200_pinned_save_on_cpu_saturates_the_link(h200, variant, pct, gbs):
    # pinned copies run at 55 GB/s, 88% of the Gen5 x16 peak (63 GB/s), none overlapped with compute
    v = h200[variant]
    assert v.headline == (f"{variant}: the device stalls on the offload {pct}% of the step more than without "
                          "offload (a saturated link)")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["pageable share of copied bytes"] == 0
    assert ev["copy bandwidth HtoD / DtoH"] == gbs


def test_h200_zero_offload_is_a_saturated_link_and_a_host_bound_optimizer(h200):
    # CPU Adam: the optimizer phase is 78% of a 1,058 ms step, the process on 8.3 cores
    v = h200["deepspeed-zero2-offload+gc"]
    assert v.headline.endswith("85% of the step more than without offload (a saturated link, a host-bound "
                               "optimizer step)")
    assert "more cores/threads for DeepSpeed's CPU Adam" in v.recommendation
    ev = {e.label: e.value for e in v.evidence}
    assert round(ev["optimizer share (optimizer phase / step (device events))"]) == 78
    assert round(ev["process CPU mean (100 = one core)"]) == 827


def test_h200_deepspeed_cpu_checkpointing_is_verified_on_the_host():
    row = Facts.load(H200).offload.get("deepspeed-ckpt-cpu")
    check = row.ckpt_check
    # 4 layer inputs of 32 MiB, the newest kept on the device: 96 MiB/step device-to-host, as DeepSpeed counted
    assert (check.n_checkpoints, check.kept_on_device) == (4, 1)
    assert check.expected_offload_bytes_per_step == 96 * 2**20 == check.ds_offloaded_bytes_per_step
    assert round(check.trace_d2h_bytes_per_step / 2**20, 3) == 96.0
    assert round(row.copy_overlap_share, 2) == 0.97
