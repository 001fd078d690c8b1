"""A replay of PyTorch's CUDA caching allocator over the memory model's allocations (no torch).

The memory model (gcdoctor.model.memory) says which tensors a training step allocates and frees, in
order, to the byte. Whether a step fits is a further question: the caching allocator serves
those requests from segments it got from the driver, splits and caches blocks, and can fail
with gigabytes free but in pieces. This module replays the allocator's policy over the same
timeline, so the largest batch follows from derived terms (block rounding, segment sizes, the
device's capacity less the context) instead of a margin fitted on one run.

The policy is c10/cuda/CUDACachingAllocator.cpp's (main branch of 2025-2026; the constants have
not changed since PyTorch 1.x), for one stream and the default settings:

- sizes round up to 512 B; requests of at most 1 MiB come from the small pool, larger ones from
  the large pool;
- a request takes the smallest cached free block of its pool that holds it (best fit, ties by
  address); a block is split when the rest is at least 512 B (small pool) or more than 1 MiB
  (large pool);
- without one, a new segment: 2 MiB for small requests, 20 MiB for requests under 10 MiB, else the
  request rounded up to 2 MiB; it fails when reserved + segment exceeds what the device can give
  (or --memory-limit: set_per_process_memory_fraction caps reserved bytes);
- on failure the allocator frees every cached segment that is entirely free and tries once more;
  a second failure is the OOM;
- a freed block merges with free neighbours of its segment; segments go back to the driver only
  through that retry or empty_cache().

With `expandable_segments:True`, each pool has one segment of virtual address space (1 1/8 of
the device) that physical pages are mapped into on demand: 2 MiB pages for the small pool, 20 MiB
for the large pool. Blocks split whenever 512 B remain; a request without a fitting cached block
maps pages at the lowest address with enough free or unmapped space; the retry unmaps every page
that lies wholly inside a free block. What it cannot avoid is pages shared by a live block and a
free one.

What is not replayed: streams other than the default one (gcdoctor's step uses one), events of
cross-stream frees, CUDA graphs' private pools, max_split_size / roundup_power2_divisions /
garbage_collection_threshold settings (off by default), and the driver's own placement of
cudaMalloc segments (new segments get increasing addresses here).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, TypeGuard

from gcdoctor.model import memory as M
from gcdoctor.model.memory import _Timeline

KMIN_BLOCK = 512
KSMALL_SIZE = 1 << 20  # largest "small" request
KSMALL_BUFFER = 2 << 20  # small requests share 2 MiB segments
KMIN_LARGE_ALLOC = 10 << 20  # requests between 1 and 10 MiB get a 20 MiB segment
KLARGE_BUFFER = 20 << 20
KROUND_LARGE = 2 << 20  # larger requests round up to 2 MiB
EXPANDABLE_PAGE = {True: KSMALL_BUFFER, False: KLARGE_BUFFER}  # small pool?, page size
# where the caching allocator reads its settings (once, when the device initialises): torch's
# for CUDA, torch_musa's for MUSA (its expandable segments need MUSA 4.0 or later)
ALLOC_CONF_ENV = {"cuda": "PYTORCH_CUDA_ALLOC_CONF", "musa": "PYTORCH_MUSA_ALLOC_CONF"}


def alloc_conf_env(device_kind: str) -> str:
    """The allocator settings' environment variable on `device_kind` (CUDA's where unknown)."""
    return ALLOC_CONF_ENV.get(device_kind, ALLOC_CONF_ENV["cuda"])


def expandable_setting(device_kind: str) -> str:
    """The setting that turns expandable segments on, as a job's environment gives it."""
    return f"{alloc_conf_env(device_kind)}=expandable_segments:True"


