"""Shared reading of the host rules (GC021-GC026): for every profiled run (or a bare trace) the
steady-state window, its device idle split by host cause (facts.trace HostIdle), and the base of a
rule that judges one cause. Each cause's idle time is judged by exactly one rule; the share that
lies inside checkpointed regions is GC010's (granularity), and copies are GC020's."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import HostIdle, JudgedWindow, TraceKey, TraceMetrics, judged_window, trace_window
from gcdoctor.rules._offload import PHASES, STEP_PROBES
from gcdoctor.rules._scope import probe_of, scope_of

# checkpointed regions: their dispatch and Python idle is checkpoint granularity (GC010)
CKPT_WINDOWS = ("ckpt-forward", "recompute")
PHASE_WORDS = {"optimizer": "the optimizer step", "forward": "the forward", "loss": "the loss",
               "ckpt-forward": "checkpointed forwards", "backward": "the backward", "recompute": "the recomputation"}


def host_runs(facts: Facts) -> list[TraceKey]:
    """Traces the host rules judge: a bare trace, or each profiled training step of a run."""
    runs = [TraceKey.parse(k) for k in facts.trace]
    runs = [r for r in runs if r.window == "all"]
    if any(r.run is None for r in runs):
        return [TraceKey(None, "all")]
    return [r for r in runs if r.probe in STEP_PROBES]


def subject_of(run: TraceKey) -> str:
    return "trace" if run.run is None else run.run


def ckpt_idle(facts: Facts, run: TraceKey, cause: str) -> float:
    """Idle of `cause` (us) inside checkpointed regions of the steady steps: GC010 judges it."""
    total = 0.0
    for w in CKPT_WINDOWS:
        m = trace_window(facts.trace, run, w)
        if m is not None and m.host_idle is not None:
            total += getattr(m.host_idle, f"{cause}_us")
    return total


def where(facts: Facts, run: TraceKey, causes: tuple[str, ...]) -> tuple[str | None, float]:
    """The labelled phase holding most of the causes' idle, and that idle (us); None without phases."""
    best, best_us = None, 0.0
    for phase in PHASES:
        m = trace_window(facts.trace, run, phase)
        if m is None or m.host_idle is None:
            continue
        us = sum(getattr(m.host_idle, f"{c}_us") for c in causes)
        if us > best_us:
            best, best_us = phase, us
    return best, best_us


def idle_of(jw: JudgedWindow) -> HostIdle:
    """The idle split of a window the host rules judge: HostCauseRule.check judges only windows with one."""
    h = jw.idle
    assert h is not None
    return h


def metrics_of(jw: JudgedWindow) -> TraceMetrics:
    """The metrics of a window the host rules judge (one with an idle split)."""
    m = jw.metrics
    assert m is not None
    return m


def per_step(us: float, jw: JudgedWindow) -> tuple[float, str]:
    """(value, unit) of an idle time: ms per steady step, or ms over the traced time."""
    if jw.steps:
        return us / jw.steps / 1e3, "ms/step"
    return us / 1e3, "ms in the trace"


def top(d: dict[str, float], n: int = 3) -> list[tuple[str, float]]:
    return sorted(d.items(), key=lambda kv: -kv[1])[:n]


