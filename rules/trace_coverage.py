"""GC026 trace-coverage."""
from __future__ import annotations

from gcdoctor.types import Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import TOO_LITTLE, TraceKey, judged_window
from gcdoctor.rules._host import sampled as _sampled
from gcdoctor.trace.hostidle import MIN_BUSY_US, MIN_DEVICE_OPS, MIN_JOINED_SHARE


class TraceCoverageRule(Rule):
    """What it checks:
    What a user's own trace (`gcdoctor analyze trace.json`) can and cannot show, before anything is
    judged on it: whether it has device timing at all (a CPU-only profile, a trace with runtime calls
    but no kernels, a CUPTI range-profiler trace), whether it holds any steady-state step or only
    one-time setup and warm-up, which steps were left out as warm-up and why, how much of the device's
    idle time has no host events to explain it, and which events could not be placed on the timeline.
    It fails (warning) a judged window below the evidence floors: fewer than 10 device ops, less than
    0.1 ms of device work, or fewer than half the device ops joined to a launch record; no host cause
    is judged on such a window ("too little device work to judge"). A trace whose launch calls name
    device ops that are missing (10% or more) is flagged as sampled (events dropped).

    Why it matters:
    A verdict is only as good as the window it was computed on. A CPU-only trace says nothing about
    the device; a trace of the first step measures module loading and the allocator filling up, not
    training; a trace without CPU activities cannot say what the host was doing.

    Evidence:
    The trace's steps (steady and warm-up), its device idle without host events, dropped events.

    How to fix:
    Record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (or the device's activity),
    and schedule=torch.profiler.schedule(wait=1, warmup=1, active=3) with prof.step() once per step,
    so that steady-state steps are recorded apart from setup.
    """

    code = "GC026"
    slug = "trace-coverage"
    title = "What the trace covers"
    requires = ()
    topic = "trace"
    defaults = {
        # device idle with no host events to explain it, share of the window: beyond this the host
        # causes cannot be judged reliably
        "max_unrecorded_share": 0.2,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        run = TraceKey(None, "all")
        whole = facts.trace.get(str(run))
        if whole is None:
            return []  # a diagnose or watch run: gcdoctor recorded its own traces
        fix = ("Record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and "
               "schedule=torch.profiler.schedule(wait=1, warmup=1, active=3), calling prof.step() once per step.")
        notes = [n for n in whole.notes if "could not be placed" in n]
        ev = [Evidence("profiler steps, steady state", ", ".join(map(str, whole.steady_steps)) or "none"),
              Evidence("profiler steps, warm-up (reported apart)", ", ".join(map(str, whole.warmup_steps)) or "none")]
        if whole.device_unavailable:
            return [self.fired("info", f"trace: no device timing in this trace, {whole.device_unavailable}: "
                               "nothing about the device or checkpointing could be judged", ev,
                               "Only host-side numbers (ops, wall time) can be read from it; every device rule "
                               "is inconclusive." + (" " + " ".join(notes) if notes else ""), fix)]
        if whole.setup_only:
            return [self.fired("info", "trace: the trace holds only one-time setup, no steady-state step to judge",
                               ev + [Evidence("why", whole.setup_reason)],
                               "Module loading, library initialisation and the allocator filling up happen once; "
                               "judging them as a training step would blame the wrong thing, so no host cause is "
                               "judged on this trace.", fix)]
        jw = judged_window(facts.trace, run)
        h = jw.idle
        if jw.why.startswith(TOO_LITTLE):
            return [self.fired("warning", f"trace: {TOO_LITTLE}: no host cause is judged",
                               ev + [Evidence("why", jw.why[len(TOO_LITTLE) + 2:])],
                               "A verdict on why a device idles needs device work to idle between (at least "
                               f"{MIN_DEVICE_OPS} device ops and {MIN_BUSY_US / 1e3:g} ms of device busy time in the "
                               "judged steps) and launch records saying when the host issued it (at least "
                               f"{100 * MIN_JOINED_SHARE:.0f}% of the ops joined by correlation).",
                               "Profile more steady-state steps of the real workload with the CPU and device "
                               "activities recorded: " + fix[0].lower() + fix[1:])]
        sampled = _sampled(h)
        if notes:
            n = whole.dropped_events if isinstance(whole.dropped_events, int) and whole.dropped_events > 0 else None
            return [self.fired("info", f"trace: {f'{n:,}' if n else 'some'} events could not be placed on the "
                               "timeline and were left out", ev + [Evidence("left out", notes[0])],
                               "Events without a usable time, with a negative duration, or with times impossible "
                               "against the rest of the trace (far outside its span, longer than it could hold) "
                               "cannot be placed; the numbers describe the rest of the trace.", "Check the tool that wrote or edited the "
                               "trace.")]
        if h is not None and h.window_us and h.unrecorded_us / h.window_us >= t["max_unrecorded_share"]:
            share = h.unrecorded_us / h.window_us
            return [self.fired("info", f"trace: {100 * share:.0f}% of the time the device idles with no host events "
                               "to say why", ev + [Evidence("device idle without host events", 100 * share, "%")],
                               "The thread that launches the device's work has no cpu_op events in the trace, so "
                               "what the host was doing cannot be told.", fix)]
        if sampled and h is not None:
            return [self.fired("info", f"trace: a sampled trace: {sampled}; the verdicts describe the events kept",
                               ev + [Evidence("launch calls without a device op",
                                              f"{h.unmatched_launch_count} of {h.launch_call_count}")],
                               "The profiler dropped events (its activity buffers overflowed, or it was set to "
                               "sample): the launch calls name device ops that are not in the trace, so the "
                               "device's busy time is undercounted and its idle overcounted.",
                               "Record fewer steps per trace, or give the profiler larger buffers; judge the "
                               "verdicts with that in mind.")]
        return [self.passed("trace: " + (f"{len(whole.steady_steps)} steady-state step(s) judged"
                                          if whole.steady_steps else "the whole trace judged (no profiler steps)")
                            + (f"; warm-up step(s) {', '.join(map(str, whole.warmup_steps))} reported apart"
                               if whole.warmup_steps else ""), ev)]
