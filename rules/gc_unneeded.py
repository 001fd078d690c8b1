"""GC005 gc-unneeded."""
from __future__ import annotations

from gcdoctor.units import cost_words
from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.facts.views import equal_batch
from gcdoctor.rules._watch import is_watched, memory_headroom


class GcUnneededRule(Rule):
    """What it checks:
    Whether the batch the user trains at (--target-batch) fits without checkpointing, from the
    largest batch found without it. Without a target, it reports the largest batch that needs no
    checkpointing.

    On a watched run (the user's own job, checkpointing on): whether its batch would fit without
    checkpointing, from the memory model of the watched model (its forward/backward peak without
    checkpointing; the optimizer step's peak as measured, which checkpointing does not change)
    against the device's usable memory. Judged only when the model predicts the run's own
    measured forward/backward peak within max_prediction_error_pct.

    Why it matters:
    Checkpointing costs 20-35% of step time. If the batch fits without it, that time is wasted.

    Evidence:
    Target batch, largest batch without checkpointing, the step-time overhead at equal batch. On a
    watched run: measured and predicted peaks, the prediction error, model states, the predicted
    peak without checkpointing, the usable memory.

    How to fix:
    Turn checkpointing off for this configuration, or checkpoint only every N-th layer so the
    batch just fits (every_n_layers).
    """

    code = "GC005"
    slug = "gc-unneeded"
    title = "Checkpointing unneeded"
    requires = ()  # the sweep's measurements, or a watched run (check says which is missing)
    topic = "sweep"
    defaults: dict[str, float] = {
        # watched runs: the memory model is exact on the CPU and within 0.1% on the H200 for the
        # steps it replays; a run 10% off is another step (a wrapper's buffers, another loss)
        "max_prediction_error_pct": 10.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        if is_watched(facts):
            return memory_headroom(self, facts, t)
        if facts.sweep is None or not facts.sweep.measurements:
            return self.inconclusive(facts.missing_reason("sweep.measurements"))
        sweep = facts.sweep
        fit_off = [m.batch_size for m in sweep.measurements if m.variant == "no_gc" and m.fits]
        best_off = sweep.max_batch.get("no_gc") if sweep.searched else (max(fit_off) if fit_off else None)
        target = sweep.target_batch
        ev = [Evidence("largest batch without GC" + ("" if sweep.searched else " (of those measured)"), best_off)]
        eq = equal_batch(sweep)
        overhead = None
        if eq is not None:
            overhead = eq.overhead_pct
            ev.append(Evidence(f"GC step-time overhead at batch {eq.batch}", overhead, "%"))
        cost = f" (it {cost_words(overhead, '', sign=False)} step time)" if overhead is not None else ""
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
