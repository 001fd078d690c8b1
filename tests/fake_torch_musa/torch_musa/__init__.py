"""A stand-in for torch_musa, for tests only: no MUSA hardware was ever available to gcdoctor.

Its module surface is the part of torch_musa's that gcdoctor calls, with torch_musa's own names
and signatures as docs/musa.md's checklist cites them (torch_musa/__init__.py, core/device.py,
core/memory.py, core/stream.py, csrc/core/MUSACachingAllocator.cpp). Nothing here is gcdoctor's.

Behaviour: the allocator is the CPU backend's storage counter (gcdoctor.backends.cpu): tensors
live on the CPU, their bytes are counted as the MUSA caching allocator would report them, and a
step that crosses the allowed bytes raises torch.OutOfMemoryError with the text torch_musa's
allocator writes (MUSACachingAllocator.cpp, DeviceCachingAllocator::malloc). The device's memory
is FAKE_MUSA_TOTAL_BYTES (default 16 GiB, an MTT S80's), of which FAKE_MUSA_CONTEXT_BYTES
(default 512 MiB) the driver and context hold outside the allocator; its name FAKE_MUSA_NAME.

What it does not have, on purpose: MUSAGraph / graph (so the launch probe's graph replay reads
"unavailable"), the allocator's history (memory._snapshot), MCCL. `install()` puts it in place
for one test (monkeypatch) without renaming the process's PrivateUse1 backend for good.
"""
from __future__ import annotations

import os
import time
import types
from typing import Any

import torch

from gcdoctor.backends.cpu import StorageCounter, _CountingMode

__version__ = "2.1.1+fake"
OutOfMemoryError = torch.OutOfMemoryError  # torch_musa/__init__.py: torch._C.OutOfMemoryError

GiB = 1 << 30
_DEFAULT_TOTAL = 16 * GiB


def _format_size(n: int) -> str:
    """c10's format_size: bytes below 1 KiB, else two decimals of KiB, MiB or GiB."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


class _Allocator(StorageCounter):
    """The CPU backend's counter, raising torch_musa's OOM at the allowed bytes."""

    def __init__(self) -> None:
        super().__init__()
        self.total = int(os.environ.get("FAKE_MUSA_TOTAL_BYTES", _DEFAULT_TOTAL))
        self.context = int(os.environ.get("FAKE_MUSA_CONTEXT_BYTES", 512 << 20))
        self.fraction: float | None = None
        self.reserved_peak = 0
        self.num_ooms = 0

    @property
    def allowed(self) -> int:
        """What the allocator may hold: the fraction of the total, and never more than the
        device has free beside the context."""
        room = self.total - self.context
        return min(int(self.fraction * self.total), room) if self.fraction is not None else room

    def add(self, t: torch.Tensor) -> int:
        """Count a new storage; one that does not fit is refused as the allocator refuses it:
        not counted, and the OOM raised for its bytes."""
        n = super().add(t)
        self.reserved_peak = max(self.reserved_peak, self.allocated)
        if n > 0 and self.allocated > self.allowed:
            self._free(t.untyped_storage()._cdata)
            self._oom(n)
        return n

    def check_limit(self, request: int = 0) -> None:
        if self.allocated > self.allowed:  # grown without a new storage (an in-place resize)
            self._oom(max(request, self.allocated - self.allowed))

    def _oom(self, request: int) -> None:
        """torch_musa's text (MUSACachingAllocator.cpp, DeviceCachingAllocator::malloc)."""
        before = self.allocated
        self.num_ooms += 1
        allowed_info = f"{_format_size(self.allowed)} allowed; " if self.fraction is not None else ""
        free = max(self.total - self.context - before, 0)
        raise torch.OutOfMemoryError(
            f"MUSA out of memory. Tried to allocate {_format_size(request)}. GPU 0 has a total capacity of "
            f"{_format_size(self.total)} of which {_format_size(free)} is free. {allowed_info}"
            f"Of the allocated memory {_format_size(before)} is allocated by PyTorch, and "
            f"{_format_size(0)} is reserved by PyTorch but unallocated. If reserved but unallocated memory "
            "is large try setting PYTORCH_MUSA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/musa.html#environment-variables)")


