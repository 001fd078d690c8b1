"""CPU backend. PyTorch keeps no allocator statistics on the CPU, so this backend counts tensor
storages itself (a dispatch mode that sees every op's outputs and a weak reference that sees each
storage freed). That gives exact allocated/peak bytes comparable to `max_memory_allocated`, and
an allocation limit for testing the OOM search without a GPU.
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from gcdoctor.backends.base import Backend


class StorageCounter:
    """Live bytes of tracked tensor storages, their peak, and an optional limit."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.refs: dict[int, Any] = {}
        self.allocated = 0
        self.peak = 0
        self.limit: int | None = None
        self._lock = threading.Lock()

    def add(self, t: torch.Tensor) -> None:
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_sparse:
            return
        try:
            st = t.untyped_storage()
            n = st.nbytes()
            key = st._cdata  # the storage itself: stable when it is resized in place (FSDP2 does)
        except (RuntimeError, NotImplementedError, AttributeError):  # no storage, or an invalid one
            return
        if key in self.live:
            if self.live[key] != n:
                self._resize(key, n)
            return
        if n == 0:
            return
        with self._lock:
            self.live[key] = n
            self.allocated += n
            self.peak = max(self.peak, self.allocated)
            self.refs[key] = weakref.ref(st, lambda _r, key=key: self._free(key))

    def resized(self, t: torch.Tensor) -> None:
        """A tracked storage changed size in place (`untyped_storage().resize_`, which no dispatch mode
        sees): FSDP2 frees and re-allocates gathered parameters that way. Callers that resize say so."""
        self.add(t)

    def _resize(self, key: int, n: int) -> None:
        with self._lock:
            self.allocated += n - self.live[key]
            self.live[key] = n
            self.peak = max(self.peak, self.allocated)

    def _free(self, key: int) -> None:
        with self._lock:
            n = self.live.pop(key, 0)
            self.refs.pop(key, None)
            self.allocated -= n

    def check_limit(self) -> None:
        if self.limit is not None and self.allocated > self.limit:
            raise torch.OutOfMemoryError(
                f"CPU out of memory: gcdoctor allocation limit {self.limit} bytes exceeded "
                f"({self.allocated} bytes live)")


class _CountingMode(TorchDispatchMode):
    def __init__(self, counter: StorageCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.counter.add(t)
        self.counter.check_limit()
        return out


class CpuBackend(Backend):
    kind = "cpu"

    def __init__(self, index: int = 0) -> None:
        super().__init__(0)
        self.counter = StorageCounter()
        self._user_limit: int | None = None
        # A safety net, not a setting: an absurd batch must end as a clean OOM result, not by
        # swapping the machine to death or the kernel's OOM killer.
        import psutil
        self.counter.limit = int(0.5 * psutil.virtual_memory().available)

    @contextlib.contextmanager
    def tracking(self, *tensors_alive: torch.Tensor):
        """Count allocations made inside; tensors that already exist are registered first."""
        for t in tensors_alive:
            self.counter.add(t)
        with _CountingMode(self.counter):
            yield self.counter

    def track(self, tensors) -> None:
        for t in tensors:
            self.counter.add(t)

    def reset_peak(self) -> None:
        self.counter.peak = self.counter.allocated

    def memory_allocated(self) -> int | None:
        return self.counter.allocated

    def max_memory_allocated(self) -> int | None:
        return self.counter.peak

    def set_memory_limit(self, limit_bytes: int | None) -> None:
        self._user_limit = limit_bytes
        if limit_bytes is not None:
            self.counter.limit = limit_bytes

    def memory_limit(self) -> int | None:
        return self._user_limit

    def total_memory(self) -> int | None:
        """The injected limit plays the device's memory; without one the CPU has no such wall."""
        return self._user_limit
