"""NVIDIA CUDA backend."""
from __future__ import annotations

from typing import Any

import torch

from gcdoctor.backends.accelerator import AcceleratorBackend
from gcdoctor.facts import Environment


_OOM_SEEN: dict[int, tuple[int, int, int]] = {}  # device -> (request, allowed or total, free)
_OBSERVING = False


def _observe_ooms() -> None:
    """Ask the caching allocator to tell us each OOM's exact request (it prints it rounded).

    `torch._C._cuda_attach_out_of_memory_observer(fn(device, alloc_size, allowed_or_total,
    device_free))`, called just before the allocator raises; private API, so optional."""
    global _OBSERVING
    if _OBSERVING:
        return
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return

    def observer(device: int, alloc: int, allowed: int, free: int) -> None:
        _OOM_SEEN[int(device)] = (int(alloc), int(allowed), int(free))

    try:
        torch.cuda.init()  # the observer attaches to the allocators that exist: make them exist
        attach(observer)
        _OBSERVING = True
    except Exception:  # noqa: BLE001 - the message still gives the request, rounded
        pass


class CudaBackend(AcceleratorBackend):
    kind = "cuda"
    supports_graphs = True

    def __init__(self, index: int = 0) -> None:
        super().__init__(torch.cuda, index)
        _observe_ooms()

    def _last_oom_observation(self) -> tuple[int, int, int] | None:
        return _OOM_SEEN.pop(self.index, None)

    def release_workspaces(self) -> None:
        """cuBLAS keeps a workspace per (handle, stream) in the caching allocator from its first
        matmul on (32 MiB each on sm90): the 32 MiB an OOM in the first forward seemed to leak.
        Freed here, they are made again by the next step's first matmul."""
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()

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
