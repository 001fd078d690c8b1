"""The watched-run paths of the sweep rules (GC001, GC005): the same judgements, made on a user's
own training job where there is no checkpointing-off twin to compare with. Recompute overhead is
judged against the analytic extra forward, memory headroom against the memory model of the
watched model. Verdicts are scope "configuration", topic "watch"."""
from __future__ import annotations

import statistics

from gcdoctor.types import CONFIGURATION, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.rules._sweep import gib

WATCH = dict(subject="watch", scope=CONFIGURATION, topic="watch")


def is_watched(facts: Facts) -> bool:
    return facts.watch is not None and facts.sweep is None


def step_spread_pct(facts: Facts) -> float | None:
    """(max - min) / median of the unprofiled step times, after the first, in percent."""
    assert facts.watch is not None  # a watched run
    xs = facts.watch.step_times()
    if len(xs) < 3:
        return None
    med = statistics.median(xs)
    return 100.0 * (max(xs) - min(xs)) / med if med else None


def _how(w) -> str:
    rc = w.recompute
    if rc.source == "labels":
        return "gcdoctor/recompute labels"
    return "found without labels" + (f" ({rc.kind} checkpointing)" if rc.kind else "")


def recompute_overhead(rule: Rule, facts: Facts, t: dict[str, float]) -> Verdict:
    """GC001 on a watched run: the recomputation the profiled steps show, against the step and
    against one forward of the checkpointed layers (the analytic extra forward)."""
    w = facts.watch
    assert w is not None  # is_watched
    rc, cs = w.recompute, w.checkpointing
    if rc is None or not rc.steps:
        return rule.inconclusive("no profiled step in the watched run (watch(..., profile_steps=(5, 6)) profiles "
                                 "two; the run may have ended before them)", **WATCH)
    if not rc.found:
        if cs.enabled:
            return rule.fired(
                "info", f"The model reports checkpointing ({cs.text()}) but the profiled steps recompute nothing",
                [Evidence("profiled steps", rc.steps), Evidence("checkpointing (as the model reports)", cs.text())],
                "Checkpointing that is on recomputes each checkpointed layer's forward in the backward; none ran. "
                "Either the flag has no effect (model.eval(), no grad, a layer class that ignores it), or the "
                "recomputation is compiled into one graph (torch.compile), which leaves no separate forward ops.",
                "Check that training runs in train mode with grad enabled and that the decoder layers are the "
                "checkpointed modules; under torch.compile, read the compiled graph instead.",
                line="checkpointing is on but nothing is recomputed in the profiled steps", **WATCH)
        return rule.passed("Checkpointing is off in this run: nothing is recomputed",
                           [Evidence("checkpointing (as the model reports)", cs.text()),
                            Evidence("profiled steps", rc.steps)], **WATCH)
    spread = step_spread_pct(facts)
    if spread is not None and spread > t["max_spread_pct"]:
        return rule.inconclusive(f"step times vary by {spread:.0f}% from step to step (above "
                                 f"{t['max_spread_pct']:.0f}%): the device or host was busy with something else",
                                 **WATCH)
    basis = "device busy" if rc.time_basis == "device" else "host (CPU op time)"
    over, ratio = rc.overhead_pct, rc.vs_expected
    ev = [Evidence("recompute per step", rc.recompute_ms, "ms"), Evidence(f"step, {basis}", rc.step_ms, "ms"),
          Evidence("recompute share of the step", None if rc.share is None else 100 * rc.share, "%"),
          Evidence("overhead: recompute / (step - recompute)", over, "%"),
          Evidence("analytic extra forward (forward x checkpointed layers' FLOP share)", rc.expected_recompute_ms,
                   "ms"),
          Evidence("recompute / analytic extra forward", ratio, "x"),
          Evidence("how the recompute was found", _how(w)), Evidence("checkpointing (as the model reports)", cs.text())]
    band = f"{t['min_overhead_pct']:.0f}-{t['max_overhead_pct']:.0f}%"
    unreported = ("" if cs.enabled else " The model reports no checkpointing: this recomputation comes from "
                  "checkpointing applied elsewhere (your own torch.utils.checkpoint, DeepSpeed, a wrapper).")
    if over is None:
        return rule.inconclusive("the profiled steps' recompute and step times do not give an overhead", **WATCH)
    if ratio is not None and ratio > t["max_recompute_vs_forward"]:
        return rule.fired(
            "warning", f"Recomputation costs {ratio:.1f}x the forward it repeats ({rc.recompute_ms:.1f} ms against "
            f"{rc.expected_recompute_ms:.1f} ms)", ev,
            "One recomputation is one forward of the checkpointed layers. Twice that is a second recomputation: "
            "nested checkpoints (a model that checkpoints its layers, wrapped again by a trainer or FSDP's "
            "checkpoint_wrapper), or reentrant checkpointing rerunning work the non-reentrant form stops early."
            + unreported,
            "Checkpoint each layer once: turn off one of the two mechanisms; prefer use_reentrant=False.",
            line=f"recomputation costs {ratio:.1f}x the forward it repeats", **WATCH)
    if over > t["max_overhead_pct"]:
        return rule.fired(
            "warning", f"Recomputation adds {over:.0f}% to the step, above the normal band ({band})", ev,
            "Recomputing each checkpointed layer once should cost about one extra forward of those layers "
            "(+20-39% in time on real GPUs, <= +33% of FLOPs). More means the recompute pays for more than its "
            "math: small regions with host work per region, nested checkpoints, or copies." + unreported,
            "Checkpoint whole decoder layers, not pieces; prefer use_reentrant=False; checkpoint every N-th layer "
            "(every_n_layers) where memory allows; see the granularity verdicts of `gcdoctor diagnose`.",
            line=f"recomputation adds {over:+.0f} % to the step, above the normal {band}", **WATCH)
    if over < t["min_overhead_pct"]:
        return rule.fired(
            "info", f"Recomputation adds only {over:.0f}% to the step: little is recomputed", ev,
            "Layer checkpointing recomputes every checkpointed layer's forward, which costs +20% or more. This "
            "little means few layers are checkpointed, or the step is dominated by something else." + unreported,
            "If memory allows, this is cheap insurance; if you expected full checkpointing, check which layers "
            "the model reports as checkpointed.", line=f"recomputation adds only {over:+.0f} % to the step", **WATCH)
    return rule.passed(f"Recomputation adds {over:.0f}% to the step ({rc.recompute_ms:.1f} ms), inside the normal "
                       f"band ({band})" + (f"; {ratio:.2f}x the analytic extra forward" if ratio is not None else ""),
                       ev, line=f"recomputation adds {over:+.0f} % to the step (normal {band})", **WATCH)


