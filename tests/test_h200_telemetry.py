"""Telemetry of the real H200 diagnose (samples/h200-llama3-8b-diagnose): every measurement of the
sweep, granularity and offload probes carries a summary of the series sampled during its steps, and
PCIe throughput rises during steps that copy to and from the host."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.facts import Facts

FACTS = Path(__file__).resolve().parents[1] / "samples" / "h200-llama3-8b-diagnose" / "facts.json"
PCIE = ("gpu0.pcie_tx_gbs", "gpu0.pcie_rx_gbs")


@pytest.fixture(scope="module")
def facts() -> Facts:
    return Facts.load(FACTS)


def test_every_measured_step_has_a_telemetry_summary_with_pcie(facts):
    measured = ([m for m in facts.sweep.measurements if m.fits]
                + [v.measurement for g in facts.granularity.groups for v in g.variants]
                + [r.measurement for r in facts.offload.variants])
    assert len(measured) == 8 + 18 + 6
    for m in measured:
        # at 20 Hz a synthetic block's three ~30 ms steps get 1 to 3 samples, a model step 6 or more
        assert all(k in m.telemetry and m.telemetry[k].n >= 1 for k in PCIE), (m.probe, m.variant)
    assert min(r.measurement.telemetry["gpu0.pcie_rx_gbs"].n for r in facts.offload.variants) == 7


def test_pcie_throughput_rises_while_activations_are_copied_to_the_host(facts):
    # save_on_cpu(pin_memory=True) moves 11 GiB each way per step; plain gc moves nothing
    gc = facts.offload.get("gc").measurement.telemetry
    pinned = facts.offload.get("save_on_cpu-pinned").measurement.telemetry
    for key in PCIE:
        assert gc[key].mean < 0.2  # GB/s: NVML's own background traffic
        assert pinned[key].mean > 20.0 and pinned[key].mean > 100 * gc[key].mean
        # peaks of 56 (RX) and 60 GB/s (TX): near the Gen5 x16 link's 63 GB/s per direction
        assert pinned[key].max > 0.85 * facts.telemetry.pcie_link_peak_gbs
