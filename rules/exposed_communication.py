"""GC061 exposed-communication."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import judged_window
from gcdoctor.rules._dist import setup, worst
from gcdoctor.rules._host import host_runs, per_step, subject_of


class ExposedCommunicationRule(Rule):
    """What it checks:
    In the sweep's profiled steps of the user's sharded setup (with checkpointing, and without it
    for comparison), the communication kernels' time on every rank (the parameter all-gathers and
    gradient reduce-scatters of FSDP2 or ZeRO-3), the part of it during which no compute kernel ran
    (exposed), the part hidden behind compute and the part that ran beside the recompute, against
    the step time of the slowest rank.

    Why it matters:
    Sharding trades memory for communication: every unit's parameters are gathered before its
    forward and, with resharding, again before its backward; its gradients are reduce-scattered
    after. Overlapped with compute this is free; exposed, the device waits, and every rank waits
    for the slowest. Checkpointing adds a forward's worth of compute to the backward, which can
    hide the backward's all-gathers, or, when the recompute sits between a gather and its use,
    delay them.

    Without the sweep's sharded steps it judges any trace (`gcdoctor analyze` of a trace or of a
    folder of per-rank traces, each rank apart): the collective kernels' time inside the judged
    steps during which no other op of the device ran is the device waiting on communication,
    though the trace counts it as busy.

    Evidence:
    Per step of the worst rank: communication kernel time, exposed time and its share of the
    step, time hidden by compute and by the recompute, kernels per step; the same without
    checkpointing when it was profiled.

    How to fix:
    Give each gather more compute to hide behind: a larger per-rank batch or sequence (checkpointing
    makes the room), explicit prefetching (FSDP2 `set_modules_to_forward_prefetch` /
    `set_modules_to_backward_prefetch`, ZeRO-3 `stage3_prefetch_bucket_size`), fewer and larger
    units; drop the backward's re-gathers with reshard_after_forward=False where memory allows (the
    sharding probe measures what it costs); on one node check NVLink/P2P is in use (NCCL_P2P_DISABLE
    unset), across nodes the network.
    """

    code = "GC061"
    slug = "exposed-communication"
    title = "Communication not hidden by compute"
    requires = ()
    topic = "distributed"
    defaults = {
        # a tenth of the step: below it, better overlap gains less than the step-to-step spread of a
        # sharded step (a judgement, not a measurement: override it for your cluster)
        "max_exposed_pct": 10.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        d = facts.distributed
        key = next((k for k in ("sweep/gc", "sweep/no_gc") if d.comm_of(k)), None) if d is not None else None
        if key is None or d is None:  # d is None: no key either
            from_traces = self._from_traces(facts, t)
            if from_traces:
                return from_traces
            if d is None:
                return self.inconclusive(facts.missing_reason("distributed.comm"))
            return self.inconclusive("the sweep's sharded steps were not profiled")
        rows = d.comm_of(key)
        dev = [c for c in rows if c.device_unavailable is None and c.step_us]
        if not dev:
            why = next((c.device_unavailable for c in rows if c.device_unavailable), "no step time in the trace")
            return self.inconclusive(why, subject=key)
        w = worst(dev, "comm_exposed_us")
        share = 100.0 * w.comm_exposed_us / w.step_us
        ev = [Evidence("setup", setup(d)), Evidence("rank", w.rank),
              Evidence("step (profiled)", w.step_us / 1e3, "ms"),
              Evidence("communication kernels per step", w.comm_kernel_count),
              Evidence("communication time", (w.comm_busy_us or 0) / 1e3, "ms"),
              Evidence("exposed (no compute beside it)", w.comm_exposed_us / 1e3, "ms"),
              Evidence("exposed share of the step", share, "%"),
              Evidence("hidden by compute", (w.comm_overlap_compute_us or 0) / 1e3, "ms")]
        if w.comm_overlap_recompute_us is not None:
            ev.append(Evidence("beside the recompute", w.comm_overlap_recompute_us / 1e3, "ms"))
        other = "sweep/no_gc" if key == "sweep/gc" else None
        base = worst([c for c in d.comm_of(other) if c.device_unavailable is None and c.step_us],
                     "comm_exposed_us") if other else None
        if base is not None:
            ev.append(Evidence("exposed without checkpointing", base.comm_exposed_us / 1e3, "ms"))
        if not w.comm_busy_us:
            return self.passed(f"{key}: no communication kernels ran on the device (world size {d.world_size})",
                               ev, subject=key,
                               explanation="With one rank NCCL's collectives need no transfer; nothing to expose.")
        if share > t["max_exposed_pct"]:
            return self.fired(
                "warning", f"{key}: {share:.0f}% of the step is communication no compute hides "
                f"({w.comm_exposed_us / 1e3:,.1f} of {w.comm_busy_us / 1e3:,.1f} ms, rank {w.rank})", ev,
                "Each exposed millisecond is a millisecond every rank waits; the gathers and reduce-scatters "
                "of the sharded model are not overlapped with the layers' compute.",
                "Raise the per-rank batch (checkpointing makes the room), prefetch explicitly "
                "(set_modules_to_forward_prefetch / set_modules_to_backward_prefetch), try "
                "reshard_after_forward=False (see the sharding probe), check NVLink/P2P.",
                subject=key, line=f"{share:.0f} % of the step is communication no compute hides (rank {w.rank})")
        return self.passed(f"{key}: {share:.0f}% of the step is exposed communication "
                           f"({w.comm_exposed_us / 1e3:,.1f} of {w.comm_busy_us / 1e3:,.1f} ms of communication not hidden, "
                           f"rank {w.rank})", ev, subject=key)

    def _from_traces(self, facts: Facts, t: dict[str, float]) -> list:
        """Any trace (a bare trace, each rank of a folder, a profiled run): the collective kernels'
        time inside the judged steps that no other op of the device ran beside, per rank."""
        fired, passed = [], []
        for run in host_runs(facts):
            jw = judged_window(facts.trace, run)
            h = jw.idle
            if h is None or not h.comm_us or not h.window_us:
                continue
            subject = subject_of(run)
            share = 100.0 * h.comm_exposed_us / h.window_us
            ev = [Evidence("collective kernel time", *per_step(h.comm_us, jw)),
                  Evidence("exposed (no other device op beside it)", *per_step(h.comm_exposed_us, jw)),
                  Evidence("exposed share of the window", share, "%"),
                  Evidence("hidden by compute", *per_step(h.comm_us - h.comm_exposed_us, jw)),
                  Evidence("device busy, share of the window", 100 * h.busy_us / h.window_us, "%")]
            (exposed, unit), (comm, _) = per_step(h.comm_exposed_us, jw), per_step(h.comm_us, jw)
            if share > t["max_exposed_pct"]:
                fired.append(self.fired(
                    "warning", f"{subject}: {share:.0f}% of the step is communication no compute hides "
                    f"({exposed:,.1f} of {comm:,.1f} {unit} of collectives)", ev,
                    "The collective kernels (NCCL/RCCL) ran with nothing else on the device: the device waited "
                    "on communication (the transfer, or a peer rank that arrived late) for that time. The trace "
                    "counts them as busy, so no idle-time rule sees it.",
                    "Overlap communication with compute: DDP bucketing (bucket_cap_mb) and gradient_as_bucket_view, "
                    "FSDP prefetching, a larger per-rank batch; if one rank arrives late (GC027), fix that rank; "
                    "check NVLink/P2P and the network.", subject=subject))
            else:
                passed.append(self.passed(f"{subject}: {share:.0f}% of the step is exposed communication", ev,
                                          subject=subject))
        return fired or passed[:1]
