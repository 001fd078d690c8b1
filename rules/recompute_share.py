"""GC006 recompute-share."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.rules._scope import probe_of, scope_of


class RecomputeShareRule(Rule):
    """What it checks:
    The share of the device's busy time spent inside recompute ranges, in every profiled window
    that has them (probe traces, a watched training run, or a user's trace): labelled by
    gcdoctor's checkpoint `context_fn`, or found without labels as the forward ops that
    transformers', torch's, DeepSpeed's or FSDP's checkpointing replays inside the backward
    (gcdoctor.trace.recompute).

    Why it matters:
    Recomputing each layer's forward once costs about a third of the forward+backward FLOPs,
    so about 25% of the device time of a checkpointed step (forward 1, backward 2, recompute 1).
    Much more means the recompute is heavier than the forward it repeats: nested or overlapping
    checkpoints, reentrant checkpointing rerunning work that non-reentrant stops early, or
    recomputed regions that launch more than they compute.

    Evidence:
    Busy time inside recompute ranges, total busy time, the share, per trace window.

    How to fix:
    Check for nested checkpoints (a model that checkpoints internally wrapped again by the
    trainer), prefer `use_reentrant=False`, checkpoint whole layers, and read the granularity
    verdict (GC010). To label your own checkpoints, pass
    `context_fn=gcdoctor.run.capture.labelled_context_fn()` to `torch.utils.checkpoint.checkpoint`.
    """

    code = "GC006"
    slug = "recompute-share"
    title = "Recompute share of device time"
    requires = ("trace",)
    defaults = {
        # one recomputed forward of four units (fwd 1 + bwd 2 + recompute 1) is 25%; allow up to 35%
        "max_recompute_share_pct": 35.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        # whole runs only: a probe variant's trace ("sweep/gc") or a bare trace's "all"; never a labelled
        # window of its own (a bare trace's "recompute" window is all recompute by construction)
        windows = {k: tm for k, tm in facts.trace.items() if ("/" in k or k == "all") and "|" not in k
                   and tm.recompute_share is not None and tm.recompute_busy_us}
        if not windows:
            found = [k for k, tm in facts.trace.items() if k.endswith("|recompute") or k == "recompute"]
            if found and all(facts.trace[k].device_unavailable for k in found):
                return self.inconclusive("recomputation was found, but the trace has no device timing "
                                         "(a CPU-only profile): no share of device time to judge")
            return self.inconclusive("no profiled window shows recomputation (no gcdoctor/recompute labels, and no "
                                     "forward ops replayed inside the backward)")
        out = []
        for key, tm in sorted(windows.items()):
            rs, busy = tm.recompute_share, tm.recompute_busy_us
            assert rs is not None and busy is not None  # windows hold only those with both
            share = 100.0 * rs
            where = dict(subject=key, scope=scope_of(key), topic=probe_of(key))
            ev = [Evidence("busy time in recompute ranges", busy / 1e3, "ms"),
                  Evidence("device busy time", (tm.busy_us or 0) / 1e3, "ms"), Evidence("recompute share", share, "%")]
            if share > t["max_recompute_share_pct"]:
                out.append(self.fired(
                    "warning", f"{key}: recomputation takes {share:.0f}% of device busy time (expected about 25%)", ev,
                    "Recomputing a forward should cost about a quarter of a checkpointed step's device time; more "
                    "means the recompute repeats more than one forward or launches more than it computes.",
                    "Look for nested checkpoints, use use_reentrant=False, checkpoint whole layers (see GC010).",
                    line=f"recompute takes {share:.0f} % of device time in {key} (about 25 % expected)", **where))
            else:
                out.append(self.passed(f"{key}: recomputation takes {share:.0f}% of device busy time", ev, **where))
        return out
