"""GC025 python-between-ops."""
from __future__ import annotations

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import PHASE_WORDS, HostCauseRule, where


class PythonBetweenOpsRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps, the device idle time while the thread that launches the work was
    outside any recorded op: running Python (the training loop, logging, metrics, data loading that
    has no DataLoader range, a CPU optimizer written in Python or as a C++ extension that the profiler
    does not record as an op). Time inside checkpointed regions is GC010's. Where the run labels its
    phases it names the phase that holds most of it.

    Why it matters:
    While the host runs code that issues nothing, the device starves: this is the classic data-loading
    or Python-overhead stall, and it is invisible to the device's own counters. A host that is merely
    slow here makes every step slow whatever checkpointing does.

    Evidence:
    Python idle per step and as a share of the steady-state window; the labelled phase with the most
    of it; telemetry of the host CPU where the run sampled it.

    How to fix:
    Find the code: profile with with_stack=True (python_function events) or py-spy. Typical causes:
    data loading without workers, per-step logging or metric computation, a CPU optimizer
    (DeepSpeed's CPU Adam: more threads, fewer offloaded states), Python loops over parameters.
    """

    code = "GC025"
    slug = "python-between-ops"
    title = "The device waits on Python between ops"
    cause = "python"
    what = "waits on Python between ops"
    defaults = {
        "min_share": 0.2,  # a fifth of the step, as GC021: a healthy loop's Python between steps is a few %
        "critical_share": 0.5,
    }

    ckpt_is_gc010 = True

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        us, share, subject, ev = self.start(facts, jw)
        phase, phase_us = where(facts, jw.run, ("python",))
        if phase is not None and us > 0:
            ev.append(Evidence(f"of it in {PHASE_WORDS.get(phase, phase)}", 100 * min(phase_us / us, 1.0), "%"))
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: Python between ops idles the device {100 * share:.0f}% of the "
                               "steady-state time", ev, subject=subject)
        in_phase = phase is not None and phase_us >= 0.5 * us
        opt = in_phase and phase == "optimizer"
        return self.fired(
            severity, f"{subject}: the device waits on Python between ops {100 * share:.0f}% of the step"
            + (f", mostly in {PHASE_WORDS.get(phase, phase)}" if in_phase else ""), ev,
            "The thread that launches the device's work was outside any recorded op while the device had nothing "
            "to run: Python code, or native code the profiler does not see as an op"
            + (" (a CPU optimizer step)" if opt else "") + ". No DataLoader range covers it.",
            ("Give the host optimizer more cores or offload fewer states (DeepSpeed CPU Adam: OMP_NUM_THREADS, "
             "free cores), or keep the optimizer on the device. " if opt else "")
            + "Find the code with torch.profiler(with_stack=True) or py-spy: typical causes are data loading "
            "without DataLoader workers, per-step logging or metrics, and Python loops over parameters.",
            subject=subject)
