"""The caching-allocator replay's policy on hand-made request sequences (the constants and
branches of c10/cuda/CUDACachingAllocator.cpp it reproduces)."""
from __future__ import annotations

import pytest

from gcdoctor.model import allocator as A
from gcdoctor.backends import oom as O
from gcdoctor.model.registry import load_spec

MiB = 2**20


def test_rounding_pools_and_segment_sizes():
    a = A.CachingAllocator(10**12)
    small = a.malloc(100)
    assert (small.size, small.small, a.reserved) == (512, True, 2 * MiB)  # 512 B block of a 2 MiB segment
    for _ in range(100):
        a.malloc(1024)
    assert a.reserved == 2 * MiB  # 100 KiB more still fit the one small segment
    mid = a.malloc(5 * MiB)  # 1-10 MiB: a 20 MiB segment, split (15 MiB left > 1 MiB)
    assert (mid.size, a.reserved) == (5 * MiB, 22 * MiB)
    reuse = a.malloc(12 * MiB)  # best fit: the 15 MiB remainder, split again (3 MiB left)
    assert a.reserved == 22 * MiB and reuse.addr == mid.addr + 5 * MiB
    big = a.malloc(11 * MiB + 1)  # >= 10 MiB: a 12 MiB segment; the 1 MiB - 512 B left stays in the block
    assert a.reserved == 22 * MiB + 12 * MiB and big.size == 12 * MiB


def test_a_remainder_of_one_mib_or_less_stays_in_the_large_block():
    a = A.CachingAllocator(10**12)
    x = a.malloc(20 * MiB)
    a.free(x)
    y = a.malloc(19 * MiB + 512)  # 512 KiB left: not split, the block keeps its 20 MiB
    assert y.size == 20 * MiB and a.allocated == 20 * MiB


def test_the_retry_frees_whole_cached_segments_before_an_oom():
    a = A.CachingAllocator(100 * MiB)
    x, y = a.malloc(40 * MiB), a.malloc(40 * MiB)
    a.free(x)  # a whole free segment, cached
    z = a.malloc(50 * MiB)  # 80 + 50 > 100: the retry releases x's segment, then it fits
    assert a.reserved == 90 * MiB and a.n_retries == 1
    del y, z


def _fragmented(a: A.CachingAllocator):
    x = a.malloc(60 * MiB)
    a.free(x)
    y = a.malloc(30 * MiB)  # the cached 60 MiB block, split
    z = a.malloc(30 * MiB)  # the rest of it
    a.free(y)  # 30 MiB free, but in a segment z still uses
    return z


def test_a_split_segment_cannot_be_returned_so_the_request_fails_as_fragmentation():
    a = A.CachingAllocator(100 * MiB)
    _fragmented(a)
    with pytest.raises(A.SimOOM) as err:
        a.malloc(45 * MiB)
    e = err.value
    assert (e.request, e.reserved, e.reserved_unallocated, e.room) == (46 * MiB, 60 * MiB, 30 * MiB, 40 * MiB)
    # neither the cache (30) nor the device (40) holds 46 MiB, both together do
    assert O.classify(e.request, e.reserved_unallocated, e.room) == "mixed"


def test_expandable_segments_unmap_the_free_pages_and_the_same_request_fits():
    a = A.CachingAllocator(100 * MiB, expandable=True)
    _fragmented(a)
    a.malloc(45 * MiB)  # the retry unmaps the 20 MiB page inside the freed block, then maps 3 pages
    assert a.reserved == 100 * MiB and a.n_retries == 1


def test_the_memory_limit_caps_reserved_bytes():
    a = A.CachingAllocator(10**12, allowed=64 * MiB)
    a.malloc(40 * MiB)
    with pytest.raises(A.SimOOM) as err:
        a.malloc(30 * MiB)
    assert err.value.room == 24 * MiB


def test_a_replayed_step_leaves_only_the_model_behind():
    spec = load_spec("tiny-llama")
    sim = A.replay(spec, 128, [("build", "gc"), ("measure", "gc", 2, 3), ("measure", "gc", 4, 3)], 10**12)
    assert all(r.fits and r.steps == 3 for r in sim)
    assert sim[1].peak_allocated > sim[0].peak_allocated
    # a fresh process at the same batch: reserved bytes follow from the layout, the allocated peak
    # is the memory model's (rounded to 512 B per tensor)
    from gcdoctor.model import fitting as F
    from gcdoctor.model import memory as M
    w = M.Workload(4, 128, gc=True)
    fresh = F.fit(spec, w, 10**12)
    assert fresh.peak_allocated >= M.predict(spec, w).peak_bytes
    assert fresh.peak_allocated - M.predict(spec, w).peak_bytes < 2 * MiB
