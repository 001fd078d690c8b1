"""GC005 gc-unneeded."""
from __future__ import annotations

from gcdoctor.engine import Evidence, Rule
from gcdoctor.facts import Facts


class GcUnneededRule(Rule):
    """What it checks:
    Whether the batch the user trains at (--target-batch) fits without checkpointing, from the
    largest batch found without it. Without a target, it reports the largest batch that needs no
    checkpointing.

    Why it matters:
    Checkpointing costs 20-35% of step time. If the batch fits without it, that time is wasted.

    Evidence:
    Target batch, largest batch without checkpointing, the step-time overhead at equal batch.

    How to fix:
    Turn checkpointing off for this configuration, or checkpoint only every N-th layer so the
    batch just fits (every_n_layers).
    """

    code = "GC005"
    slug = "gc-unneeded"
    title = "Checkpointing unneeded"
    requires = ("sweep.measurements",)
    topic = "sweep"
    defaults: dict[str, float] = {}

    def check(self, facts: Facts, t: dict[str, float]):
        sweep = facts.sweep
        fit_off = [m.batch_size for m in sweep.measurements if m.variant == "no_gc" and m.fits]
        best_off = sweep.max_batch.get("no_gc") if sweep.searched else (max(fit_off) if fit_off else None)
        target = sweep.target_batch
        ev = [Evidence("largest batch without GC" + ("" if sweep.searched else " (of those measured)"), best_off)]
        common = sweep.common_batches()
        overhead = None
        if common:
            b = common[-1]
            off, on = sweep.get("no_gc", b), sweep.get("gc", b)
            overhead = 100.0 * (on.step_ms_median / off.step_ms_median - 1.0)
            ev.append(Evidence(f"GC step-time overhead at batch {b}", overhead, "%"))
        cost = f" (it costs {overhead:.0f}% step time)" if overhead is not None else ""
        if target is None:
            if best_off is None:
                return self.passed("Checkpointing is needed: batch 1 does not fit without it", ev)
            # no target: the boundary, not a verdict (the prescription, GC007, weighs the batch against speed)
            return self.passed(f"Without checkpointing, batches up to {best_off} fit{cost}: at that batch or "
                               "smaller checkpointing is unneeded (pass --target-batch N for a verdict on yours)", ev)
        ev.insert(0, Evidence("target batch", target))
        if best_off is not None and target <= best_off:
            return self.fired("warning", f"Checkpointing is unneeded: the target batch {target} fits without it"
                              f"{cost}", ev,
                              "Recomputation is paid on every step, but memory is not the constraint here.",
                              "Disable checkpointing, or checkpoint every N-th layer only if you need headroom.",
                              line=f"checkpointing is unneeded: batch {target} fits without it{cost}")
        if not sweep.searched and best_off is not None and target > max(fit_off):
            return self.inconclusive(f"the target batch {target} was not measured without GC (fixed --batch-sizes)")
        return self.passed(f"Checkpointing is needed: the target batch {target} does not fit without it "
                           f"(largest without: {best_off})", ev)
