"""GC029 device-queued-idle."""
from __future__ import annotations

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule, idle_of, per_step, sampled, top
from gcdoctor.trace.comm import is_comm_kernel


class DeviceQueuedIdleRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps, the device idle time with work already issued but not running:
    the op that ends the gap had been launched before the gap began, so the device waited on
    something other than the host: an event or another stream (cudaStreamWaitEvent, a side stream
    the compute waits for), a peer (a collective waiting for another rank), a copy.

    Why it matters:
    No host fix shortens it, and no host rule sees it: the host was ahead. It is a dependency
    between streams or devices that serialises work which could overlap.

    Evidence:
    Queued idle per step and as a share of the window, the streams the device ran, and the ops
    that ended the longest waits.

    How to fix:
    Find what the waiting op depends on (the event or stream it waits for): overlap the producer
    with compute (issue copies and collectives earlier, on their own streams), remove needless
    cross-stream waits and record_stream calls, and for collectives look at the rank that arrives
    last (GC027) and at exposed communication (GC061).
    """

    code = "GC029"
    slug = "device-queued-idle"
    title = "Work issued but waiting (stream or event dependencies)"
    cause = "queued"
    judged_label = "device idle with work issued (queued)"
    what = "waits with work issued (stream or event dependencies)"
    defaults = {
        # a fifth of the step, as the host causes: a healthy step's queued idle is ~0.1% (H200 healthy)
        "min_share": 0.2,
        "critical_share": 0.5,
    }

    def one_off(self, jw: JudgedWindow, t: dict[str, float]) -> Verdict | None:
        return None

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h = idle_of(jw)
        us, share, subject, ev = self.start(facts, jw)
        ev.append(Evidence("streams with device work", h.queued_streams))
        for name, v in top(h.queued_ops):
            ev.append(Evidence(f"waiting before {name[:60]}", *per_step(v, jw)))
        severity = self.grade(share, t)
        dropped = sampled(h)
        if severity is not None and dropped:
            return self.passed(f"{subject}: issued work seems to wait {100 * share:.0f}% of the step, but the trace "
                               f"is sampled ({dropped}): the missing ops ran in those gaps", ev, subject=subject)
        if severity is None:
            return self.passed(f"{subject}: issued work waits {100 * share:.0f}% of the steady-state time", ev,
                               subject=subject)
        first = top(h.queued_ops, 1)[0][0] if h.queued_ops else "the next op"
        comm = is_comm_kernel(first)
        return self.fired(
            severity, f"{subject}: the device idles {100 * share:.0f}% of the step with work already issued "
            f"(waiting before {first[:50]})", ev,
            "The op ending each of these gaps had been launched before the gap began: the device waited on an "
            "event, another stream" + (", or another rank (a collective)" if comm else " or a copy")
            + ", not on the host.",
            ("The wait is before a collective: the other ranks arrive late (GC027) or the collective waits on its "
             "stream; overlap communication with compute (GC061)." if comm else
             "Find the event or stream the op waits for (cudaStreamWaitEvent in the trace): issue the producer "
             "earlier or overlap it with compute, remove needless cross-stream waits and record_stream calls."),
            subject=subject)
