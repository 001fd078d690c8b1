"""Device presets: every card named in the issue has sourced figures, and lookups resolve."""
from __future__ import annotations

import pytest

from gcdoctor.model import hardware
from gcdoctor.errors import UserError

NAMED = ("mtt-s4000", "mtt-s5000", "a100-40gb", "a100-80gb", "h100-80gb", "h200")


@pytest.mark.parametrize("name", NAMED)
def test_each_preset_has_rates_memory_bandwidth_link_and_a_source(name):
    spec = hardware.preset(name)
    assert spec.bf16_tflops and spec.fp16_tflops and spec.memory_bandwidth_gbs
    assert spec.memory_bytes and spec.capacity_bytes <= spec.memory_bytes
    assert spec.pcie_lanes == 16
    assert spec.source and spec.name
    assert spec.kind == ("musa" if name.startswith("mtt") else "cuda")


def test_published_figures():
    h200, s4000 = hardware.preset("h200"), hardware.preset("MTT-S4000")
    assert (h200.bf16_tflops, h200.memory_bandwidth_gbs, h200.pcie_gbs) == (989.0, 4800.0, 63.008)
    # torch's total on the recorded H200 run, and NVML's (615 MiB more)
    assert h200.capacity_bytes == 150_109_880_320
    assert round((h200.memory_bytes - h200.capacity_bytes) / 2**20) == 615
    assert (s4000.bf16_tflops, s4000.memory_bandwidth_gbs, s4000.memory_bytes) == (100.0, 768.0, 48 * 2**30)
    # a derived figure says so
    assert "derived" in hardware.preset("mtt-s5000").notes


@pytest.mark.parametrize("device_name,preset", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("MTT S4000", "mtt-s4000"), ("MTT S5000", "mtt-s5000"),
])
def test_a_reported_device_name_finds_its_preset(device_name, preset):
    assert hardware.lookup(device_name) is hardware.PRESETS[preset]


def test_an_unknown_card_is_a_user_error_naming_the_presets():
    with pytest.raises(UserError, match="mtt-s4000, mtt-s5000, a100-40gb"):
        hardware.preset("rtx-9090")
    assert hardware.lookup("Some Future GPU") is None
