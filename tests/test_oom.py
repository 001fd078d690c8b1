"""Out-of-memory errors: every backend's spelling recognised, the message read, the failure
classified (fragmentation or capacity), and memory exactly back at the baseline afterwards."""
from __future__ import annotations

import pytest
import torch

from gcdoctor.backends import oom as O
from gcdoctor.backends.cpu import CpuBackend
from gcdoctor.config import RunConfig
from gcdoctor.run.session import ProbeContext, Session

GiB, MiB = 2**30, 2**20

# The four OOMs of samples/h200-llama3-8b-diagnose, whole (facts.json keeps the first 300
# characters; the numbers are those of docs/memory-model.md's table).
_TAIL = (" If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
         "expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  "
         "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def _h200(req, free, in_use, alloc, unalloc):
    return (f"CUDA out of memory. Tried to allocate {req}. GPU 0 has a total capacity of 139.80 GiB of which "
            f"{free} is free. Including non-PyTorch memory, this process has {in_use} memory in use. Of the "
            f"allocated memory {alloc} is allocated by PyTorch, and {unalloc} is reserved by PyTorch but "
            f"unallocated." + _TAIL)


H200_OOMS = {  # point: (message, kind)
    "no_gc 3": (_h200("5.87 GiB", "5.84 GiB", "133.95 GiB", "130.62 GiB", "2.59 GiB"), "mixed"),
    "no_gc 4": (_h200("448.00 MiB", "137.12 MiB", "139.66 GiB", "130.68 GiB", "8.24 GiB"), "fragmentation"),
    "gc 12": (_h200("23.48 GiB", "22.01 GiB", "117.79 GiB", "93.66 GiB", "23.37 GiB"), "mixed"),
    "gc 16": (_h200("31.31 GiB", "8.95 GiB", "130.84 GiB", "109.91 GiB", "20.18 GiB"), "capacity"),
}


@pytest.mark.parametrize("point", sorted(H200_OOMS))
def test_the_recorded_h200_ooms_are_read_and_classified(point):
    text, kind = H200_OOMS[point]
    assert O.spelling("OutOfMemoryError", text) == "caching allocator"
    f = O.parse_message(text)
    assert f["device_total_bytes"] == round(139.80 * GiB)
    assert set(f) == {"request_bytes", "device_total_bytes", "device_free_bytes", "process_in_use_bytes",
                      "allocated_bytes", "reserved_unallocated_bytes"}
    room = O.headroom(f["device_free_bytes"], None, None)
    assert O.classify(f["request_bytes"], f["reserved_unallocated_bytes"], room) == kind


def test_a_448_mib_request_with_8_gib_cached_is_fragmentation():
    f = O.parse_message(H200_OOMS["no_gc 4"][0])
    assert f["request_bytes"] == 448 * MiB and f["reserved_unallocated_bytes"] == round(8.24 * GiB)


@pytest.mark.parametrize("type_name,text,expected", [
    ("OutOfMemoryError", "MUSA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 47.98 GiB",
     "caching allocator"),
    ("OutOfMemoryError", "HIP out of memory. Tried to allocate 20.00 MiB", "caching allocator"),
    ("RuntimeError", "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                     "you tried to allocate 1125899906842624 bytes. Error code 12 (Cannot allocate memory)",
     "CPU allocator"),
    ("AcceleratorError", "CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", "runtime"),
    ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "BLAS"),
    ("RuntimeError", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "DNN"),
    ("RuntimeError", "MPS backend out of memory (MPS allocated: 17.00 GB, other allocations: 1.00 GB)",
     "MPS allocator"),
    ("RuntimeError", "std::bad_alloc", "host"),
    ("MemoryError", "", "python MemoryError"),
    ("OutOfMemoryError", "CPU out of memory: gcdoctor allocation limit 100 bytes exceeded", "caching allocator"),
    ("RuntimeError", "Expected all tensors to be on the same device", None),
    ("ValueError", "batch size must be positive", None),
])
def test_every_spelling_is_recognised_and_nothing_else(type_name, text, expected):
    assert O.spelling(type_name, text) == expected


def test_old_and_limited_messages_are_read():
    old = ("CUDA out of memory. Tried to allocate 30.00 GiB (GPU 0; 79.25 GiB total capacity; 27.98 GiB already "
           "allocated; 24.10 GiB free; 31.90 GiB reserved in total by PyTorch)")
    f = O.parse_message(old)
    assert f["request_bytes"] == 30 * GiB and f["allocated_bytes"] == round(27.98 * GiB)
    assert f["reserved_unallocated_bytes"] == round(31.90 * GiB) - round(27.98 * GiB)
    limited = ("CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
               "90.12 GiB is free. Including non-PyTorch memory, this process has 44.80 GiB memory in use. 44.70 GiB "
               "allowed; Of the allocated memory 44.00 GiB is allocated by PyTorch, and 200.00 MiB is reserved by "
               "PyTorch but unallocated.")
    f = O.parse_message(limited)
    assert f["allowed_bytes"] == round(44.70 * GiB)
    # the limit, not the device's 90 GiB of free memory, is what is left
    room = O.headroom(f["device_free_bytes"], f["allowed_bytes"], f["allocated_bytes"] + f["reserved_unallocated_bytes"])
    assert room == round(44.70 * GiB) - round(44.00 * GiB) - 200 * MiB
    assert O.classify(f["request_bytes"], f["reserved_unallocated_bytes"], room) == "capacity"


