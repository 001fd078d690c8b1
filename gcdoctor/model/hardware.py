"""Peak rates and memory per device model, with sources. An unknown device gets None (no MFU),
never a guess.

Two ways in:

- `lookup(device_name)`: the device a backend reports ("NVIDIA H200", "MTT S4000"), matched by a
  case-insensitive substring, longest key first (`DEVICES`).
- `preset(name)`: a card named by the user (`gcdoctor plan --device mtt-s4000`), one of `PRESETS`,
  for sizing batches and step times on cards we do not have.

Rates are dense (no sparsity), per device, in TFLOP/s; bandwidths in GB/s (10^9 bytes/s). Every
figure carries its source in `source`; a figure that is derived rather than published says so in
`notes`. Memory is in bytes: `memory_bytes` is the card's total as its management tool reports it
(NVML / mthreads-gmi), `torch_memory_bytes` what `torch.cuda.get_device_properties().total_memory`
reports where a real run shows it (the driver keeps a few hundred MiB back), else None.
"""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.errors import UserError

MiB = 2 ** 20
GiB = 2 ** 30


@dataclass(frozen=True)
class DeviceSpec:
    bf16_tflops: float | None
    fp32_tflops: float | None
    memory_bandwidth_gbs: float | None
    pcie_gen: int | None
    pcie_lanes: int | None
    source: str
    fp16_tflops: float | None = None
    memory_bytes: int | None = None  # the card's total as nvidia-smi / mthreads-gmi report it
    torch_memory_bytes: int | None = None  # torch's total_memory on such a card, where measured
    kind: str = "cuda"  # the gcdoctor backend that drives it: cuda | musa
    name: str = ""  # marketing name
    notes: str = ""  # what is derived rather than published, and other caveats

    @property
    def capacity_bytes(self) -> int | None:
        """The memory the caching allocator's device reports: torch's total where known."""
        return self.torch_memory_bytes or self.memory_bytes

    @property
    def pcie_gbs(self) -> float | None:
        return pcie_peak_gbs(self.pcie_gen, self.pcie_lanes)


_NV_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (datasheet)"
_NV_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (datasheet)"
_NV_A100 = "https://www.nvidia.com/en-us/data-center/a100/ (datasheet)"
_NVSMI_TOTALS = "nvidia-smi totals: github.com/modal-labs/modal-client/pull/2797"
_S4000 = ("Moore Threads launch figures as reported by io-tech.fi (2023-12) and tweakpc.de news 49715: "
          "FP32 25, TF32 50, FP16/BF16 100 TFLOPS, INT8 200 TOPS, 48 GB GDDR6 (384-bit), 768 GB/s, "
          "PCIe 5.0 x16, MTLink 240 GB/s")
_S5000 = ("Moore Threads figures as reported 2026-02 (rutab.net, ldeepai.com): 80 GB, 1.6 TB/s, 1000 TFLOPS "
          "FP8 (liquid-cooled; 920 air-cooled); mthreads-gmi 2.3.2 total 81920 MiB, link 16x "
          "(samples/musa/mthreads-gmi-2.3.2-mtt-s5000.txt, from github.com/vllm-project/vllm-omni/pull/2337)")

