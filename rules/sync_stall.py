"""GC022 sync-stall."""
from __future__ import annotations

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule, idle_of, per_step, top
from gcdoctor.trace.hostidle import NO_OP, RT_SYNC, runtime_base, runtime_class

# what the user wrote, from the outermost op around the synchronising call
OP_CAUSES = (
    (("aten::item", "aten::_local_scalar_dense"), ".item() (a Python number from a device tensor: the loss, a metric)",
     "keep the value on the device and read it every N steps (loss.detach() accumulated, one .item() per log "
     "interval), or copy it with non_blocking=True into pinned memory and read it after an event"),
    (("aten::is_nonzero",), "Python control flow on a device tensor (`if t:`, bool(t), assert, a loop condition)",
     "compute the condition on the device (torch.where) or check it every N steps"),
    (("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::tolist"),
     ".cpu() / .to('cpu') / .tolist() / .numpy() of a device tensor",
     "use non_blocking=True into pinned memory and wait on an event only where the value is needed, or move the "
     "read out of the step"),
    (("aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::index"),
     "an op whose output size depends on the data (nonzero, masked_select, boolean indexing, unique)",
     "give it a size bound (nonzero(..., size=)), or use masks with fixed shapes"),
    ((NO_OP,), "a device synchronize (torch.cuda.synchronize(), torch.musa.synchronize()), an event or stream "
     "wait, or a library's own synchronisation",
     "remove the synchronize from the training loop (time with device events, torch.cuda.Event or "
     "torch.musa.Event, read once per interval)"),
)


BLOCKING_COPY = ("a blocking copy (cudaMemcpy, hipMemcpy, hipMemcpyWithStream: a copy to or from pageable host "
                 "memory, or a synchronous copy in a library)",
                 "copy through pinned memory with non_blocking=True (tensor.pin_memory(), DataLoader(pin_memory=True)) "
                 "and wait on an event only where the data is needed")


def explain_op(op: str, call: str = "") -> tuple[str, str]:
    if op in (NO_OP, "aten::copy_", "aten::to", "aten::_to_copy") and runtime_class(call) == RT_SYNC and \
            runtime_base(call).startswith("memcpy"):
        return BLOCKING_COPY
    for names, what, fix in OP_CAUSES:
        if op in names:
            return what, fix
    return f"a synchronising call inside {op}", "find why the op needs the host to wait and move it out of the step"


class SyncStallRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps of every profiled training step or bare trace, the device idle time
    caused by a synchronisation: the device ran out of work while the host sat in a synchronising
    runtime call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a blocking
    copy such as cudaMemcpy or hipMemcpyWithStream; hip*, musa* and XPU equivalents). It names the call and the op the user wrote around it (.item(),
    .cpu(), `if tensor:`, nonzero, torch.cuda.synchronize()).

    Why it matters:
    The host normally runs ahead of the device and keeps its queue full. A synchronisation throws that
    lead away every time: the device idles for the host's whole round trip (Python after the call,
    the next ops' dispatch and launch). Checkpointing cannot help or hurt here.

    What it counts: the device idle while the host sat inside a synchronising call (a sync owns
    the idle only while the host is inside it), plus the host work after a drained queue that the
    device's own work would have hidden had the host run ahead (at most the device work beyond
    the host's own work). Host work that is longer than the device's work stays Python, dispatch
    or data: removing the sync would not hide it (GC025, GC021, GC024, GC028 judge it).

    Evidence:
    Sync idle per step and as a share of the steady-state window, the part inside the calls and
    the hideable host work after them, the gaps with the host inside a call, and the idle by
    runtime call and by the outermost op around the call.

    How to fix:
    .item() of the loss every step: accumulate on the device and read every N steps. .cpu()/.tolist():
    non_blocking copies into pinned memory, read after an event. `if tensor:`: compute on the device.
    a device synchronize in the loop: remove it; time with device events.
    """

    code = "GC022"
    slug = "sync-stall"
    title = "Synchronisation stalls the device"
    cause = "sync"
    what = "waits on synchronisations"
    defaults = {
        # a twentieth of the step: a drained queue is pure waste and cheap to remove; one .item() of
        # the loss followed by a 2 ms logger cost 8.5% of a 30 ms H200 step (samples/traces/h200-host)
        "min_share": 0.05,
        "critical_share": 0.5,
    }

    judged_label = "device idle the synchronisations cost"

    def judged_us(self, facts: Facts, jw: JudgedWindow) -> float:
        h = idle_of(jw)
        return max(h.sync_exposed_us, h.sync_us)  # (facts from before sync_exposed_us: sync_us)

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h = idle_of(jw)
        us, share, subject, ev = self.start(facts, jw)
        n_val, n_unit = (h.sync_count / jw.steps, "per step") if jw.steps else (h.sync_count, "in the trace")
        ev.append(Evidence("device idle while the host sat in a synchronising call", *per_step(h.sync_us, jw)))
        ev.append(Evidence("host work after drained queues that the device's own work would have hidden",
                           *per_step(us - h.sync_us, jw)))
        ev.append(Evidence("host work after drained queues, all", *per_step(h.after_sync_us, jw)))
        ev.append(Evidence("gaps with the host inside a synchronising call", n_val, n_unit))
        for name, v in top(h.sync_calls):
            ev.append(Evidence(f"sync idle in {name}", *per_step(v, jw)))
        for op, v in top(h.sync_ops):
            ev.append(Evidence(f"sync idle under {op}", *per_step(v, jw)))
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: synchronisations drain the device {100 * share:.0f}% of the "
                               "steady-state time", ev, subject=subject)
        op = top(h.sync_ops, 1)[0][0] if h.sync_ops else NO_OP
        call = top(h.sync_calls, 1)[0][0] if h.sync_calls else "a synchronising call"
        what, fix = explain_op(op, call)
        return self.fired(
            severity, f"{subject}: the device waits on synchronisations {100 * share:.0f}% of the step "
            f"({call} under {op if op != NO_OP else 'no op'})", ev,
            f"The host sat in {call} ({what}) while the device ran out of work, and the host work after it ran with "
            "the device's queue empty: without the synchronisation the host would have run ahead and the device's "
            "own work would have hidden it. Counted: the idle while the host was inside the call, plus the host "
            "work after it up to the device work it could have overlapped.",
            f"{fix[0].upper()}{fix[1:]}.", subject=subject)
