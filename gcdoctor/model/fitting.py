"""Whether a step fits a device: the memory model's timeline replayed through the caching allocator
(gcdoctor.model.allocator) for a fresh process, the largest batch so, and the memory-model facts a run
stores (its measured points predicted, the largest batches under both allocators). No torch.

gcdoctor.model.memory predicts bytes; gcdoctor.model.allocator replays a policy over them; this module asks
both whether a workload fits and writes the answer as facts.
"""
from __future__ import annotations

from typing import Any

from gcdoctor.model import allocator as A
from gcdoctor.errors import UserError
from gcdoctor.facts.memory import MemoryModelFacts, PredictedPoint
from gcdoctor.model.memory import (ALLOCATORS, CONTEXT_SOURCE, DEVICE_CONTEXT_BYTES, DTYPE_BYTES, EXACT_TYPES, GiB, MiB,
                             Prediction, Workload, checkpoint_residue_bytes_per_token, fit_options,
                             layer_activation_bytes_per_token, max_batch, model_states, predict, usable_bytes)


def fit(spec: Any, workload: Workload, device_memory_bytes: int, allocator: str = "default",
        context_bytes: int | None = None, limit_bytes: int | None = None, steps: int = 3,
        fresh_workspaces: bool = False) -> Any:
    """Whether `workload` fits as a training job meets it: a fresh process builds the model and
    runs `steps` steps (the first makes the optimizer states; the layout settles by the third:
    on Llama-3-8B no GC batch 3 fails only in it), replayed through the caching
    allocator (gcdoctor.model.allocator) on a card of `device_memory_bytes` less the context, with
    --memory-limit `limit_bytes` capping reserved bytes. Returns the replay's SimMeasurement.

    On the CPU there is no caching allocator: the counter's peak against the limit decides."""
    w = workload
    if w.device == "cpu":
        peak = predict(spec, w).peak_bytes
        cap = limit_bytes if limit_bytes is not None else device_memory_bytes
        out = A.SimMeasurement("gc" if w.gc else "no_gc", w.batch_size, fits=peak <= cap, steps=steps)
        out.peak_allocated = out.peak_reserved = peak
        return out
    if allocator not in ALLOCATORS:
        raise UserError(f"allocator {allocator!r}: use one of {', '.join(ALLOCATORS)}")
    key = (spec.source, spec.n_layers, spec.name, w, device_memory_bytes, allocator, context_bytes, limit_bytes,
           steps, fresh_workspaces)
    if key in _FITS:
        return _FITS[key]
    variant = "gc" if w.gc else "no_gc"
    plan = [("build", variant), ("measure", variant, w.batch_size, steps)]
    out = A.replay(spec, w.seq_len, plan, usable_bytes(device_memory_bytes, w.device, context_bytes),
                   dtype=w.dtype, optimizer=w.optimizer, expandable=allocator == "expandable",
                   allowed=limit_bytes, device_total=device_memory_bytes,
                   workspaces_persist=not fresh_workspaces, master_weights=w.master_weights)[0]
    if len(_FITS) >= 512:
        _FITS.clear()
    _FITS[key] = out
    return out


_FITS: dict[tuple, Any] = {}  # fit()'s replays, by everything they depend on (a replay takes ~0.1-0.3 s)


def max_batch_fresh(spec: Any, device_memory_bytes: int, seq_len: int, dtype: str = "bf16",
                    optimizer: str = "adamw", gc: bool = False, device: str = "cuda",
                    allocator: str = "default", context_bytes: int | None = None,
                    limit_bytes: int | None = None, cap: int = 1 << 12, master_weights: bool = False) -> int:
    """The largest batch a fresh process fits under `allocator` (0: not even batch 1).

    The caching allocator's boundary need not be monotonic (a batch can fail on a layout its
    neighbour avoids), so: the largest batch whose allocated peak is within what the
    allocator can reserve bounds it (`max_batch`); expandable segments are replayed from that
    bound down to their first fit, the default allocator from expandable's result down to its
    first fit (a batch above a default-allocator failure that would fit is not searched for)."""
    w = lambda b: Workload(b, seq_len, dtype, optimizer, gc, device, master_weights)  # noqa: E731
    room = usable_bytes(device_memory_bytes, device, context_bytes)
    if limit_bytes is not None:
        room = min(room, limit_bytes)
    bound = max_batch(spec, room, seq_len, dtype, optimizer, gc, device, master_weights, cap=cap)
    if device == "cpu" or bound == 0:
        return bound

    def fits(b: int, alloc: str) -> bool:
        return fit(spec, w(b), device_memory_bytes, alloc, context_bytes, limit_bytes).fits

    if allocator == "expandable":
        top = bound
        while top > 0 and not fits(top, "expandable"):
            top -= 1
        return top
    b = max_batch_fresh(spec, device_memory_bytes, seq_len, dtype, optimizer, gc, device, "expandable",
                        context_bytes, limit_bytes, cap, master_weights)
    while b > 0 and not fits(b, "default"):
        b -= 1
    return b


