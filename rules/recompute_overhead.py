"""GC001 recompute-overhead."""
from __future__ import annotations

from gcdoctor.units import cost_words
from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.facts.views import EqualBatch
from gcdoctor.rules._sweep import equal_batch_pair
from gcdoctor.rules._watch import is_watched, recompute_overhead


class RecomputeOverheadRule(Rule):
    """What it checks:
    The step-time increase from layer-level checkpointing, at equal batch size, sequence
    length, dtype and optimizer: median step with checkpointing over median step without.

    On a watched run (the user's own job: no twin without checkpointing) it judges the
    recomputation the profiled steps show, found with or without labels: what it adds to the step,
    recompute / (step - recompute), against the same band, and against the analytic extra forward
    (the measured forward times the checkpointed layers' share of its FLOPs): one recomputation
    is one forward of those layers, twice that is a second one (nested checkpoints).

    Why it matters:
    Full recomputation repeats about one forward pass: at most +33% of the forward+backward
    FLOPs, and +20% to +39% in time on real GPUs (Korthikanti et al. 2022, arXiv 2205.05198;
    measured +26% for Llama-3-8B on an H200). An overhead well above that band means the
    recompute costs more than its math (launch-bound regions, offload copies, host work); one far
    below it means little or nothing is being recomputed.

    Evidence:
    Median step time with and without checkpointing at the largest batch both fit, the overhead
    in percent, and where profiled, the share of device time spent in recompute ranges. On a
    watched run: recompute and step time per profiled step, the analytic extra forward, how the
    recompute was found, the checkpointing the model reports.

    How to fix:
    Above the band: check the granularity (GC010) and offload (GC020) verdicts; checkpoint whole
    decoder layers, not small pieces; checkpoint every N-th layer (`every_n_layers`) or only the
    MLP to trade memory back for speed; capture with CUDA graphs or torch.compile. Below the band:
    confirm checkpointing is on (train mode, the layers are GradientCheckpointingLayer subclasses).
    """

    code = "GC001"
    slug = "recompute-overhead"
    title = "Recompute overhead"
    requires = ()  # the sweep's measurements, or a watched run (check says which is missing)
    topic = "sweep"
    defaults = {
        # about one extra forward: <= +33% FLOPs, +20..39% seen in time (docs/references.md section 3)
        "max_overhead_pct": 35.0,
        # below this, recomputation is (nearly) absent: a sign checkpointing is not active
        "min_overhead_pct": 5.0,
        # step-to-step spread (max-min over median) above which timings cannot carry a verdict:
        # a loaded host or thermal throttling, not checkpointing
        "max_spread_pct": 15.0,
        # watched runs: one recomputation is one forward of the checkpointed layers (1.0x); nested
        # checkpoints recompute twice (2.0x): above the midpoint, something recomputes again
        "max_recompute_vs_forward": 1.5,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        if is_watched(facts):
            return recompute_overhead(self, facts, t)
        if facts.sweep is None or not facts.sweep.measurements:
            return self.inconclusive(facts.missing_reason("sweep.measurements"))
        pair = equal_batch_pair(facts)
        if pair is None:
            return self.inconclusive("no batch size was measured both with and without checkpointing")
        b, off, on = pair
        eq = EqualBatch(b, off, on)
        spread = eq.spread_pct
        if spread > t["max_spread_pct"]:
            return self.inconclusive(f"step times at batch {b} vary by {spread:.0f}% from step to step (above "
                                     f"{t['max_spread_pct']:.0f}%): the device or host was busy with something else")
        pct = eq.overhead_pct
        assert pct is not None  # a common batch has both step times
        ev = [Evidence("batch size (both variants)", b), Evidence("step without GC", off.step_ms_median, "ms"),
              Evidence("step with GC", on.step_ms_median, "ms"), Evidence("overhead", pct, "%")]
        share = getattr(facts.trace.get("sweep/gc"), "recompute_share", None)
        if share is not None:
            ev.append(Evidence("recompute share of device time (GC)", 100.0 * share, "%"))
        band = f"{t['min_overhead_pct']:.0f}-{t['max_overhead_pct']:.0f}%"
        if pct > t["max_overhead_pct"]:
            return self.fired(
                "warning", f"Checkpointing slows the step by {pct:.0f}% at batch {b}, above the normal band ({band})",
                ev, "Full recomputation should cost about one extra forward (<= +33% of FLOPs, +20-39% in time on "
                "real GPUs). More than that means the recompute pays for something besides its math: many small "
                "kernels, host work per region, or copies.",
                "Look at the granularity and offload verdicts; checkpoint whole decoder layers; use every_n_layers "
                "or MLP-only checkpointing to give memory back for speed; try CUDA graphs or torch.compile.",
                line=f"checkpointing {cost_words(pct)} at batch {b}, above the normal {band}")
        if pct < t["min_overhead_pct"]:
            return self.fired(
                "info", f"Checkpointing {cost_words(pct, '', only=True, sign=False)} at batch {b}: little or nothing is recomputed",
                ev, "Layer checkpointing recomputes each layer's forward during backward, which should cost "
                "+20% or more. An overhead this small means few regions are checkpointed, or the step is "
                "dominated by something else (optimizer, host).",
                "Check that checkpointing is enabled in train mode and covers the decoder layers; compare the "
                "memory-saving verdict.", line=f"checkpointing {cost_words(pct, only=True)} at batch {b}: little is recomputed")
        return self.passed(f"Checkpointing {cost_words(pct, '', sign=False)} step time at batch {b}, inside the normal band ({band})", ev,
                           line=f"checkpointing {cost_words(pct)} step time at batch {b} (normal {band})")

