"""Shared code of GPU backends whose torch module mirrors `torch.cuda` (CUDA, MUSA)."""
from __future__ import annotations

from typing import Any

from gcdoctor.backends.base import Backend


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
