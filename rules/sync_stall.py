"""GC022 sync-stall."""
from __future__ import annotations

from gcdoctor.engine import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule, per_step, top
from gcdoctor.trace.hostidle import NO_OP

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
    ((NO_OP,), "torch.cuda.synchronize(), an event or stream wait, or a library's own synchronisation",
     "remove the synchronize from the training loop (time with CUDA events read once per interval)"),
)


def explain_op(op: str) -> tuple[str, str]:
    for names, what, fix in OP_CAUSES:
        if op in names:
            return what, fix
    return f"a synchronising call inside {op}", "find why the op needs the host to wait and move it out of the step"


class SyncStallRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps of every profiled training step or bare trace, the device idle time
    caused by a synchronisation: the device ran out of work while the host sat in a synchronising
    runtime call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a blocking
    memcpy; hip*, musa* and XPU equivalents), so the queue drained and the device waited until the host
    came back and issued the next op. It names the call and the op the user wrote around it (.item(),
    .cpu(), `if tensor:`, nonzero, torch.cuda.synchronize()).

    Why it matters:
    The host normally runs ahead of the device and keeps its queue full. A synchronisation throws that
    lead away every time: the device idles for the host's whole round trip (Python after the call,
    the next ops' dispatch and launch). Checkpointing cannot help or hurt here.

    Evidence:
    Sync idle per step and as a share of the steady-state window, the number of drained gaps per step,
    and the idle by runtime call and by the outermost op around the call.

    How to fix:
    .item() of the loss every step: accumulate on the device and read every N steps. .cpu()/.tolist():
    non_blocking copies into pinned memory, read after an event. `if tensor:`: compute on the device.
    torch.cuda.synchronize() in the loop: remove it; time with CUDA events.
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

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h = jw.idle
        us, share, subject, ev = self.start(facts, jw)
        n_val, n_unit = (h.sync_count / jw.steps, "per step") if jw.steps else (h.sync_count, "in the trace")
        ev.append(Evidence("gaps drained by a synchronisation", n_val, n_unit))
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
        what, fix = explain_op(op)
        return self.fired(
            severity, f"{subject}: the device waits on synchronisations {100 * share:.0f}% of the step "
            f"({call} under {op if op != NO_OP else 'no op'})", ev,
            f"The device ran out of work while the host sat in {call}, {n_val:.0f} time(s) {n_unit}: the queue "
            f"drained, and the device waited for the host's next dispatch and launch. The call comes from {what}.",
            f"{fix[0].upper()}{fix[1:]}.", subject=subject)