_alloc = _Allocator()


def counting_mode() -> _CountingMode:
    """The dispatch mode that counts every op's outputs into this device's allocator."""
    return _CountingMode(_alloc)


def track(tensors) -> None:
    for t in tensors:
        _alloc.add(t)


# -- core/device.py ----------------------------------------------------------------------------

class _MusaDeviceProperties:
    def __init__(self) -> None:
        self.name = os.environ.get("FAKE_MUSA_NAME", "MTT S80")
        self.major, self.minor = 2, 1
        self.multi_processor_count = 32
        self.total_memory = _alloc.total

    def __repr__(self) -> str:
        return f"_MusaDeviceProperties(name='{self.name}', total_memory={self.total_memory // (1 << 20)}MB)"


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: Any) -> None:
    pass


def synchronize(device: Any = None) -> None:
    pass


def get_device_properties(device: Any = None) -> _MusaDeviceProperties:
    return _MusaDeviceProperties()


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    p = get_device_properties(device)
    return p.major, p.minor


# -- core/stream.py ----------------------------------------------------------------------------

class Event:
    """musa events time on the device; here the host clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self._t: float | None = None

    def record(self, stream: Any = None) -> None:
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        return ((end._t or 0.0) - (self._t or 0.0)) * 1e3


# -- core/memory.py ----------------------------------------------------------------------------

def _stat(current: int, peak: int) -> dict[str, int]:
    return {"current": current, "peak": peak, "allocated": current, "freed": 0}


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    a = _alloc
    pools = {"all": None, "large_pool": None, "small_pool": None}
    return {
        "allocated_bytes": {k: _stat(a.allocated, a.peak) for k in pools},
        "reserved_bytes": {k: _stat(a.allocated, a.reserved_peak) for k in pools},
        "num_ooms": a.num_ooms, "num_alloc_retries": 0,
    }


def memory_stats(device: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def add(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                add(f"{prefix}.{k}" if prefix else k, v)
        else:
            out[prefix] = obj
    add("", memory_stats_as_nested_dict(device))
    return dict(sorted(out.items()))


def memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device: Any = None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device: Any = None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device: Any = None) -> None:
    _alloc.peak = _alloc.allocated
    _alloc.reserved_peak = _alloc.allocated


def empty_cache() -> None:
    pass


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return max(_alloc.total - _alloc.context - _alloc.allocated, 0), _alloc.total


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _alloc.fraction = fraction


memory = types.ModuleType("torch_musa.core.memory")
for _name in ("memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "max_memory_allocated",
              "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "empty_cache",
              "mem_get_info", "set_per_process_memory_fraction"):
    setattr(memory, _name, globals()[_name])


def install(monkeypatch, total_bytes: int | None = None, context_bytes: int | None = None) -> types.ModuleType:
    """Make `import torch_musa` and `torch.musa` this module for one test, as torch_musa's import
    does (torch.musa, torch.version.musa, ProfilerActivity.MUSA = PrivateUse1), with a fresh
    allocator of `total_bytes`, `context_bytes` of them outside it."""
    import sys
    global _alloc
    if total_bytes is not None:
        monkeypatch.setenv("FAKE_MUSA_TOTAL_BYTES", str(total_bytes))
    if context_bytes is not None:
        monkeypatch.setenv("FAKE_MUSA_CONTEXT_BYTES", str(context_bytes))
    _alloc = _Allocator()
    mod = sys.modules[__name__]
    monkeypatch.setitem(sys.modules, "torch_musa", mod)
    monkeypatch.setattr(torch, "musa", mod, raising=False)
    monkeypatch.setattr(torch.version, "musa", "4030", raising=False)
    activity = torch._C._profiler.ProfilerActivity
    monkeypatch.setattr(activity, "MUSA", activity.PrivateUse1, raising=False)
    return mod
