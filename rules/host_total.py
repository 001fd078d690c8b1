"""GC028 host-starved-device."""
from __future__ import annotations

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import HostCauseRule, idle_of, one_off_evidence, per_step

# the rule judging each host cause alone, and its default line
CAUSE_RULES = {"sync": ("GC022", 0.05), "setup": ("GC023", 0.1), "dispatch": ("GC021", 0.2),
               "data": ("GC024", 0.1), "python": ("GC025", 0.2)}
WORDS = {"sync": "synchronisations", "setup": "allocator and setup calls", "dispatch": "dispatching ops",
         "data": "data loading", "python": "Python between ops"}
FIXES = {"sync": "remove per-step synchronisations (.item(), .cpu(), torch.cuda.synchronize()) or read values every N "
                 "steps",
         "setup": "keep allocations and kernel loading out of the steady state (no empty_cache(), fixed shapes)",
         "dispatch": "fewer, larger ops: torch.compile, CUDA graphs, fused optimizers, larger batches",
         "data": "DataLoader workers (num_workers, pin_memory, prefetch_factor)",
         "python": "move per-step Python (logging, metrics, data preparation) out of the step or into workers"}


class HostStarvedDeviceRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps, the device idle time the host caused in total: synchronisations,
    setup calls, data loading, dispatch and Python together (GC021-GC025 judge each cause alone
    against its own line, so 18% Python plus 12% dispatch passes both while the device idles 30%
    on the host). A single gap holding most of it is a one-off (the first allocation, the first
    launch, autotuning, initialisation before the first kernel) and is reported as that, not as a
    stall.

    Why it matters:
    The device's idle is what the step loses; which host activity fills it matters for the fix,
    not for the loss. A device kept waiting by several small host costs is as slow as one kept
    waiting by one large cost.

    Evidence:
    The host-caused idle per step and as a share of the window, each cause's share, the largest
    single gap and what the host was in.

    How to fix:
    Start with the largest cause (its rule's advice); in general keep the host ahead of the device:
    no per-step synchronisation, data loading in workers, fewer and larger ops (torch.compile, CUDA
    graphs), per-step Python out of the loop.
    """

    code = "GC028"
    slug = "host-starved-device"
    title = "The device waits on the host (all host causes together)"
    cause = "host"
    what = "waits on the host"
    judged_label = "device idle, all host causes"
    defaults = {
        # a quarter of the step: beyond the few percent of a healthy loop (0.2% on the H200 healthy
        # recording) and beyond any one cause's line but Python's and dispatch's
        "min_share": 0.25,
        "critical_share": 0.6,
        # one gap holding this share of the host-caused idle is a one-off when the rest is below the line
        "one_off_share": 0.5,
    }

    def judged_us(self, facts: Facts, jw: JudgedWindow) -> float:
        return idle_of(jw).host_us

    def one_off(self, jw: JudgedWindow, t: dict[str, float]) -> Verdict | None:
        return None  # judged in judge(): the one-off is this rule's finding

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h = idle_of(jw)
        us, share, subject, ev = self.start(facts, jw)
        shares = {c: getattr(h, f"{c}_us") / h.window_us for c in CAUSE_RULES}
        for c, sh in sorted(shares.items(), key=lambda kv: -kv[1]):
            if sh > 0:
                ev.append(Evidence(f"of it {WORDS[c]}", *per_step(getattr(h, f"{c}_us"), jw)))
        ev += one_off_evidence(h)
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: the host keeps the device idle {100 * share:.0f}% of the steady-state "
                               "time, all causes together", ev, subject=subject)
        rest = us - h.largest_gap_us
        if h.largest_gap_us >= t["one_off_share"] * us and rest < t["min_share"] * h.window_us:
            return self.fired(
                "info", f"{subject}: a one-off, not a stall: one {h.largest_gap_us / 1e3:,.1f} ms gap "
                f"({h.largest_gap_cause}: {h.largest_gap_what}) holds {100 * h.largest_gap_us / us:.0f}% of the "
                "host's idle", ev,
                "A single long gap (initialisation before the first kernel, the first allocation or launch, "
                "autotuning, compilation) makes most of the host-caused idle; the other gaps together idle the "
                f"device {100 * rest / h.window_us:.0f}% of the window. It happens once, not every step.",
                "Profile after warm-up (torch.profiler.schedule(wait=1, warmup=1, active=3) with prof.step() each "
                "step) to see the steady state; if the one-off itself matters (a short job), warm up the kernels "
                "or cache the autotuning.", subject=subject)
        top, top_share = max(shares.items(), key=lambda kv: kv[1])
        code, line = CAUSE_RULES[top]
        if top_share >= line and top_share * h.window_us >= 2 / 3 * us:
            return self.passed(f"{subject}: the host keeps the device idle {100 * share:.0f}% of the step, mostly "
                               f"{WORDS[top]} ({100 * top_share:.0f}%): {code} judges it", ev, subject=subject)
        parts = ", ".join(f"{WORDS[c]} {100 * sh:.0f}%" for c, sh in
                          sorted(shares.items(), key=lambda kv: -kv[1]) if sh >= 0.01)
        order = [c for c, sh in sorted(shares.items(), key=lambda kv: -kv[1]) if sh >= 0.05][:3] or [top]
        return self.fired(
            severity, f"{subject}: the device waits on the host {100 * share:.0f}% of the step ({parts})", ev,
            "No single host cause crosses its own line, but together they keep the device idle: each is the "
            "host failing to stay ahead of the device.",
            _sentence("; ".join(FIXES[c] for c in order)), subject=subject)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."
