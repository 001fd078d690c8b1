"""Shared code of GPU backends whose torch module mirrors `torch.cuda` (CUDA, MUSA)."""
from __future__ import annotations

from typing import Any

from gcdoctor.backends.base import Backend
from gcdoctor.facts import OomInfo


class AcceleratorBackend(Backend):
    """Backed by a torch device module (`torch.cuda`, `torch.musa`) with the caching allocator."""

    def __init__(self, module: Any, index: int = 0) -> None:
        super().__init__(index)
        self.mod = module
        self._limit: int | None = None

    def synchronize(self) -> None:
        self.mod.synchronize(self.index)

    def reset_peak(self) -> None:
        self.mod.reset_peak_memory_stats(self.index)

    def memory_allocated(self) -> int | None:
        return int(self.mod.memory_allocated(self.index))

    def max_memory_allocated(self) -> int | None:
        return int(self.mod.max_memory_allocated(self.index))

    def memory_reserved(self) -> int | None:
        return int(self.mod.memory_reserved(self.index))

    def max_memory_reserved(self) -> int | None:
        return int(self.mod.max_memory_reserved(self.index))

    def total_memory(self) -> int | None:
        return int(self.mod.get_device_properties(self.index).total_memory)

    def empty_cache(self) -> None:
        self.mod.empty_cache()

    def set_memory_limit(self, limit_bytes: int | None) -> None:
        total = self.total_memory() or 0
        fraction = 1.0 if not limit_bytes else min(1.0, limit_bytes / total)
        self.mod.set_per_process_memory_fraction(fraction, self.index)
        self._limit = limit_bytes

    def memory_limit(self) -> int | None:
        return self._limit

    def device_name(self) -> str:
        return str(self.mod.get_device_name(self.index))

    def mem_get_info(self) -> tuple[int, int] | None:
        """(free, total) bytes as the driver reports them, or None where the module lacks it."""
        try:
            free, total = self.mod.mem_get_info(self.index)
            return int(free), int(total)
        except Exception:  # noqa: BLE001 - not every device module has it
            return None

    def non_allocator_bytes(self) -> int | None:
        """Device memory this process holds outside the caching allocator (the context, loaded
        kernels, library handles) plus other processes' use: total - free - reserved."""
        info = self.mem_get_info()
        reserved = self.memory_reserved()
        if info is None or reserved is None:
            return None
        free, total = info
        return max(total - free - reserved, 0)

    def _last_oom_observation(self) -> tuple[int, int, int] | None:
        """(request, allowed or total, device free) from the allocator's OOM observer, if any."""
        return None

    def _fill_oom(self, info: OomInfo) -> None:
        """The allocator's exact counters at the failure (the failed step's tensors are still
        alive while the exception is handled), the driver's free memory, and the exact request
        where the allocator's OOM observer reported it."""
        try:
            info.allocated_bytes = self.memory_allocated()
            info.reserved_bytes = self.memory_reserved()
        except Exception:  # noqa: BLE001 - a broken context after the OOM: keep the message's numbers
            return
        mem = self.mem_get_info()
        if mem is not None:
            info.device_free_bytes, info.device_total_bytes = mem
        info.allowed_bytes = self._limit or None
        seen = self._last_oom_observation()
        if seen is not None:
            info.request_bytes = seen[0]
        info.source = "allocator+message" if info.source else "allocator"
