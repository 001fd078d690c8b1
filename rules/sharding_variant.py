"""GC063 sharding-variant."""
from __future__ import annotations

from gcdoctor.types import EXPERIMENT, Evidence, Rule, Verdict
from gcdoctor.facts import Facts, Measurement
from gcdoctor.facts.distributed import DistributedFacts, ShardVariant
from gcdoctor.rules._dist import per_step, size

REFERENCE = {True: "fsdp2/gc", False: "fsdp2/no_gc"}  # each variant against the default with the same checkpointing


def _measured(v: ShardVariant) -> Measurement:
    """The measurement of a variant that ran (ShardVariant.ran: one that fits, with a median step)."""
    assert v.measurement is not None
    return v.measurement


def _step_ms(v: ShardVariant) -> float:
    """The median step of a variant that ran."""
    ms = _measured(v).step_ms_median
    assert ms is not None
    return ms


def _spread_pct(v: ShardVariant) -> float:
    times = _measured(v).step_ms
    if len(times) < 2:
        return 0.0
    mid = sorted(times)[len(times) // 2]
    return 100.0 * (max(times) - min(times)) / mid if mid else 0.0


def _peak(d: DistributedFacts, v: ShardVariant) -> int | None:
    """The largest rank's peak: the rank that meets the memory wall first."""
    m = _measured(v)
    peaks = [r.peak_allocated_bytes for r in d.rows("sharding", v.name, m.batch_size)
             if r.peak_allocated_bytes is not None]
    return max(peaks) if peaks else m.peak_allocated_bytes


def _comm(d: DistributedFacts, v: ShardVariant, attr: str) -> float | None:
    vals = [getattr(c, attr) for c in d.comm_of(v.trace_key or "") if getattr(c, attr) is not None]
    return max(vals) if vals else None


def _gathers(d: DistributedFacts, v: ShardVariant) -> float | None:
    rows = d.comm_of(v.trace_key or "")
    return max(c.calls("all_gather") for c in rows) if rows else None


class ShardingVariantRule(Rule):
    """What it checks:
    Each variant of the sharding probe (FSDP2 with reshard_after_forward off, checkpoint_wrapper
    inside the units instead of transformers' checkpointing outside them, DeepSpeed ZeRO-3) against
    FSDP2's defaults with the same checkpointing, at the probe batch: step time, the largest rank's
    peak memory, parameter all-gathers per step and exposed communication.

    Why it matters:
    The sharding settings move the same trade as checkpointing: keeping gathered parameters
    from forward to backward saves the backward's all-gathers and costs a layer's worth of
    unsharded parameters per unit; where checkpointing sits relative to the FSDP unit decides what
    the recompute gathers; ZeRO-3 and FSDP2 differ in buckets, prefetch and precision. Which one
    wins depends on the interconnect and the model: this is what this device and stack showed.

    Evidence:
    Per variant: step time and its difference from the reference, the largest rank's peak and its
    difference, all-gathers per step of both, exposed communication per step where the trace has a
    device timeline, the step-to-step spread of the timings.

    How to fix:
    Use a variant that is faster by more than the timing noise and whose peak leaves room for the
    batch you train at: `fully_shard(..., reshard_after_forward=False)` (or an int, to reshard to
    a smaller group), `apply_activation_checkpointing(checkpoint_wrapper)` before `fully_shard`, or
    DeepSpeed's `"zero_optimization": {"stage": 3}`. Re-run the sweep with that setting
    (--no-reshard, --checkpoint-impl checkpoint_wrapper, --shard zero3) for its largest batch.
    """

    code = "GC063"
    slug = "sharding-variant"
    title = "Sharding variant against FSDP2's defaults"
    requires = ("distributed.variants",)
    scope = EXPERIMENT
    topic = "distributed"
    defaults = {
        # as GC007: timings spreading more than this from step to step cannot rank two variants
        "max_spread_pct": 15.0,
        # a variant this much faster than the reference is a device finding worth acting on (GC007's
        # resolution of a median of a few steps is 3%; a setting change should earn more than that)
        "min_gain_pct": 5.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        d = facts.distributed
        if d is None:
            return self.inconclusive(facts.missing_reason("distributed.variants"))
        out = []
        for v in d.variants:
            ref = d.variant(REFERENCE[v.gc])
            if v.name == REFERENCE[v.gc] or ref is None:
                continue
            if v.skipped or not v.ran or not ref.ran:
                why = v.skipped or (f"{v.name} did not complete a step" if not v.ran
                                    else f"the reference {ref.name} did not complete a step")
                out.append(self.inconclusive(why, subject=f"sharding/{v.name}"))
                continue
            out.append(self._compare(d, v, ref, t))
        if not out:
            return self.inconclusive("the sharding probe ran no variant besides its references")
        return out

    def _compare(self, d: DistributedFacts, v: ShardVariant, ref: ShardVariant, t: dict[str, float]) -> Verdict:
        sv, sr = _step_ms(v), _step_ms(ref)
        dt = 100.0 * (sv / sr - 1.0)
        pv, pr = _peak(d, v), _peak(d, ref)
        gv, gr = _gathers(d, v), _gathers(d, ref)
        ev = [Evidence("variant", v.description), Evidence("reference", f"{ref.name}: {ref.description}"),
              Evidence("step", sv, "ms"), Evidence("reference step", sr, "ms"),
              Evidence("step time vs reference", dt, "%"),
              Evidence("largest rank's peak", None if pv is None else pv / 2**30, "GiB"),
              Evidence("reference's largest rank's peak", None if pr is None else pr / 2**30, "GiB"),
              Evidence("all-gathers per step", gv), Evidence("reference's all-gathers per step", gr)]
        ev_exp, ref_exp = _comm(d, v, "comm_exposed_us"), _comm(d, ref, "comm_exposed_us")
        if ev_exp is not None and ref_exp is not None:
            ev += [Evidence("exposed communication per step", ev_exp / 1e3, "ms"),
                   Evidence("reference's exposed communication per step", ref_exp / 1e3, "ms")]
        spread = max(_spread_pct(v), _spread_pct(ref))
        ev.append(Evidence("largest step-to-step spread", spread, "%"))
        memory = "" if pv is None or pr is None else f", {'+' if pv >= pr else '-'}{size(abs(pv - pr))}/rank"
        gathers = ("" if gv is None or gr is None or gv == gr
                   else f", {'+' if gv > gr else '-'}{per_step(abs(gv - gr))} all-gathers/step")
        what = f"{dt:+.0f} % step{memory}{gathers}"
        subject = f"sharding/{v.name}"
        if spread > t["max_spread_pct"]:
            return self.passed(f"{v.name}: {what} against {ref.name} (timings spread {spread:.0f}% from step to "
                               "step: too noisy to rank)", ev, subject=subject)
        if -dt >= t["min_gain_pct"]:
            return self.fired(
                "info", f"{v.name} is {-dt:.0f}% faster than {ref.name} on this device ({what})", ev,
                f"{v.description} ran the probe's step {-dt:.0f}% faster than {ref.description}.",
                "If its peak leaves room for your batch, use it and re-run the sweep with it (--no-reshard, "
                "--checkpoint-impl checkpoint_wrapper or --shard zero3) for its largest batch.",
                subject=subject, line=f"{v.name}: {what.replace('all-gathers', 'gathers')} vs {ref.name}")
        return self.passed(f"{v.name}: {what} against {ref.name}", ev, subject=subject)
