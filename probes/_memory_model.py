"""The memory model in a diagnose session: the facts for the session's device (its memory,
--memory-limit, the memory outside the allocator as measured) and the prediction of each point the
batch sweep measures. The probe side of gcdoctor.model.fitting: it reads the ProbeContext, so the model
never reaches up into a session.
"""
from __future__ import annotations

from typing import Any

from gcdoctor.facts.memory import MemoryModelFacts
from gcdoctor.model.fitting import memory_model_facts, predicted_point_for
from gcdoctor.model.memory import CONTEXT_SOURCE, DEVICE_CONTEXT_BYTES, DEVICE_KINDS, MiB


def predict_for_measurement(ctx: Any, m: Any, variant: str) -> int | None:
    """The batch-sweep probe's hook: predict the measured point `m` of `variant`.

    Stores the prediction in `ctx.facts.memory_model` (created on first use, with the
    device's capacity and the predicted largest batches) and returns the predicted peak.
    `ctx` is the session's ProbeContext (spec as built, dtype, seq_len, config.optimizer,
    backend); the step predicted is gcdoctor.run.capture.TrainingStep's.
    """
    seq_len = getattr(m, "seq_len", None) or ctx.seq_len
    optimizer = getattr(ctx.config, "optimizer", None) or "adamw"
    mm = ctx.facts.memory_model
    if mm is None or (mm.seq_len, mm.dtype, mm.optimizer) != (seq_len, ctx.dtype, optimizer):
        mm = memory_model_facts_for(ctx, seq_len, optimizer)
        ctx.facts.memory_model = mm
    existing = mm.get(variant, m.batch_size)
    if existing is None:
        existing = predicted_point_for(ctx.spec, mm, variant, m.batch_size)
        mm.points.append(existing)
    return existing.peak_bytes


def memory_model_facts_for(ctx: Any, seq_len: int | None = None, optimizer: str | None = None,
                           after_steps: bool = False) -> MemoryModelFacts:
    """memory_model_facts for a diagnose session: the device's memory, --memory-limit, and the
    memory outside the allocator measured on the device (total - free - reserved).

    Before any step (`after_steps` False) the kernels are not loaded yet (CUDA loads modules
    lazily), so a reading below the default is a lower bound and the default is used, said so;
    after the steps the reading is the value."""
    b = ctx.backend
    kind = b.kind if b.kind in DEVICE_KINDS else "cuda"
    seq_len = seq_len or ctx.seq_len
    optimizer = optimizer or getattr(ctx.config, "optimizer", None) or "adamw"
    context = source = None
    if kind != "cpu":
        measure = getattr(b, "non_allocator_bytes", None)
        read = measure() if measure is not None else None
        if read is not None and after_steps:
            context, source = read, "measured on this device after the sweep's steps: total - free - reserved"
        elif read is not None and read >= DEVICE_CONTEXT_BYTES:
            context, source = read, "measured on this device before any step: total - free - reserved"
        elif read is not None:
            source = (f"{CONTEXT_SOURCE}; {read / MiB:.0f} MiB measured here before any step, "
                      "before the kernels load")
    capacity = b.total_memory() if kind != "cpu" else (b.memory_limit() or b.total_memory())
    try:
        probe = (ctx.probe_spec(), ctx.config.probe_batch)
    except Exception:  # noqa: BLE001 - a context without probe settings: no probe line
        probe = None
    return memory_model_facts(ctx.spec, seq_len, ctx.dtype, optimizer, kind, capacity_bytes=capacity,
                              limit_bytes=b.memory_limit() if kind != "cpu" else None,
                              context_bytes=context, context_source=source, probe=probe)


def refresh_context(ctx: Any, tolerance: int = 32 * MiB) -> bool:
    """After the sweep's steps: read the memory outside the allocator again and, where it differs
    from what the predictions used by more than `tolerance`, predict again with it (the points
    the run measured included). True when the facts were replaced."""
    mm = ctx.facts.memory_model
    if mm is None or mm.device == "cpu" or mm.context_bytes is None:
        return False
    measure = getattr(ctx.backend, "non_allocator_bytes", None)
    read = measure() if measure is not None else None
    if read is None or abs(read - mm.context_bytes) <= tolerance:
        if read is not None and not mm.context_source.startswith("measured"):
            mm.context_source += f"; {read / MiB:.0f} MiB measured after the sweep's steps"
        return False
    new = memory_model_facts_for(ctx, mm.seq_len, mm.optimizer, after_steps=True)
    for p in mm.points:
        new.points.append(predicted_point_for(ctx.spec, new, p.variant, p.batch_size))
    new.notes.append(f"predicted again with the memory outside the allocator measured after the steps "
                     f"({read / MiB:.0f} MiB; {mm.context_bytes / MiB:.0f} MiB before them)")
    ctx.facts.memory_model = new
    return True
