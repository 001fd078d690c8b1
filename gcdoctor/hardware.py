"""Peak rates per device model, with sources. An unknown device gets None (no MFU), never a guess.

Rates are dense (no sparsity), per device. Matched by a case-insensitive substring of the
device name reported by the backend, longest key first.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    bf16_tflops: float | None
    fp32_tflops: float | None
    memory_bandwidth_gbs: float | None
    pcie_gen: int | None
    pcie_lanes: int | None
    source: str


DEVICES: dict[str, DeviceSpec] = {
    # NVIDIA H200 SXM datasheet: 989 TFLOPS dense BF16 (1979 with sparsity), 67 TFLOPS FP32,
    # 4.8 TB/s HBM3e, PCIe Gen5 x16.
    "h200": DeviceSpec(989.0, 67.0, 4800.0, 5, 16, "NVIDIA H200 datasheet"),
    # H100 SXM5 datasheet: 989 dense BF16, 67 FP32, 3.35 TB/s. The PCIe card is slower.
    "h100 pcie": DeviceSpec(756.0, 51.0, 2000.0, 5, 16, "NVIDIA H100 PCIe datasheet"),
    "h100": DeviceSpec(989.0, 67.0, 3350.0, 5, 16, "NVIDIA H100 SXM5 datasheet"),
    # A100 datasheet: 312 dense BF16, 19.5 FP32, 2.0 TB/s (80 GB SXM), PCIe Gen4 x16.
    "a100": DeviceSpec(312.0, 19.5, 2039.0, 4, 16, "NVIDIA A100 datasheet"),
    # L40S datasheet: 362 dense BF16, 91.6 FP32, 864 GB/s, PCIe Gen4 x16.
    "l40s": DeviceSpec(362.0, 91.6, 864.0, 4, 16, "NVIDIA L40S datasheet"),
    # Moore Threads MTT S4000: 100 TFLOPS FP16/BF16, 768 GB/s, PCIe Gen5 x16 (vendor page,
    # ../shared/REFERENCES.md section 6). FP32 rate not published in the same source.
    "s4000": DeviceSpec(100.0, None, 768.0, 5, 16, "Moore Threads MTT S4000 product page"),
}

# PCIe usable bandwidth per lane and direction after line encoding, GB/s (PCI-SIG: Gen3 8 GT/s
# 128b/130b, Gen4 16 GT/s, Gen5 32 GT/s).
PCIE_GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def lookup(device_name: str) -> DeviceSpec | None:
    name = device_name.lower()
    for key in sorted(DEVICES, key=len, reverse=True):
        if key in name:
            return DEVICES[key]
    return None


def pcie_peak_gbs(gen: int | None, lanes: int | None) -> float | None:
    if not gen or not lanes or gen not in PCIE_GBS_PER_LANE:
        return None
    return PCIE_GBS_PER_LANE[gen] * lanes