def memory_headroom(rule: Rule, facts: Facts, t: dict[str, float]) -> Verdict:
    """GC005 on a watched run: would this run's batch fit without checkpointing? The memory
    model's forward/backward peak without it, the optimizer step's peak as measured."""
    w, mm = facts.watch, facts.memory_model
    assert w is not None  # is_watched
    gc_on = bool(w.checkpointing.enabled or (w.recompute is not None and w.recompute.found))
    if mm is None:
        return rule.inconclusive(facts.missing_reason("memory_model"), **WATCH)
    if mm.usable_bytes is None:
        return rule.inconclusive("the device's memory is not known (a CPU run): no headroom to judge", **WATCH)
    fwd_bwd = max((s.phase_peak_bytes.get(p, 0) for s in w.steps for p in ("forward", "backward")), default=0)
    opt = max((s.phase_peak_bytes.get("optimizer", 0) for s in w.steps), default=0)
    if not fwd_bwd:
        return rule.inconclusive("no memory peak was measured in the forward and backward of the watched steps",
                                 **WATCH)
    b = w.batch_size
    mine, other = (None, None) if b is None else (mm.get("gc" if gc_on else "no_gc", b), mm.get("no_gc", b))
    if mine is None or other is None:
        return rule.inconclusive(f"the memory model has no prediction at batch {b}", **WATCH)
    err = 100.0 * (mine.fwd_bwd_peak_bytes - fwd_bwd) / fwd_bwd
    usable = mm.usable_bytes
    ev = [Evidence("batch x sequence", f"{b} x {w.seq_len}"),
          Evidence("measured forward/backward peak", gib(fwd_bwd), "GiB"),
          Evidence("memory model's forward/backward peak for this run", gib(mine.fwd_bwd_peak_bytes), "GiB"),
          Evidence("prediction error", err, "%"),
          Evidence("model states (params, grads, optimizer states)", gib(mm.model_state_bytes), "GiB"),
          Evidence("what the allocator can reserve (device memory less the context)", gib(usable), "GiB")]
    if abs(err) > t["max_prediction_error_pct"]:
        return rule.inconclusive(
            f"the memory model predicts a forward/backward peak of {gib(mine.fwd_bwd_peak_bytes):.2f} GiB for this "
            f"run and it measured {gib(fwd_bwd):.2f} GiB ({err:+.0f}%): the model does not describe this step "
            "(other tensors, a wrapper's buffers, another loss), so the peak without checkpointing is not predicted",
            **WATCH)
    if opt:
        ev.append(Evidence("measured optimizer-step peak (checkpointing does not change it)", gib(opt), "GiB"))
    optimizer_peak = opt or other.optimizer_peak_bytes
    peak_without = max(other.fwd_bwd_peak_bytes, optimizer_peak)
    phase = "the optimizer step" if optimizer_peak >= other.fwd_bwd_peak_bytes else other.peak_where
    ev.append(Evidence("predicted peak without checkpointing", gib(peak_without), "GiB"))
    if not gc_on:
        return rule.passed(f"Checkpointing is off; the step peaks at {gib(max(fwd_bwd, opt)):.1f} of "
                           f"{gib(usable):.1f} GiB usable", ev, **WATCH)
    cost = ""
    if w.recompute is not None and w.recompute.overhead_pct is not None:
        cost = f"; its recomputation adds {w.recompute.overhead_pct:.0f}% to the step"
        ev.append(Evidence("recompute overhead (GC001)", w.recompute.overhead_pct, "%"))
    if other.fits is not None:  # the caching allocator replayed for a fresh process (gcdoctor.model.allocator)
        ev.append(Evidence("without checkpointing, fits the replayed allocator", "yes" if other.fits else "no"))
    if peak_without <= usable and other.fits is not False:
        return rule.fired(
            "info", f"Checkpointing may be unneeded: predicted peak without it {gib(peak_without):.1f} of "
            f"{gib(usable):.1f} GiB usable at batch {b}{cost}", ev,
            f"The memory model of this model, which predicts this run's forward/backward peak to {abs(err):.1f}%, "
            f"puts the step's peak without checkpointing at {gib(peak_without):.1f} GiB (in {phase}), within the "
            "device's usable memory: the recomputation buys memory this batch does not need.",
            "Try this batch without checkpointing (TrainingArguments(gradient_checkpointing=False), "
            "model.activation_checkpointing_disable()), or checkpoint every N-th layer (every_n_layers), or spend "
            "the headroom on a larger batch; confirm with `gcdoctor diagnose` or one unwatched step.",
            line=f"checkpointing may be unneeded: peak without it {gib(peak_without):.1f} of {gib(usable):.1f} GiB",
            **WATCH)
    return rule.passed(f"Checkpointing is needed at batch {b}: the predicted peak without it, "
                       f"{gib(peak_without):.1f} GiB, exceeds the {gib(usable):.1f} GiB usable", ev,
                       line=f"checkpointing is needed: {gib(peak_without):.1f} GiB without it, "
                            f"{gib(usable):.1f} usable", **WATCH)