def predicted_point(pred: Prediction, fitted: Any = None, fitted_expandable: Any = None) -> PredictedPoint:
    """One prediction as the facts store it, with the allocator replays' verdicts if given."""
    w = pred.workload
    peak = pred.peak
    return PredictedPoint(
        variant="gc" if w.gc else "no_gc", batch_size=w.batch_size, seq_len=w.seq_len,
        peak_bytes=peak.bytes, peak_phase=pred.peak_phase, peak_where=peak.where,
        forward_peak_bytes=pred.forward.bytes, backward_peak_bytes=pred.backward.bytes,
        fwd_bwd_peak_bytes=pred.fwd_bwd.bytes, optimizer_peak_bytes=pred.optimizer.bytes,
        baseline_bytes=pred.baseline_bytes, activations_after_forward_bytes=pred.activations_after_forward_bytes,
        peak_breakdown=dict(peak.breakdown), fits=None if fitted is None else fitted.fits,
        fits_expandable=None if fitted_expandable is None else fitted_expandable.fits,
        peak_reserved_bytes=None if fitted is None or not fitted.fits else fitted.peak_reserved,
    )


def memory_model_facts(spec: Any, seq_len: int, dtype: str = "bf16", optimizer: str = "adamw",
                       device: str = "cuda", points: list[tuple[str, int]] | None = None,
                       capacity_bytes: int | None = None, limit_bytes: int | None = None,
                       context_bytes: int | None = None, context_source: str | None = None,
                       probe: tuple[Any, int] | None = None) -> MemoryModelFacts:
    """Predictions for the (variant, batch) points a run measured, and the largest batches.

    `points`: ("no_gc" | "gc", batch_size) pairs; `capacity_bytes`: the device's memory
    (torch's total_memory; on the CPU the counter's limit); `limit_bytes`: --memory-limit on a
    device; `context_bytes`: the memory outside the allocator, measured (default: the H200's,
    said in `context_source`). Each point's fit and the largest batches come from the caching
    allocator replayed for a fresh process, under both allocators.
    """
    st = model_states(spec, dtype, optimizer, device)
    on_device = device != "cpu"
    ctx = (context_bytes if context_bytes is not None else DEVICE_CONTEXT_BYTES) if on_device else 0
    usable = usable_bytes(capacity_bytes, device, ctx) if capacity_bytes else None
    e = DTYPE_BYTES[dtype]
    mm = MemoryModelFacts(
        model=spec.name, dtype=dtype, optimizer=optimizer, seq_len=seq_len, device=device,
        exact=spec.model_type in EXACT_TYPES, n_params=st.n_params, param_bytes=st.param_bytes,
        grad_bytes=st.grad_bytes, optimizer_state_bytes=st.optimizer_state_bytes,
        model_state_bytes=st.total_bytes,
        layer_activation_bytes_per_token=layer_activation_bytes_per_token(spec, dtype),
        checkpoint_residue_bytes_per_token=checkpoint_residue_bytes_per_token(spec, dtype),
        loss_block_bytes_per_token=(e + 4 + (4 if e != 4 else 0)) * spec.vocab_size,
        capacity_bytes=capacity_bytes, usable_bytes=usable, limit_bytes=limit_bytes if on_device else None,
        context_bytes=ctx if on_device else None,
        context_source=(context_source or (CONTEXT_SOURCE if context_bytes is None else "measured")) if on_device else "",
    )
    for variant, batch in points or []:
        if variant not in ("no_gc", "gc"):
            raise ValueError(f"memory model: unknown variant {variant!r}")
        mm.points.append(predicted_point_for(spec, mm, variant, batch))
        mm.notes.extend(n for n in predict(spec, Workload(batch, seq_len, dtype, optimizer, variant == "gc",
                                                          device)).notes if n not in mm.notes)
    if usable is not None and capacity_bytes:
        room = usable if limit_bytes is None or not on_device else min(usable, limit_bytes)
        for variant in ("no_gc", "gc"):
            gc = variant == "gc"
            mm.max_batch_allocated[variant] = max_batch(spec, room, seq_len, dtype, optimizer, gc, device)
            for alloc in (ALLOCATORS if on_device else ("default",)):
                mm.max_batch_by_allocator.setdefault(alloc, {})[variant] = max_batch_fresh(
                    spec, capacity_bytes, seq_len, dtype, optimizer, gc, device, alloc, ctx, mm.limit_bytes)
            mm.max_batch[variant] = mm.max_batch_by_allocator["default"][variant]
        best = mm.max_batch_by_allocator[ALLOCATORS[-1] if on_device else "default"]
        if not any(best.values()) and optimizer == "adamw":
            mm.fit_options = fit_options(spec, seq_len, room, dtype, device, probe)
        if on_device:
            mm.notes.append(f"largest batches: the caching allocator replayed for a fresh process "
                            f"(gcdoctor.model.allocator) on {capacity_bytes / GiB:.2f} GiB less "
                            f"{ctx / MiB:.0f} MiB outside the allocator ({mm.context_source})")
    if spec.model_type not in EXACT_TYPES:
        mm.notes.append(f"model_type {spec.model_type!r} is approximated by a Llama layer")
    return mm


def predicted_point_for(spec: Any, mm: MemoryModelFacts, variant: str, batch: int) -> PredictedPoint:
    """Predict (variant, batch) under `mm`'s settings, replaying both allocators if a capacity is known."""
    w = Workload(batch, mm.seq_len, mm.dtype, mm.optimizer, variant == "gc", mm.device)
    pred = predict(spec, w)
    if not mm.capacity_bytes:
        return predicted_point(pred)
    ctx = mm.context_bytes or 0
    if mm.device == "cpu":
        f = fit(spec, w, mm.capacity_bytes)
        return predicted_point(pred, f)
    return predicted_point(pred, fit(spec, w, mm.capacity_bytes, "default", ctx, mm.limit_bytes),
                           fit(spec, w, mm.capacity_bytes, "expandable", ctx, mm.limit_bytes))