class HostCauseRule(Rule):
    """Base of a rule judging one host cause of device idle over the steady-state steps."""

    cause = ""  # a HostIdle cause: sync | setup | dispatch | data | python
    what = ""  # "waits on synchronisations" (headline verb phrase)
    requires = ()
    defaults: dict[str, float] = {}

    ckpt_is_gc010 = False  # this cause's idle inside checkpointed regions is granularity (GC010's)
    judged_label = ""  # the evidence label of the judged idle ("device idle, <cause>" when empty)

    def judged_us(self, facts: Facts, jw: JudgedWindow) -> float:
        total = getattr(idle_of(jw), f"{self.cause}_us")
        return max(total - ckpt_idle(facts, jw.run, self.cause), 0.0) if self.ckpt_is_gc010 else total

    def start(self, facts: Facts, jw: JudgedWindow) -> tuple[float, float, str, list[Evidence]]:
        """(idle judged in us, its share of the window, subject, the evidence every cause shows)."""
        us = self.judged_us(facts, jw)
        ev = self.base_evidence(jw, us)
        h = idle_of(jw)
        ck = getattr(h, f"{self.cause}_us") - us
        if ck > 0:
            ev.append(Evidence("inside checkpointed regions (judged by GC010)", *per_step(ck, jw)))
        return us, us / h.window_us, subject_of(jw.run), ev

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        runs = host_runs(facts)
        if not runs:
            return [self.inconclusive("no profiled training step in the facts (the batch sweep and offload probes "
                                      "profile theirs; or analyze a trace)")]
        out: list[Verdict] = []
        passed: list[Verdict] = []
        why_not: list[str] = []
        for run in runs:
            jw = judged_window(facts.trace, run)
            h = jw.idle
            if jw.metrics is None or h is None:
                why_not.append(f"{subject_of(run)}: {jw.why}")
                continue
            if not h.window_us:
                why_not.append(f"{subject_of(run)}: an empty window")
                continue
            v = self.one_off(jw, t) or self.judge(facts, jw, t)
            key = str(jw.run)
            v.scope, v.topic = scope_of(key), probe_of(key)
            (out if v.status == "fired" else passed).append(v)
        if out:
            return out
        if passed:
            return passed if len(passed) == 1 else [self._all_passed(passed)]
        return [self.inconclusive("; ".join(why_not[:3]) + ("; ..." if len(why_not) > 3 else ""),
                                  scope=CONFIGURATION, topic="trace" if runs[0].run is None else None)]

    def _all_passed(self, passed: list[Verdict]) -> Verdict:
        v = self.passed(f"No profiled run's device {self.what} for a material share of the steady steps",
                        [Evidence(p.subject, p.headline) for p in passed[:6]])
        v.scope, v.topic = passed[0].scope, passed[0].topic
        return v

    def one_off(self, jw: JudgedWindow, t: dict[str, float]) -> Verdict | None:
        """A passed verdict when this cause crosses its line only because of one gap (the first
        allocation, the first launch, autotuning, initialisation): a one-off is not a recurring
        cost. None otherwise (judge as usual)."""
        h = idle_of(jw)
        if h.largest_gap_cause != self.cause or not h.largest_gap_us or "min_share" not in t:
            return None
        total = getattr(h, f"{self.cause}_us")
        if total < t["min_share"] * h.window_us or total - h.largest_gap_us >= t["min_share"] * h.window_us:
            return None
        subject = subject_of(jw.run)
        ev = self.base_evidence(jw, total) + one_off_evidence(h)
        return self.passed(f"{subject}: a one-off, not a recurring {self.cause} cost: one "
                           f"{h.largest_gap_us / 1e3:,.1f} ms gap ({h.largest_gap_what}) holds "
                           f"{100 * min(h.largest_gap_us / total, 1):.0f}% of the {self.cause} idle", ev,
                           subject=subject)

    def base_evidence(self, jw: JudgedWindow, us: float) -> list[Evidence]:
        h = idle_of(jw)
        val, unit = per_step(us, jw)
        label = self.judged_label or f"device idle, {self.cause}"
        ev = [Evidence(label, val, unit),
              Evidence(f"{label}, share of the steady-state window", 100 * us / h.window_us, "%"),
              Evidence("device busy, share of the same window", 100 * h.busy_us / h.window_us, "%"),
              Evidence("device idle, all causes, share of the window", 100 * h.idle_us / h.window_us, "%"),
              Evidence("window judged", _window_text(jw))]
        return ev

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        raise NotImplementedError

    def grade(self, share: float, t: dict[str, float]) -> str | None:
        """None below the rule's material share; critical at the critical share."""
        if share < t["min_share"]:
            return None
        return "critical" if share >= t.get("critical_share", 2.0) else "warning"


def _window_text(jw: JudgedWindow) -> str:
    if jw.steps:
        text = f"{jw.steps} steady-state profiler step(s), each from its ProfilerStep range start to end"
    else:
        text = "the whole trace (no profiler steps to separate warm-up from steady state)"
    return text + (f"; {jw.why}" if jw.why else "")


def idle_summary(h: HostIdle) -> str:
    parts = [f"{c} {getattr(h, c + '_us') / 1e3:.1f} ms" for c in
             ("sync", "setup", "dispatch", "data", "python", "unrecorded", "queued") if getattr(h, c + "_us") > 0]
    return ", ".join(parts) or "none"


def one_off_evidence(h: HostIdle) -> list[Evidence]:
    return [Evidence("largest single idle gap the host caused", h.largest_gap_us / 1e3, "ms"),
            Evidence("its cause, and what the host was in", f"{h.largest_gap_cause}: {h.largest_gap_what}"),
            Evidence("idle gaps the host caused", h.host_gap_count)]


SAMPLED_SHARE = 0.1  # launch calls whose device op is missing, share: beyond clock and join noise (none
# on any complete recording in samples/traces)


def sampled(h: HostIdle | None) -> str:
    """Why the window looks sampled (device records dropped), or ""."""
    if h is None or not h.launch_call_count:
        return ""
    share = h.unmatched_launch_count / h.launch_call_count
    if share < SAMPLED_SHARE:
        return ""
    return f"{100 * share:.0f}% of the launch calls have no device op in the trace"
