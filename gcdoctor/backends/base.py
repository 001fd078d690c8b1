"""What every device backend provides, so probes are written once for CUDA, MUSA and CPU."""
from __future__ import annotations

import os
import platform
import socket
from typing import Any

import torch

from gcdoctor import hardware
from gcdoctor.facts import Environment


class Backend:
    kind: str = ""
    supports_graphs: bool = False

    def __init__(self, index: int = 0) -> None:
        self.index = index

    @property
    def device(self) -> torch.device:
        return torch.device(self.kind, self.index) if self.kind != "cpu" else torch.device("cpu")

    # timing -----------------------------------------------------------------------------
    def synchronize(self) -> None:
        pass

    # memory -----------------------------------------------------------------------------
    def reset_peak(self) -> None:
        raise NotImplementedError

    def memory_allocated(self) -> int | None:
        raise NotImplementedError

    def max_memory_allocated(self) -> int | None:
        raise NotImplementedError

    def memory_reserved(self) -> int | None:
        return None

    def max_memory_reserved(self) -> int | None:
        return None

    def total_memory(self) -> int | None:
        return None

    def empty_cache(self) -> None:
        pass

    def set_memory_limit(self, limit_bytes: int | None) -> None:
        """Cap what this process may allocate (the injected limit of tests and --memory-limit)."""
        raise NotImplementedError

    def memory_limit(self) -> int | None:
        """The allocation limit in force, if any (None: the device's own memory)."""
        return None

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, torch.OutOfMemoryError):
            return True
        return "out of memory" in str(exc).lower() and isinstance(exc, RuntimeError)

    def tracking(self):
        """A context inside which allocations are counted (CPU needs one; devices do not)."""
        import contextlib
        return contextlib.nullcontext()

    # profiler ---------------------------------------------------------------------------
    def profiler_activities(self) -> list[Any]:
        return [torch.profiler.ProfilerActivity.CPU]

    def device_name(self) -> str:
        return platform.processor() or platform.machine()

    # description ------------------------------------------------------------------------
    def describe(self) -> Environment:
        import psutil
        env = Environment(
            device_kind=self.kind, device_name=self.device_name(), total_memory_bytes=self.total_memory(),
            torch=torch.__version__, python=platform.python_version(), host=socket.gethostname(),
            cpu_count=os.cpu_count(), host_memory_bytes=psutil.virtual_memory().total,
        )
        from importlib import metadata
        for dist in ("transformers", "deepspeed"):
            try:  # the installed version, without paying for (or side effects of) importing it
                setattr(env, dist, metadata.version(dist))
            except metadata.PackageNotFoundError:
                pass
        from gcdoctor import __version__
        env.gcdoctor = __version__
        spec = hardware.lookup(env.device_name) if self.kind != "cpu" else None
        if spec:
            env.peak_bf16_tflops, env.peak_fp32_tflops = spec.bf16_tflops, spec.fp32_tflops
            env.memory_bandwidth_gbs = spec.memory_bandwidth_gbs
            env.pcie_peak_gbs = hardware.pcie_peak_gbs(spec.pcie_gen, spec.pcie_lanes)
        return env