def test_a_real_cpu_allocator_failure_is_an_oom_with_its_request():
    b = CpuBackend()
    with pytest.raises(RuntimeError) as err:
        torch.empty(2**50, dtype=torch.uint8)
    assert not isinstance(err.value, torch.OutOfMemoryError)  # torch raises a plain RuntimeError
    assert b.is_oom(err.value)
    info = b.oom_info(err.value, "setup")
    assert (info.spelling, info.request_bytes, info.kind, info.phase) == ("CPU allocator", 2**50, "capacity", "setup")
    # wrapped, as a probe might re-raise it, it is still recognised
    try:
        try:
            raise err.value
        except RuntimeError as inner:
            raise ValueError("the step failed") from inner
    except ValueError as outer:
        assert b.is_oom(outer)
    assert not b.is_oom(RuntimeError("shape mismatch"))


def test_the_cpu_limit_says_what_the_failing_op_asked_for():
    b = CpuBackend()
    b.set_memory_limit(4096)
    x = torch.zeros(256)  # 1 KiB, made before tracking
    with pytest.raises(torch.OutOfMemoryError) as err:
        with b.tracking(x):
            y = x + 1  # 2 KiB live
            _z = torch.zeros(1024)  # 4 KiB more: 6 KiB > 4 KiB
    info = b.oom_info(err.value, "forward")
    assert (info.request_bytes, info.allocated_bytes, info.allowed_bytes) == (4096, 2048, 4096)
    assert info.headroom_bytes == 2048 and info.kind == "capacity"
    del y


def test_a_failed_measurement_leaves_memory_exactly_at_the_baseline(micro_llama, tmp_path, monkeypatch):
    """A batch far too big for the host (DefaultCPUAllocator refuses it) is an OOM result with
    its request, and the run goes on: the checkpointed half is measured too. (RunConfig refuses a
    batch above 2^20 up front; the limit is lifted here to reach the allocator's own refusal.)"""
    from gcdoctor import config
    monkeypatch.setattr(config, "MAX_BATCH", 10**12)
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=32, profile=False, measure_steps=1,
                    warmup_steps=1, out=str(tmp_path / "r"), telemetry_hz=5.0, batch_sizes=[1, 2, 10**11])
    s = Session(cfg)
    s.run()
    sweep = s.facts.sweep
    assert [(m.variant, m.batch_size, m.fits) for m in sweep.measurements] == [
        ("no_gc", 1, True), ("no_gc", 2, True), ("no_gc", 10**11, False),
        ("gc", 1, True), ("gc", 2, True), ("gc", 10**11, False)]
    failed = [m for m in sweep.measurements if not m.fits]
    for m in failed:
        assert m.oom.spelling == "CPU allocator" and m.oom.phase == "setup"
        assert m.oom.request_bytes == 10**11 * 32 * 8  # the int64 token ids
        assert m.oom.kind == "capacity"
    for m in sweep.measurements:
        assert m.allocated_after_bytes == m.allocated_before_bytes, (m.variant, m.batch_size)


def test_after_an_oom_inside_a_step_memory_is_exactly_back(micro_llama, tmp_path):
    cfg = RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=32, profile=False, measure_steps=1,
                    warmup_steps=1, out=str(tmp_path / "r"), telemetry_hz=5.0)
    s = Session(cfg)
    ctx = ProbeContext(s)
    from gcdoctor.run.capture import TrainingStep
    with s.backend.tracking():
        model = ctx.build_model()
        s.backend.track([*model.parameters(), *model.buffers()])
        fit = ctx.measure("sweep", "no_gc", lambda: TrainingStep(model, s.backend, 2, 32), 2)
        s.backend.set_memory_limit(fit.peak_allocated_bytes - 1)
        for _ in range(3):  # OOM after OOM: never a byte more
            m = ctx.measure("sweep", "no_gc", lambda: TrainingStep(model, s.backend, 2, 32), 2)
            assert not m.fits and m.oom.kind == "capacity" and m.oom.phase in ("forward", "backward", "optimizer")
            assert m.oom.allocated_bytes + m.oom.request_bytes > m.oom.allowed_bytes
            assert m.allocated_after_bytes == m.allocated_before_bytes == fit.allocated_before_bytes


def test_the_sweep_leaves_no_model_alive(micro_llama, tmp_path):
    """Each variant's model is freed when its search ends: the next variant's build, the allocator
    probe's fresh processes and the probes after the sweep get the device without it (on the H200 the checkpointed
    variant's 8B model, 15.8 GiB, once stayed through the allocator probe's processes)."""
    import gc as pygc
    import weakref

    from gcdoctor.model import registry as models
    built = []
    real = models.build_model

    alive_at_build = []

    def spy(*a, **kw):
        pygc.collect()
        alive_at_build.append(sum(r() is not None for r in built))
        m = real(*a, **kw)
        built.append(weakref.ref(m))
        return m

    cfg = RunConfig(device="cpu", model=micro_llama, probes=["sweep"], seq_len=32, profile=False, measure_steps=1,
                    warmup_steps=1, out=str(tmp_path / "r"), telemetry_hz=5.0, batch_sizes=[1, 2])
    s = Session(cfg)
    models.build_model = spy
    try:
        s.run()
    finally:
        models.build_model = real
    # the checkpointed variant's model is built with none alive
    assert alive_at_build == [0, 0]
