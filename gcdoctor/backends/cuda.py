"""NVIDIA CUDA backend."""
from __future__ import annotations

from typing import Any

import torch

from gcdoctor.backends.accelerator import AcceleratorBackend
from gcdoctor.facts import Environment


class CudaBackend(AcceleratorBackend):
    kind = "cuda"
    supports_graphs = True

    def __init__(self, index: int = 0) -> None:
        super().__init__(torch.cuda, index)

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def describe(self) -> Environment:
        env = super().describe()
        env.device_count = torch.cuda.device_count()
        env.runtime = f"CUDA {torch.version.cuda}"
        try:
            import pynvml  # nvidia-ml-py
            pynvml.nvmlInit()
            env.driver = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:  # noqa: BLE001 - NVML is optional; the driver version is then unknown
            env.driver = None
        return env