PRESETS: dict[str, DeviceSpec] = {
    # MTT S4000: 100 TFLOPS FP16/BF16, 25 FP32, 48 GB GDDR6 at 768 GB/s, PCIe Gen5 x16.
    "mtt-s4000": DeviceSpec(100.0, 25.0, 768.0, 5, 16, _S4000, fp16_tflops=100.0, memory_bytes=48 * GiB,
                            kind="musa", name="Moore Threads MTT S4000",
                            notes="48 GB taken as 48 GiB (49,152 MiB), the way mthreads-gmi reports the S5000's "
                                  "80 GB as 81,920 MiB; what torch_musa reports as total_memory is not published"),
    # MTT S5000: 80 GB (81,920 MiB), 1.6 TB/s, 1,000 TFLOPS FP8. BF16 is not published: 500 is half
    # the FP8 figure (FP8 tensor rates are twice BF16 on every accelerator with both). The link
    # generation is not published (the card reports 16 lanes).
    "mtt-s5000": DeviceSpec(500.0, None, 1600.0, None, 16, _S5000, fp16_tflops=500.0, memory_bytes=81920 * MiB,
                            kind="musa", name="Moore Threads MTT S5000",
                            notes="BF16/FP16 derived: half the published 1000 TFLOPS FP8 (not published); "
                                  "FP32 and the PCIe generation not published"),
    # A100 40 GB: 312 dense BF16/FP16, 19.5 FP32, 1,555 GB/s HBM2, PCIe Gen4 x16; nvidia-smi
    # 40,960 MiB; torch reports 39.50 GiB total capacity (github.com/TianheWu/CoSeR/issues/10).
    "a100-40gb": DeviceSpec(312.0, 19.5, 1555.0, 4, 16,
                            f"{_NV_A100}; {_NVSMI_TOTALS}; torch total: github.com/TianheWu/CoSeR/issues/10",
                            fp16_tflops=312.0, memory_bytes=40960 * MiB, torch_memory_bytes=int(39.50 * GiB),
                            name="NVIDIA A100 40GB",
                            notes="torch total read off an OOM message printed with two decimals (39.50 GiB)"),
    # A100 80 GB SXM: 312 dense BF16/FP16, 19.5 FP32, 2,039 GB/s HBM2e, PCIe Gen4 x16; nvidia-smi
    # 81,920 MiB; torch reports 79.25 GiB total capacity in a real OOM message
    # (github.com/levihsu/OOTDiffusion/issues/235).
    "a100-80gb": DeviceSpec(312.0, 19.5, 2039.0, 4, 16,
                            f"{_NV_A100}; {_NVSMI_TOTALS}; torch total: github.com/levihsu/OOTDiffusion/issues/235",
                            fp16_tflops=312.0, memory_bytes=81920 * MiB, torch_memory_bytes=int(79.25 * GiB),
                            name="NVIDIA A100 80GB SXM",
                            notes="torch total read off an OOM message printed with two decimals (79.25 GiB)"),
    # H100 SXM5 80 GB: 989 dense BF16/FP16, 67 FP32, 3.35 TB/s HBM3, PCIe Gen5 x16; nvidia-smi
    # total 81,559 MiB.
    "h100-80gb": DeviceSpec(989.0, 67.0, 3350.0, 5, 16, f"{_NV_H100}; {_NVSMI_TOTALS}", fp16_tflops=989.0,
                            memory_bytes=81559 * MiB, name="NVIDIA H100 SXM5 80GB"),
    # NVIDIA H200 SXM: 989 TFLOPS dense BF16/FP16 (1979 with sparsity), 67 FP32, 141 GB HBM3e,
    # 4.8 TB/s, PCIe Gen5 x16. Measured here: NVML total 150,754,820,096 B (143,771 MiB,
    # samples/telemetry/h200-pcie-demo), torch total_memory 150,109,880,320 B
    # (samples/h200-llama3-8b-diagnose).
    "h200": DeviceSpec(989.0, 67.0, 4800.0, 5, 16, _NV_H200, fp16_tflops=989.0,
                       memory_bytes=143771 * MiB, torch_memory_bytes=150_109_880_320, name="NVIDIA H200 SXM"),
}

DEVICES: dict[str, DeviceSpec] = {
    "h200": PRESETS["h200"],
    # The PCIe H100 is slower than the SXM part.
    "h100 pcie": DeviceSpec(756.0, 51.0, 2000.0, 5, 16, "NVIDIA H100 PCIe datasheet", fp16_tflops=756.0,
                            name="NVIDIA H100 PCIe"),
    "h100": PRESETS["h100-80gb"],
    "a100-sxm4-40gb": PRESETS["a100-40gb"],
    "a100-pcie-40gb": PRESETS["a100-40gb"],
    "a100": PRESETS["a100-80gb"],
    # L40S datasheet: 362 dense BF16, 91.6 FP32, 864 GB/s, PCIe Gen4 x16.
    "l40s": DeviceSpec(362.0, 91.6, 864.0, 4, 16, "NVIDIA L40S datasheet", fp16_tflops=362.0, name="NVIDIA L40S"),
    "s4000": PRESETS["mtt-s4000"],
    "s5000": PRESETS["mtt-s5000"],
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


def preset(name: str) -> DeviceSpec:
    """A named card for `plan --device`; a one-line error listing the names otherwise."""
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise UserError(f"--device {name!r}: not a known card; use one of {', '.join(PRESETS)} "
                        "(or cpu, cuda, musa with --device-memory)")
    return PRESETS[key]


def pcie_peak_gbs(gen: int | None, lanes: int | None) -> float | None:
    if not gen or not lanes or gen not in PCIE_GBS_PER_LANE:
        return None
    return PCIE_GBS_PER_LANE[gen] * lanes
