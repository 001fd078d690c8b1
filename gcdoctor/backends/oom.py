"""Out-of-memory errors: recognised in every spelling of every backend, read, and classified.

No torch here (the backends pass type names and texts), so the recognition and the reading of
an OOM message are testable anywhere and usable on recorded messages.

Spellings (each seen in a real message or in the allocator's source):

- PyTorch's caching allocators raise `torch.OutOfMemoryError` ("CUDA out of memory. Tried to
  allocate 5.87 GiB. GPU 0 has a total capacity of 139.80 GiB of which 5.84 GiB is free. ...";
  torch_musa: "MUSA out of memory"; ROCm builds "HIP out of memory"; "XPU out of memory",
  "MPS backend out of memory"). Older releases wrote "(GPU 0; 79.25 GiB total capacity; 27.98 GiB
  already allocated; 24.10 GiB free; 31.90 GiB reserved in total by PyTorch)".
- The CPU allocator raises a plain RuntimeError: "[enforce fail at alloc_cpu.cpp:127] err == 0.
  DefaultCPUAllocator: can't allocate memory: you tried to allocate 1125899906842624 bytes.
  Error code 12 (Cannot allocate memory)" (torch 2.13, measured).
- Runtime and library errors outside the caching allocator: "CUDA error: out of memory",
  "CUBLAS_STATUS_ALLOC_FAILED" (cuBLAS handle or workspace), "CUDNN_STATUS_ALLOC_FAILED",
  "hipErrorOutOfMemory", MUSA's "MUBLAS_STATUS_ALLOC_FAILED", "std::bad_alloc", and Python's
  own MemoryError.
- gcdoctor's CPU allocation limit raises `torch.OutOfMemoryError` "CPU out of memory: ...".

Classification (`classify`): with R the failing request, U the bytes the allocator held but had
not handed out (reserved but unallocated) and F what the process could still get from the device
(the driver's free memory, or what --memory-limit leaves):

- "fragmentation": U >= R: the allocator's own cached blocks held enough bytes, none in one piece;
- "mixed": U < R <= U + F: cache and free memory together held the bytes, not as one block (the
  caching allocator cannot join a cached block with new device memory);
- "capacity": U + F < R: allocated + request exceed what the process can have; only less memory
  helps, no allocator setting.

`expandable_segments:True` addresses the first two (it unmaps free pages and maps them where the
request needs them); the third needs a smaller peak.
"""
from __future__ import annotations

import re

KiB, MiB, GiB, TiB = 2 ** 10, 2 ** 20, 2 ** 30, 2 ** 40

# (name, pattern) in the order tried: the first that matches names the spelling.
SPELLINGS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(p, re.IGNORECASE)) for name, p in (
    ("caching allocator", r"\b(CUDA|MUSA|HIP|XPU|NPU|MTIA|CPU) out of memory\b"),
    ("MPS allocator", r"\bMPS backend out of memory\b"),
    ("CPU allocator", r"DefaultCPUAllocator: can't allocate memory"),
    ("runtime", r"\b(CUDA|MUSA|HIP) error: out of memory\b|\bhipErrorOutOfMemory\b|\bcudaErrorMemoryAllocation\b"),
    ("BLAS", r"\b(CU|MU|HIP|ROC)BLAS_STATUS_ALLOC_FAILED\b"),
    ("DNN", r"\b(CUDNN|MUDNN|MIOPEN)_STATUS_ALLOC_FAILED\b"),
    ("host", r"std::bad_alloc"),
    ("generic", r"\bout of memory\b"),
))

_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*(bytes|B|KiB|MiB|GiB|TiB)"
_UNIT = {"bytes": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_FIELDS = (
    ("request_bytes", rf"[Tt]ried to allocate {_SIZE}"),
    ("device_total_bytes", rf"total capac?ity of {_SIZE}"),
    ("device_free_bytes", rf"of which {_SIZE} is free"),
    ("process_in_use_bytes", rf"this process has {_SIZE} memory in use"),
    ("allowed_bytes", rf"{_SIZE} allowed;"),
    ("allocated_bytes", rf"Of the allocated memory {_SIZE} is allocated by PyTorch"),
    ("reserved_unallocated_bytes", rf"and {_SIZE} is reserved by PyTorch but unallocated"),
    # the message of torch < 2.2
    ("device_total_bytes", rf"; {_SIZE} total capac?ity;"),
    ("allocated_bytes", rf"; {_SIZE} already allocated;"),
    ("device_free_bytes", rf"; {_SIZE} free;"),
    ("reserved_bytes", rf"; {_SIZE} reserved in total by PyTorch"),
    # DefaultCPUAllocator and gcdoctor's CPU limit
    ("request_bytes", r"you tried to allocate ([0-9]+) (bytes)"),
    ("allowed_bytes", r"allocation limit ([0-9]+) (bytes)"),
)
_FIELD_RES = tuple((name, re.compile(p)) for name, p in _FIELDS)

# The precision of a size in the message: torch prints two decimals of the unit (c10's
# format_size), so a 5.87 GiB reading is good to +-5 MiB.
ROUNDING_NOTE = "sizes read from the message are rounded to two decimals of their unit"


def spelling(type_name: str, text: str) -> str | None:
    """Which OOM spelling `text` (an exception's message) is, or None when it is no OOM.

    `type_name` is the exception's class name: OutOfMemoryError and MemoryError are OOMs
    whatever they say."""
    for name, pattern in SPELLINGS:
        if pattern.search(text or ""):
            return name
    if type_name in ("OutOfMemoryError", "MemoryError"):
        return "python MemoryError" if type_name == "MemoryError" else "caching allocator"
    return None


def parse_message(text: str) -> dict[str, int]:
    """The byte counts an OOM message states (request, total, free, in use, allowed, allocated,
    reserved-but-unallocated), as ints; fields the message lacks are absent."""
    out: dict[str, int] = {}
    for name, pattern in _FIELD_RES:
        if name in out:
            continue
        m = pattern.search(text or "")
        if m:
            out[name] = int(round(float(m.group(1)) * _UNIT[m.group(2).lower()]))
    if "reserved_bytes" in out and "allocated_bytes" in out and "reserved_unallocated_bytes" not in out:
        out["reserved_unallocated_bytes"] = max(out["reserved_bytes"] - out["allocated_bytes"], 0)
    return out


def headroom(device_free: int | None, allowed: int | None, reserved: int | None) -> int | None:
    """What the process could still get: the driver's free memory, capped by --memory-limit
    (the allocator refuses a new segment once reserved + segment > allowed)."""
    room = device_free
    if allowed is not None and reserved is not None:
        cap = max(allowed - reserved, 0)
        room = cap if room is None else min(room, cap)
    return room


def classify(request: int | None, reserved_unallocated: int | None, room: int | None) -> str:
    """fragmentation | mixed | capacity | unknown (module docstring)."""
    if request is None:
        return "unknown"
    if reserved_unallocated is not None and reserved_unallocated >= request:
        return "fragmentation"
    if reserved_unallocated is not None and room is not None:
        return "mixed" if reserved_unallocated + room >= request else "capacity"
    if room is not None and reserved_unallocated is None:
        # no caching allocator (the CPU): nothing is held back, so only capacity can fail
        return "capacity"
    return "unknown"


KIND_TEXT = {
    "fragmentation": "fragmentation: the allocator's cached free blocks held the bytes, none in one piece",
    "mixed": "fragmentation: cached and free device memory together held the bytes, not as one block",
    "capacity": "capacity: allocated plus the request exceed what the process can have",
    "unknown": "not classified: the failing request or the allocator's state is unknown",
}
