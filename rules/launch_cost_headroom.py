"""GC011 launch-cost-headroom."""
from __future__ import annotations

from gcdoctor.types import EXPERIMENT, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import WHATIF_HOST, GranularityVariant, LaunchWhatIf
from gcdoctor.rules._granularity import TRADEOFF_DEFAULTS, best_tradeoff


class LaunchCostHeadroomRule(Rule):
    """What it checks:
    How much costlier kernel launches could get before each checkpointing variant of the model
    (the granularity probe's `model` group) turns host-bound: its break-even launch cost, from the
    launch-cost what-if (the host time the step needs to issue its work, measured from its
    profiled trace without the profiler's own cost and without launches blocked on a full queue,
    against its measured step time). It warns when the variant gcdoctor would pick (the best
    trade-off of the group, else layer checkpointing) breaks even below `min_headroom` times this
    device's own launch cost, and reports the headroom of every variant and its predicted
    checkpointing overhead at the what-if launch costs.

    Why it matters:
    A step whose host barely keeps ahead of the device turns host-bound with a slower host CPU, a
    busier host (data loading, logging) or a device with costlier launches (the MUSA case): its
    step time then grows with every launch, and finer checkpoint regions, which add host work,
    cost more than their recomputation. The break-even says how far this device is from that
    point, and the prediction what the same variants would cost on a device with costlier launches.

    Evidence:
    The device's launch cost (or the emulated one, `diagnose --emulate-launch-us`), and per variant
    its break-even launch cost, host issue time, device busy time, launches per step, measured step
    and predicted step and overhead over no checkpointing at the what-if launch costs.

    How to fix:
    Close to the break-even: checkpoint fewer, larger regions (whole layers, every N-th layer), make
    the host's work per step smaller (CUDA graphs or torch.compile, a larger batch or sequence so
    each launch does more work), and keep other work off the training process's CPU. On a device
    whose launches cost more than the break-even, prefer the variant with the highest break-even
    among those that save enough memory.
    """

    code = "GC011"
    slug = "launch-cost-headroom"
    title = "Launch-cost headroom of the checkpointing variants"
    requires = ("granularity",)
    scope = EXPERIMENT
    topic = "granularity"
    defaults = {
        # launch cost varies about 10% run to run (H200: 8.4-9.3 us over five loops) and a host under
        # load or a slower host CPU adds host time per launch; a variant that breaks even within 2x
        # of the measured cost is one busy host away from host-bound
        "min_headroom": 2.0,
        # the variant held against the launch cost: the best trade-off, as GC010 names it
        **TRADEOFF_DEFAULTS,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        g = facts.granularity
        if g is None:
            return [self.inconclusive(facts.missing_reason("granularity"))]
        group = g.group("model")
        base = g.launch.launch_us if g.launch is not None else None
        if group is None or base is None:
            return [self.inconclusive("the granularity probe measured no model group or no launch cost")]
        rows = [v for v in group.variants if v.whatif is not None and v.break_even_launch_us is not None]
        if not rows:
            return [self.inconclusive(f"no what-if for the model's variants ({facts.missing_reason('granularity')})")]
        if all(_whatif(v).method == WHATIF_HOST for v in rows):
            return [self.inconclusive("on the CPU the host is the device: every extra microsecond per op adds to "
                                      "the step, there is no device to keep ahead of", subject="model")]
        emu = g.emulation
        device = (f"the emulated {base:.1f} us (+{emu.target_us:g} us per op)" if emu is not None
                  else f"this device's {base:.1f} us")
        pick = best_tradeoff(group, t) or group.get("layer")
        ev = [Evidence("launch cost of this run" + (" (emulated)" if emu else ""), base, "us")]
        ev += _rows(g.whatif_launch_us, rows, base)
        if pick is not None and pick.break_even_launch_us is not None:
            headroom = pick.break_even_launch_us / base
            subject = f"model/{pick.variant}"
            if headroom < t["min_headroom"]:
                state = "is host-bound already" if headroom <= 1.0 else f"is {headroom:.1f}x from host-bound"
                return [self.fired(
                    "warning", f"{subject}: the host keeps ahead of the device only up to "
                    f"{pick.break_even_launch_us:.1f} us per launch, {device}: it {state}", ev,
                    f"{pick.variant} needs {_whatif(pick).host_issue_ms:.1f} ms of host time per step to issue "
                    f"{_whatif(pick).launches_per_step or 0:,.0f} launches, against a {pick.step_ms:.1f} ms step: "
                    "a little more host time per launch and the device waits on the host." + _emu_note(g),
                    "Checkpoint fewer, larger regions; cut host work per step (CUDA graphs or torch.compile, larger "
                    "batches or sequences); keep other work off this process's CPU. " + _best_at_high_cost(g, rows),
                    subject=subject, line=f"launches cost {base:.1f} us here: {pick.variant} checkpointing {state}")]
        low = min(rows, key=_break_even)
        high = max(rows, key=_break_even)
        tail = ""
        if pick is not None and pick.predicted_overhead_pct and pick.predicted_overhead_pct[-1] is not None \
                and pick.time_added_pct is not None:
            tail = (f"; at {g.whatif_launch_us[-1]:g} us per launch {pick.variant} would cost "
                    f"{pick.predicted_overhead_pct[-1]:+.0f}% ({pick.time_added_pct:+.0f}% here)")
        return [self.passed(
            f"model: every variant stays device-bound up to {low.break_even_launch_us:.0f} us ({low.variant}) to "
            f"{high.break_even_launch_us:.0f} us ({high.variant}) per launch, {_break_even(low) / base:.1f}-"
            f"{_break_even(high) / base:.1f}x {device}{tail}", ev, subject="model",
            explanation=_emu_note(g).strip())]


def _whatif(v: GranularityVariant) -> LaunchWhatIf:
    """The what-if of a variant with a break-even launch cost (derive_whatif sets it from the what-if)."""
    assert v.whatif is not None
    return v.whatif


def _break_even(v: GranularityVariant) -> float:
    """The break-even launch cost of one of the rows (the variants that have one)."""
    assert v.break_even_launch_us is not None
    return v.break_even_launch_us


def _rows(points: list[float], rows: list, base: float) -> list[Evidence]:
    ev = []
    for v in rows:
        wi = v.whatif
        ev.append(Evidence(f"{v.variant}: break-even launch cost ({v.break_even_launch_us / base:.1f}x)",
                           v.break_even_launch_us, "us"))
        ev.append(Evidence(f"{v.variant}: host issue / device busy / step per step",
                           f"{_ms(wi.host_issue_ms)} / {_ms(wi.device_busy_ms)} / {_ms(v.step_ms)} ms"))
        for x, p, o in zip(points, v.predicted_step_ms, v.predicted_overhead_pct):
            ev.append(Evidence(f"{v.variant}: predicted step at {x:g} us per launch (vs none)",
                               f"{_ms(p)} ms ({'n/a' if o is None else f'{o:+.0f}%'})"))
    return ev


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


def _emu_note(g) -> str:
    e = g.emulation
    if e is None:
        return ""
    back = "" if e.readback_extra_us is None else f", read back +{e.readback_extra_us:.1f} us by the microbenchmark"
    return (f" This run emulated +{e.target_us:g} us of host time per launching op{back}: the break-even is "
            "relative to that cost.")


def _best_at_high_cost(g, rows: list) -> str:
    """The memory-saving variant with the lowest predicted step at the highest what-if cost."""
    if not g.whatif_launch_us:
        return ""
    cands = [v for v in rows if v.variant != "none" and v.memory_saved_pct is not None and v.memory_saved_pct >= 10.0
             and v.predicted_step_ms and v.predicted_step_ms[-1] is not None]
    if not cands:
        return ""
    best = min(cands, key=lambda v: v.predicted_step_ms[-1])
    return (f"At {g.whatif_launch_us[-1]:g} us per launch the fastest variant that saves at least 10% of the "
            f"activations is predicted to be {best.variant} ({best.predicted_step_ms[-1]:.1f} ms per step).")

