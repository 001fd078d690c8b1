"""The offload link what-if (facts.offload) and GC012, on the recorded H200 offload run."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import derive_link_whatif

RUN = Path(__file__).resolve().parents[1] / "samples" / "h200-llama3-8b-diagnose"


@pytest.fixture
def facts():
    f = Facts.load(RUN / "facts.json")
    derive_link_whatif(f.offload, f.environment.pcie_peak_gbs)
    return f


def _gc012(facts):
    return {v.subject: v for v in evaluate(facts) if v.code == "GC012"}


def test_slower_links_scale_pinned_copies_and_leave_pageable_ones(facts):
    of = facts.offload
    assert of.whatif_links == ["PCIe Gen4 x16", "PCIe Gen3 x16"]
    # the fastest copies that were pinned only: 55.4 GB/s of the Gen5 x16 link's 63.0
    assert of.link_efficiency == pytest.approx(of.get("gc+save_on_cpu-pinned").h2d_copy_gbs / 63.008)
    pinned = of.get("gc+save_on_cpu-pinned")
    gen4, gen3 = pinned.link_whatif
    assert gen4.h2d_gbs == pytest.approx(of.link_efficiency * 31.504, rel=1e-6)
    # 5.6 GB each way, none of it overlapped: every extra millisecond of copy is exposed
    assert gen4.copy_ms == pytest.approx((pinned.h2d_bytes + pinned.d2h_bytes) / gen4.h2d_gbs / 1e6)
    assert gen4.exposed_copy_ms == gen4.exposed_copy_ms_if_overlap_scales == pytest.approx(gen4.copy_ms)
    assert gen4.step_ms == pytest.approx(pinned.step_ms + gen4.copy_ms - pinned.exposed_copy_ms)
    assert gen3.step_ms > gen4.step_ms > pinned.step_ms
    pageable = of.get("gc+save_on_cpu-pageable")  # 7.3 / 1.4 GB/s: the host's staging, not the link
    assert all(w.step_ms == pytest.approx(pageable.step_ms) for w in pageable.link_whatif)
    # overlapped copies: the overlapped time stays, the rest is exposed (the lower bound keeps the share)
    ds = of.get("deepspeed-ckpt-cpu").link_whatif[1]
    assert ds.exposed_copy_ms_if_overlap_scales < ds.exposed_copy_ms < ds.copy_ms
    assert of.get("gc").link_whatif == []  # nothing offloaded


def test_the_check_on_two_measured_points_is_within_ten_percent(facts):
    c = facts.offload.link_check
    assert (c.source, c.target) == ("gc+save_on_cpu-pinned", "gc+save_on_cpu-pageable")
    assert c.measured_step_ms == pytest.approx(4610.0, abs=1.0)
    assert abs(c.error_pct) < 10.0  # +4.3% on the H200 recording


def test_gc012_on_the_h200(facts):
    verdicts = _gc012(facts)
    assert set(verdicts) == {f"offload/{v}" for v in ("gc+save_on_cpu-pinned", "gc+save_on_cpu-pageable",
                                                        "save_on_cpu-pinned", "deepspeed-ckpt-cpu",
                                                        "deepspeed-zero2-offload+gc")}
    ds = verdicts["offload/deepspeed-ckpt-cpu"]
    assert ds.status == "passed" and ds.scope == "experiment" and ds.topic == "offload"
    assert ds.headline == "deepspeed-ckpt-cpu: +2% here; PCIe Gen4 x16 +4%, PCIe Gen3 x16 +10% predicted"
    assert any(e.label.startswith("check: gc+save_on_cpu-pinned at") for e in ds.evidence)


def test_cheap_here_expensive_on_a_slower_link_is_reported(facts):
    ds = facts.offload.get("deepspeed-ckpt-cpu")
    ds.h2d_bytes, ds.d2h_bytes = 4 * ds.h2d_bytes, 4 * ds.d2h_bytes  # four times the checkpoints
    derive_link_whatif(facts.offload, facts.environment.pcie_peak_gbs)
    v = _gc012(facts)["offload/deepspeed-ckpt-cpu"]
    assert v.status == "fired" and v.severity == "info"
    assert v.headline.startswith("deepspeed-ckpt-cpu: +2% here, predicted +")
    assert "on a PCIe Gen3 x16 host" in v.headline


def test_a_failed_check_makes_the_whatif_inconclusive(facts):
    facts.offload.link_check.measured_step_ms *= 2
    (v,) = _gc012(facts).values()
    assert v.status == "inconclusive" and "missed its check" in v.headline


def test_without_a_known_link_it_says_why(facts):
    facts.environment.pcie_peak_gbs = None
    derive_link_whatif(facts.offload, None)
    facts.unavailable["offload.link_whatif"] = "no link peak"
    (v,) = _gc012(facts).values()
    assert v.status == "inconclusive" and "no link peak" in v.headline
