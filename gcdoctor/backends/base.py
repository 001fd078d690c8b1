"""What every device backend provides, so probes are written once for CUDA, MUSA and CPU."""
from __future__ import annotations

import os
import platform
import socket
from typing import Any

import torch

from gcdoctor.model import hardware
from gcdoctor.backends import oom as oom_text
from gcdoctor.facts import Environment, OomInfo


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
        """Any out-of-memory error, in any backend's spelling (gcdoctor.backends.oom), also when
        it is the cause or context of the exception that reached us."""
        return _oom_in_chain(exc) is not None

    def oom_info(self, exc: BaseException, phase: str | None = None) -> OomInfo:
        """The OOM read and classified. Call it while the failed step's tensors are still alive
        (in the except block): the allocator's state then is the state at the failure."""
        cause = _oom_in_chain(exc) or exc
        text = str(cause)
        info = OomInfo(spelling=oom_text.spelling(type(cause).__name__, text) or "", phase=phase,
                       message=text.strip().splitlines()[0][:300] if text.strip() else type(cause).__name__)
        parsed = oom_text.parse_message(text)
        for name, value in parsed.items():
            setattr(info, name, value)
        info.source = "message" if parsed else ""
        self._fill_oom(info)
        if info.reserved_bytes is not None and info.allocated_bytes is not None:
            info.reserved_unallocated_bytes = max(info.reserved_bytes - info.allocated_bytes, 0)
        if info.headroom_bytes is None:
            info.headroom_bytes = oom_text.headroom(info.device_free_bytes, info.allowed_bytes, info.reserved_bytes)
        info.kind = oom_text.classify(info.request_bytes, info.reserved_unallocated_bytes, info.headroom_bytes)
        return info

    def _fill_oom(self, info: OomInfo) -> None:
        """Backends with allocator counters overwrite what the message said with exact bytes."""

    def release_workspaces(self) -> None:
        """Free library workspaces that live in the allocator between steps (cuBLAS), so memory is
        exactly back at the model after every measurement."""

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


def _oom_in_chain(exc: BaseException) -> BaseException | None:
    """The first OOM among `exc`, its cause and its context (a few links deep)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and len(seen) < 8:
        seen.add(id(cur))
        if isinstance(cur, (torch.OutOfMemoryError, MemoryError)):
            return cur
        if isinstance(cur, RuntimeError) and oom_text.spelling(type(cur).__name__, str(cur)):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None
