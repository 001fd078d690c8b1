"""GC009 allocator-boundary."""
from __future__ import annotations

from gcdoctor.model.allocator import expandable_setting
from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.rules._sweep import gib

VARIANT = {"no_gc": "without checkpointing", "gc": "with checkpointing"}


def held_beside_bytes(facts: Facts) -> int | None:
    """Device memory held outside the fresh processes while they ran, beyond one device context
    (gcdoctor's own process, or another job): what they had less than a training job alone on
    the device. An OOM there says nothing of a lone job when this is large; a fit still holds."""
    al = facts.allocator
    if al is None or al.parent_device_bytes is None:
        return None
    mm = facts.memory_model
    context = mm.context_bytes if mm is not None and mm.context_bytes else 0
    return max(0, al.parent_device_bytes - context)


def fresh_ooms_conclusive(facts: Facts, max_held_gib: float) -> bool:
    held = held_beside_bytes(facts)
    return held is None or held <= max_held_gib * 2**30


class AllocatorBoundaryRule(Rule):
    """What it checks:
    For each variant (checkpointing off and on), the largest batch measured in fresh processes:
    with the default caching allocator and the sweep's boundary batch as the first step (does the
    boundary hold for a job that starts there?), and with expandable segments (does it allow a
    larger batch?). Tokens/s at each.

    Why it matters:
    With the default allocator the largest batch depends on the process's history: cached
    segments shaped by earlier batches can hold, or strand, the bytes a large request needs. A
    boundary found after a ladder of smaller batches may run out of memory when it is a training
    job's first step. Expandable segments map physical pages where a request needs them and give
    free pages back at an OOM, so fragmentation stops deciding the boundary.

    Evidence:
    Per allocator: the largest batch fresh, the first batch above it that did not fit and how it
    failed (fragmentation: cached bytes held the request but not in one block; capacity), tokens/s
    at the largest batch; the sweep's in-process boundary; the allocator replay's predictions.

    How to fix:
    Train at the batch that fits fresh, not the sweep's if they differ. Where expandable segments
    fit more, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (PYTORCH_MUSA_ALLOC_CONF on
    MUSA 4.0 or later) in the job's environment before the device initialises (it cannot be
    changed later in the process) and train at that batch, if the throughput there is higher.
    """

    code = "GC009"
    slug = "allocator-boundary"
    title = "Allocator boundary"
    requires = ("allocator.boundaries",)
    topic = "allocator"
    defaults = {
        # device memory held beside the fresh processes beyond one device context (gcdoctor's own
        # process's context is subtracted): above this an OOM in them is not what a job alone on
        # the device meets, so only their fits are judged
        "max_held_gib": 1.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        al = facts.allocator
        if al is None:
            return self.inconclusive(facts.missing_reason("allocator.boundaries"))
        out = []
        for variant in ("no_gc", "gc"):
            d, e = al.get(variant, "default"), al.get(variant, "expandable")
            if d is None and e is None:
                continue
            out.append(self._one(facts, variant, d, e, fresh_ooms_conclusive(facts, t["max_held_gib"])))
        return out or self.inconclusive("no variant was measured in a fresh process")

    def _one(self, facts: Facts, variant: str, d, e, conclusive: bool = True):
        ev = []
        for b, label in ((d, "default allocator"), (e, "expandable segments")):
            if b is None:
                continue
            ev.append(Evidence(f"largest batch fresh, {label}", b.largest_batch))
            if b.first_oom_batch is not None:
                ev.append(Evidence(f"first OOM above it, {label}", f"{b.first_oom_batch} ({b.first_oom_kind or '?'})"))
            if b.tokens_per_s:
                ev.append(Evidence(f"tokens/s at it, {label}", b.tokens_per_s, "tok/s"))
            if b.peak_reserved_bytes:
                ev.append(Evidence(f"peak reserved at it, {label}", gib(b.peak_reserved_bytes), "GiB"))
            if b.predicted is not None:
                ev.append(Evidence(f"predicted by the allocator replay, {label}", b.predicted))
        found = (d or e).in_process
        ev.append(Evidence("sweep's largest batch (in one process, after other batches)", found))
        what = VARIANT[variant]
        EXPANDABLE = expandable_setting(facts.environment.device_kind)
        fresh = d.largest_batch if d is not None else None
        held = held_beside_bytes(facts)
        if held is not None:
            ev.append(Evidence("device memory held beside the fresh processes (beyond a context)", gib(held), "GiB"))
        if not conclusive and d is not None and (fresh is None or d.order_moves_boundary):
            v = self.inconclusive(
                f"{what}: {gib(held):.1f} GiB of device memory was held beside the fresh processes (beyond a "
                f"device context): their OOMs below the sweep's batch {found} do not say a job alone on the device "
                "fails there", subject=variant)
            v.evidence = ev
            return v
        if d is not None and d.order_moves_boundary and fresh is not None:
            return self.fired(
                "warning", f"{what.capitalize()}, batch {found} fits only after smaller batches: a job that starts "
                f"at it runs out of memory; {fresh} is what a job can rely on with the default allocator", ev,
                "The default caching allocator keeps the segments earlier batches shaped; a fresh process lays the "
                "same step out differently and strands bytes it needs.",
                f"Train at batch {fresh}, or set {EXPANDABLE}" + (f" (fits {e.largest_batch} fresh)" if e and
                                                                   e.largest_batch else "") + ".",
                subject=variant, line=f"{what}: batch {found} fails in a fresh process; rely on {fresh}")
        if d is not None and fresh is None:
            return self.fired("warning", f"{what.capitalize()}, no batch measured fits in a fresh process "
                              f"(the sweep found {found})", ev,
                              "Each fresh process ran out of memory where the sweep's process did not.",
                              f"Set {EXPANDABLE}, or train below batch {d.first_oom_batch}.", subject=variant,
                              line=f"{what}: no batch fits a fresh process")
        if e is not None and e.largest_batch and fresh and e.largest_batch > fresh:
            gain = ""
            if e.tokens_per_s and d.tokens_per_s:
                gain = f", {100 * (e.tokens_per_s / d.tokens_per_s - 1):+.0f}% tokens/s"
            return self.fired(
                "info", f"{what.capitalize()}, expandable segments fit batch {e.largest_batch} in a fresh process "
                f"(default allocator: {fresh}{gain})", ev,
                "The default allocator fails there on fragmentation or a segment it cannot grow; expandable "
                "segments map pages where the request needs them.",
                f"Set {EXPANDABLE} in the training job's environment (before CUDA initialises) to train at batch "
                f"{e.largest_batch}.", subject=variant,
                line=f"{what}: expandable_segments:True fits {e.largest_batch} (default {fresh}{gain})")
        best = fresh if fresh is not None else (e.largest_batch if e else None)
        return self.passed(f"{what.capitalize()}, batch {best} fits in a fresh process under both allocator "
                           "settings; the sweep's boundary holds", ev, subject=variant)
