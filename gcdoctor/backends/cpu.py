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
from gcdoctor.facts import OomInfo


class StorageCounter:
    """Live bytes of tracked tensor storages, their peak, and an optional limit."""

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.refs: dict[int, Any] = {}
        self.allocated = 0
        self.peak = 0
        self.limit: int | None = None
        self.last_request = 0  # bytes the op that crossed the limit allocated
        self._lock = threading.Lock()

    def add(self, t: torch.Tensor) -> int:
        """Count `t`'s storage if it is new; return the bytes added."""
        if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.is_sparse:
            return 0
        try:
            st = t.untyped_storage()
            n = st.nbytes()
            key = st._cdata  # the storage itself: stable when it is resized in place (FSDP2 does)
        except (RuntimeError, NotImplementedError, AttributeError):  # no storage, or an invalid one
            return 0
        if key in self.live:
            if self.live[key] != n:
                return self._resize(key, n)
            return 0
        if n == 0:
            return 0

        def freed(_ref: Any) -> None:  # the storage was collected
            self._free(key)

        with self._lock:
            self.live[key] = n
            self.allocated += n
            self.peak = max(self.peak, self.allocated)
            self.refs[key] = weakref.ref(st, freed)
        return n

    def resized(self, t: torch.Tensor) -> None:
        """A tracked storage changed size in place (`untyped_storage().resize_`, which no dispatch mode
        sees): FSDP2 frees and re-allocates gathered parameters that way. Callers that resize say so."""
        self.add(t)

    def _resize(self, key: int, n: int) -> int:
        """The bytes a storage grew by (negative when it shrank)."""
        with self._lock:
            grown = n - self.live[key]
            self.allocated += grown
            self.live[key] = n
            self.peak = max(self.peak, self.allocated)
        return grown

    def _free(self, key: int) -> None:
        with self._lock:
            n = self.live.pop(key, 0)
            self.refs.pop(key, None)
            self.allocated -= n

    def check_limit(self, request: int = 0) -> None:
        if self.limit is not None and self.allocated > self.limit:
            self.last_request = request
            raise torch.OutOfMemoryError(
                f"CPU out of memory: gcdoctor allocation limit {self.limit} bytes exceeded "
                f"({self.allocated} bytes live). Tried to allocate {request} bytes")


class _CountingMode(TorchDispatchMode):
    def __init__(self, counter: StorageCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        added = 0
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                added += self.counter.add(t)
        self.counter.check_limit(added)
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

    def _fill_oom(self, info: OomInfo) -> None:
        """No caching allocator: nothing is held back, so an OOM here is capacity. Under the
        counter's limit the request is the failing op's outputs, and the headroom what the limit
        left before it; DefaultCPUAllocator's own failures state their request."""
        import psutil
        c = self.counter
        if info.spelling == "caching allocator" and "gcdoctor allocation limit" in info.message:
            info.request_bytes = c.last_request
            info.allocated_bytes = c.allocated - c.last_request
            info.allowed_bytes = c.limit
            info.headroom_bytes = max((c.limit or 0) - info.allocated_bytes, 0)
        else:
            info.allocated_bytes = c.allocated
            info.headroom_bytes = int(psutil.virtual_memory().available)
        info.source = "allocator+message" if info.source else "allocator"
