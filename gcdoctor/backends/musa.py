"""Moore Threads MUSA backend (torch_musa). Built from torch_musa's documented API; untested on
hardware (none available to this project): see README.

torch_musa registers the device "musa", mirrors torch.cuda as torch.musa (synchronize,
memory_allocated, max_memory_allocated, memory_reserved, reset_peak_memory_stats, empty_cache,
mem_get_info), profiles through MUPTI as ProfilerActivity.PrivateUse1 and raises
torch.OutOfMemoryError "MUSA out of memory" (REFERENCES.md section 6).
"""
from __future__ import annotations

from typing import Any

import torch

from gcdoctor.backends.accelerator import AcceleratorBackend
from gcdoctor.facts import Environment


class MusaBackend(AcceleratorBackend):
    kind = "musa"
    supports_graphs = True  # torch.musa.MUSAGraph exists in torch_musa >= 1.1; probes check

    def __init__(self, index: int = 0) -> None:
        import torch_musa  # noqa: F401 - registers torch.musa
        super().__init__(torch.musa, index)

    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]

    def describe(self) -> Environment:
        env = super().describe()
        env.device_count = torch.musa.device_count()
        try:
            import torch_musa
            env.torch_musa = getattr(torch_musa, "__version__", None)
            env.runtime = f"MUSA {getattr(torch.version, 'musa', None) or '?'}"
        except Exception:  # noqa: BLE001
            pass
        return env