def round_size(n: int) -> int:
    return KMIN_BLOCK if n < KMIN_BLOCK else KMIN_BLOCK * ((n + KMIN_BLOCK - 1) // KMIN_BLOCK)


def allocation_size(size: int) -> int:
    if size <= KSMALL_SIZE:
        return KSMALL_BUFFER
    if size < KMIN_LARGE_ALLOC:
        return KLARGE_BUFFER
    return KROUND_LARGE * ((size + KROUND_LARGE - 1) // KROUND_LARGE)


class Block:
    __slots__ = ("addr", "size", "allocated", "prev", "next", "small", "mapped", "segment")

    def __init__(self, addr: int, size: int, small: bool, segment: int, mapped: bool = True) -> None:
        self.addr, self.size, self.small, self.segment, self.mapped = addr, size, small, segment, mapped
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        state = "A" if self.allocated else ("F" if self.mapped else "U")
        return f"<{state} {self.addr:#x}+{self.size}>"


class SimOOM(Exception):
    """The replayed allocator could not serve a request: what the real one would raise."""

    def __init__(self, request: int, size: int, allocated: int, reserved: int, room: int, name: str = "") -> None:
        super().__init__(f"out of memory: tried to allocate {request} bytes for {name or 'a tensor'}")
        self.request, self.size, self.allocated, self.reserved, self.room, self.name = (
            request, size, allocated, reserved, room, name)
        self.where = ""  # filled by the caller: the step and phase

    @property
    def reserved_unallocated(self) -> int:
        return self.reserved - self.allocated


class _Pool:
    """Cached free (mapped) blocks by (size, address), and unmapped ones by address."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[tuple[int, int]] = []
        self.blocks: dict[int, Block] = {}
        self.unmapped: dict[int, Block] = {}

    def insert(self, b: Block) -> None:
        bisect.insort(self.keys, (b.size, b.addr))
        self.blocks[b.addr] = b

    def remove(self, b: Block) -> None:
        i = bisect.bisect_left(self.keys, (b.size, b.addr))
        if i < len(self.keys) and self.keys[i] == (b.size, b.addr):
            del self.keys[i]
            del self.blocks[b.addr]

    def first_at_least(self, size: int) -> int:
        return bisect.bisect_left(self.keys, (size, -1))


class CachingAllocator:
    """The replayed allocator. `capacity` is what the driver can give this process's allocator
    (the device's total memory less the CUDA context and other processes); `allowed` the
    --memory-limit (a cap on reserved bytes), if any."""

    def __init__(self, capacity: int, expandable: bool = False, allowed: int | None = None,
                 device_total: int | None = None) -> None:
        self.capacity = int(capacity)
        self.allowed = None if allowed is None else int(allowed)
        self.expandable = expandable
        self.device_total = int(device_total or capacity)
        self.pools = {True: _Pool(True), False: _Pool(False)}
        self.allocated = 0
        self.reserved = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.n_retries = 0
        self._next_addr = 1 << 40
        self._next_segment = 0
        self._expandable_segments: dict[bool, list[int]] = {True: [], False: []}

    # -- public --------------------------------------------------------------------------
    def malloc(self, nbytes: int, name: str = "") -> Block:
        size = round_size(nbytes)
        small = size <= KSMALL_SIZE
        pool = self.pools[small]
        alloc_size = allocation_size(size)
        block = self._get_free_block(pool, size)
        if block is None:
            block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                self.n_retries += 1
                self.release_cached()
                block = self._alloc_block(pool, size, alloc_size)
            if block is None:
                raise SimOOM(alloc_size, size, self.allocated, self.reserved, self.room(), name)
        if self._should_split(block, size):
            rest = Block(block.addr + size, block.size - size, small, block.segment, True)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.insert(rest)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        pool = self.pools[block.small]
        for other in (block.prev, block.next):
            self._merge(block, other, pool)
        pool.insert(block)

    def release_cached(self) -> None:
        """empty_cache(), and the retry before an OOM: free every wholly free segment (default)
        or unmap every page inside a free block (expandable)."""
        for pool in self.pools.values():
            for b in list(pool.blocks.values()):
                if self.expandable:
                    self._unmap(b, pool)
                elif b.prev is None and b.next is None:
                    pool.remove(b)
                    self.reserved -= b.size

    def room(self) -> int:
        """What the process could still get: the device's free memory, capped by the limit."""
        room = self.capacity - self.reserved
        if self.allowed is not None:
            room = min(room, self.allowed - self.reserved)
        return max(room, 0)

    def reset_peaks(self) -> None:
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    # -- internals -----------------------------------------------------------------------
    def _should_split(self, b: Block, size: int) -> bool:
        rest = b.size - size
        if b.small or self.expandable:
            return rest >= KMIN_BLOCK
        return rest > KSMALL_SIZE

    def _get_free_block(self, pool: _Pool, size: int) -> Block | None:
        i = pool.first_at_least(size)
        if i >= len(pool.keys):
            return None
        if self.expandable:
            # best fit counts a block at the mapped frontier as the size it can grow to, so
            # blocks in the middle are preferred (get_free_block's expandable_size)
            def grow(k: int) -> int:
                b = pool.blocks[pool.keys[k][1]]
                return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)
            while i + 1 < len(pool.keys) and grow(i + 1) < grow(i):
                i += 1
        b = pool.blocks[pool.keys[i][1]]
        pool.remove(b)
        return b

    def _limit_ok(self, nbytes: int) -> bool:
        return self.allowed is None or self.reserved + nbytes <= self.allowed

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int) -> Block | None:
        if not self._limit_ok(alloc_size):
            return None
        if self.expandable:
            return self._alloc_expandable(pool, size)
        if self.reserved + alloc_size > self.capacity:
            return None
        b = Block(self._next_addr, alloc_size, pool.small, self._next_segment)
        self._next_addr += alloc_size
        self._next_segment += 1
        self.reserved += alloc_size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return b

    def _merge(self, dst: Block, src: Block | None, pool: _Pool) -> None:
        """Join `src` into `dst` when it is free and mapped alike (try_merge_blocks)."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            pool.remove(src)
        else:
            pool.unmapped.pop(src.addr, None)
        if dst.prev is src:
            dst.addr, dst.prev = src.addr, src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    # expandable segments ----------------------------------------------------------------
    def _new_segment(self, pool: _Pool) -> Block:
        page = EXPANDABLE_PAGE[pool.small]
        total = self.device_total + self.device_total // 8
        size = page * ((total + page - 1) // page)
        addr = self._next_addr
        self._next_addr += size + page
        b = Block(addr, size, pool.small, self._next_segment, mapped=False)
        self._next_segment += 1
        pool.unmapped[addr] = b
        return b

    def _find_expandable(self, pool: _Pool, size: int) -> Block:
        def free(b: Block | None) -> TypeGuard[Block]:
            return b is not None and not b.allocated

        for addr in sorted(pool.unmapped):
            c = pool.unmapped[addr]
            if free(c.prev):
                c = c.prev  # a free mapped block just before the unmapped range joins it
            got = 0
            b: Block | None = c
            while got < size and free(b):
                got += b.size
                b = b.next
            if got >= size:
                return c
        return self._new_segment(pool)

    def _map(self, b: Block, size: int, pool: _Pool) -> bool:
        page = EXPANDABLE_PAGE[pool.small]
        mapped = page * ((size + page - 1) // page)
        if self.reserved + mapped > self.capacity:
            return False
        pool.unmapped.pop(b.addr, None)
        if mapped < b.size:
            rest = Block(b.addr + mapped, b.size - mapped, pool.small, b.segment, mapped=False)
            rest.prev, rest.next = b, b.next
            if b.next is not None:
                b.next.prev = rest
            b.next = rest
            b.size = mapped
            pool.unmapped[rest.addr] = rest
        b.mapped = True
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        for other in (b.prev, b.next):
            self._merge(b, other, pool)
        pool.insert(b)
        return True

    def _alloc_expandable(self, pool: _Pool, size: int) -> Block | None:
        c = self._find_expandable(pool, size)
        if not c.mapped and not self._map(c, min(c.size, size), pool):
            return None
        while c.size < size:
            nxt = c.next
            if nxt is None or not self._map(nxt, min(size - c.size, nxt.size), pool):
                return None
            c = nxt  # _map merged c into it
        pool.remove(c)
        return c

    def _unmap(self, b: Block, pool: _Pool) -> None:
        page = EXPANDABLE_PAGE[pool.small]
        begin = page * ((b.addr + page - 1) // page)
        end = page * ((b.addr + b.size) // page)
        if begin >= end:
            return
        pool.remove(b)
        if begin > b.addr:
            before = Block(b.addr, begin - b.addr, pool.small, b.segment)
            before.prev, before.next = b.prev, b
            if b.prev is not None:
                b.prev.next = before
            b.prev = before
            pool.insert(before)
        if end < b.addr + b.size:
            after = Block(end, b.addr + b.size - end, pool.small, b.segment)
            after.prev, after.next = b, b.next
            if b.next is not None:
                b.next.prev = after
            b.next = after
            pool.insert(after)
        b.addr, b.size, b.mapped = begin, end - begin, False
        self.reserved -= b.size
        for other in (b.prev, b.next):
            self._merge(b, other, pool)
        pool.unmapped[b.addr] = b


# ---------------------------------------------------------------------------------------
# a process's history: build the model, run measurements, release


@dataclass
class SimMeasurement:
    """What the replay says of one measurement (warm-up + measured steps) at one batch."""

    variant: str
    batch_size: int
    fits: bool = True
    oom: SimOOM | None = None
    oom_step: int | None = None  # 0: the warm-up step
    oom_where: str = ""
    peak_allocated: int = 0  # over the measured steps (after the warm-up)
    peak_reserved: int = 0
    steps: int = 0

    @property
    def oom_phase(self) -> str | None:
        if self.oom is None:
            return None
        w = self.oom_where
        if w.startswith("optimizer"):
            return "optimizer"
        if "backward" in w or "recompute" in w:
            return "backward"
        return "forward"


class _Live:
    """Names of live tensors -> their blocks, over the whole process."""

    def __init__(self, alloc: CachingAllocator) -> None:
        self.a = alloc
        self.blocks: dict[str, Block] = {}

    def alloc(self, name: str, nbytes: int) -> None:
        if nbytes <= 0:
            return
        if name in self.blocks:
            raise AssertionError(f"allocator replay: {name} allocated twice")
        self.blocks[name] = self.a.malloc(nbytes, name)

    def free(self, name: str) -> None:
        b = self.blocks.pop(name, None)
        if b is not None:
            self.a.free(b)

    def rename(self, old: str, new: str) -> None:
        if old in self.blocks:
            self.blocks[new] = self.blocks.pop(old)


class _Recorder(_Timeline):
    """A memory timeline (gcdoctor.model.memory._Timeline) whose allocations go to the replayed
    allocator; the first matmul of each thread makes its cuBLAS workspace, once per process
    (or per measurement, when gcdoctor releases them)."""

    def __init__(self, live: _Live, workspaces: dict[str, int], ws_names: set[str]) -> None:
        super().__init__()
        self.sink, self.workspaces, self.ws_names = live, workspaces, ws_names

    def alloc(self, name: str, nbytes: int, cat: str) -> None:
        if nbytes > 0:
            self.sink.alloc(name, nbytes)
        super().alloc(name, nbytes, cat)

    def free(self, *names: str) -> None:
        for n in names:
            if n in self.live:
                self.sink.free(n)
        super().free(*names)

    def rename(self, old: str, new: str) -> None:
        self.sink.rename(old, new)
        super().rename(old, new)

    def hook(self, what: str) -> None:
        name = "ws:" + what
        if name in self.workspaces and name not in self.ws_names:
            self.sink.alloc(name, self.workspaces[name])
            self.ws_names.add(name)


_STATES = ("opt_step[", "opt_m[", "opt_v[", "master[")  # made by the first step, kept until release


def _grad_names(spec: Any) -> list[str]:
    """The memory timeline's names of the parameters' grads, in model.parameters() order
    (zero_grad(set_to_none=True) drops them in that order)."""
    names = ["embed.grad"]
    for l in range(spec.n_layers):
        p = f"L{l}."
        names += [p + "q.grad", p + "k.grad", p + "v.grad", p + "o.grad", p + "gate.grad", p + "up.grad",
                  p + "down.grad", p + "norm1.grad", p + "norm2.grad"]
    names.append("fnorm.grad")
    if not spec.tie_word_embeddings:
        names.append("head.grad")
    return names


def replay(spec: Any, seq_len: int, plan: list[tuple], capacity: int, *, dtype: str = "bf16",
           optimizer: str = "adamw", expandable: bool = False, allowed: int | None = None,
           device_total: int | None = None, workspaces_persist: bool = False,
           master_weights: bool = False) -> list[SimMeasurement]:
    """Replay a process: `plan` is a list of ("build", variant) — a model built on the device
    (its parameters, tensor by tensor) —, ("measure", variant, batch, steps) — gcdoctor's
    measurement: the batch, `steps` training steps of which the first is the warm-up, then the
    release of the optimizer states and the batch —, ("drop",) — the model deleted — and
    ("empty_cache",). Each measurement starts with gcdoctor's free_memory (empty_cache).

    `workspaces_persist`: the cuBLAS workspaces live from their first matmul to the end of the
    process (gcdoctor before it released them after each measurement, and any training job)."""
    alloc = CachingAllocator(capacity, expandable, allowed, device_total)
    live = _Live(alloc)
    sizes = M.param_tensor_bytes(spec, dtype)
    grads = _grad_names(spec)
    results: list[SimMeasurement] = []
    ws_names: set[str] = set()
    for item in plan:
        kind = item[0]
        if kind == "build":
            d = M._dims(spec, M.Workload(1, seq_len, dtype, optimizer))
            for i, n in enumerate(sizes):
                live.alloc(f"params[{i}]", n)
            for i in range(2):
                live.alloc(f"buffers[{i}]", 4 * (d.hd // 2))
        elif kind == "drop":
            for name in [n for n in live.blocks if n.startswith(("params[", "buffers["))]:
                live.free(name)
        elif kind == "empty_cache":
            alloc.release_cached()
        elif kind == "measure":
            _, variant, batch, steps = item
            results.append(_measure(spec, seq_len, dtype, optimizer, variant, batch, steps, live, sizes, grads,
                                    ws_names, workspaces_persist, master_weights))
        else:
            raise ValueError(f"allocator replay: unknown plan item {item!r}")
    return results


def _measure(spec: Any, seq_len: int, dtype: str, optimizer: str, variant: str, batch: int, steps: int,
             live: _Live, sizes: list[int], grads: list[str], ws_names: set[str],
             workspaces_persist: bool, master_weights: bool = False) -> SimMeasurement:

    alloc = live.a
    w = M.Workload(batch, seq_len, dtype, optimizer, variant == "gc", "cuda", master_weights)
    d = M._dims(spec, w)
    sem = M._semantics(d, "cuda")
    ws = dict(zip(("ws:matmul:forward", "ws:matmul:backward"), sem.blas_workspaces))
    out = SimMeasurement(variant, batch)
    alloc.release_cached()  # free_memory() before each measurement
    before = set(live.blocks)
    try:
        live.alloc("ids", 8 * d.T)
        for i in range(steps):
            tl = _Recorder(live, ws, ws_names)
            if i == 1:
                alloc.reset_peaks()
            try:
                M._step(tl, spec, d, sem, w, sizes, first=i == 0)
            except SimOOM as exc:
                exc.where = tl.where
                out.fits, out.oom, out.oom_step, out.oom_where = False, exc, i, tl.where
                break
            for name in grads:  # zero_grad(set_to_none=True)
                live.free(name)
            for name in [n for n in tl.live if n in live.blocks and not n.startswith(_STATES)]:
                live.free(name)  # what the step's locals held
            out.steps = i + 1
        if out.fits:
            out.peak_allocated, out.peak_reserved = alloc.peak_allocated, alloc.peak_reserved
    except SimOOM as exc:  # the batch itself
        out.fits, out.oom, out.oom_step, out.oom_where = False, exc, 0, "setup"
    # release: everything the measurement made except persisting workspaces
    keep = before | (ws_names if workspaces_persist else set())
    for name in [n for n in live.blocks if n not in keep]:
        live.free(name)
    if not workspaces_persist:
        ws_names.clear()
    alloc.release_cached()
    return out
