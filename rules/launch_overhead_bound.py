"""GC010 launch-overhead-bound granularity."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, EXPERIMENT, Evidence, Rule, Verdict, severity_rank
from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import GranularityGroup, GranularityVariant, LaunchCost
from gcdoctor.rules._granularity import TRADEOFF_DEFAULTS, best_tradeoff
from gcdoctor.facts.trace import TraceKey, judged_window, trace_window

MIB = 2**20
CAUSE_LAUNCH, CAUSE_HOST = "kernel launches", "host-side work per checkpoint region"


class LaunchOverheadBoundRule(Rule):
    """What it checks:
    For each checkpointing variant of the granularity probe, whether its extra step time over
    the coarser variant it refines (fine and sub-layer over layer-level, per-Linear over
    per-block, everything else over no checkpointing), and failing that over no checkpointing,
    is overhead rather than recomputed math: either kernel launches (extra kernels per step x
    the device's measured per-launch cost) or host-side work per checkpoint region (extra
    regions x the measured fixed cost of a region, plus the ops inside them x the measured cost
    per op, both from the launch-cost microbenchmark). Where the variant was profiled it also
    asks the trace to agree: the device idle for much of the step and, for launches, kernels
    shorter than their launch calls. It reports a variant that saves no activation memory, or
    recomputes nothing, as such. On a bare trace (`gcdoctor analyze trace.json`, no granularity
    facts) it judges the trace alone: a device idle much of the time, waiting on the host,
    running mostly kernels shorter than their launches.

    Why it matters:
    Small checkpoint regions multiply kernels and per-region bookkeeping. When the host cannot
    issue work as fast as the device retires it, the device waits and the step time is set by
    launches and Python, not by math; on a device with expensive launches this can dominate.
    Non-reentrant checkpointing also stops recomputing as soon as the tensors backward needs
    exist again, so a region around a single Linear saves and recomputes nothing: pure cost.

    Evidence:
    Median step times of the variant and of its reference at equal batch, sequence, dtype and
    optimizer; kernels, checkpoint regions and ops inside regions per step of both; the measured
    per-launch cost, graph-replay cost per op and host cost of a region (facts.granularity.launch);
    device idle share, host-wait share of the idle time, short-kernel share and median kernel
    duration from the profiled steps; activation memory kept for backward and recomputed ops.
    Bare trace: device idle and host-wait time, short-kernel share, median kernel, the share of
    the host window covered by ops and by launch calls.

    How to fix:
    Checkpoint coarser regions (whole decoder layers, or every N-th layer to give memory back
    for speed); do not wrap single Linear layers (they save nothing). Remove launch overhead
    with CUDA graphs (torch.cuda.CUDAGraph, or torch.compile(mode="reduce-overhead")), and
    per-region host work with torch.compile, which traces checkpoint regions into the compiled
    graph instead of running their Python bookkeeping every step. Larger batches or sequences
    make each kernel longer and hide launches.
    """

    code = "GC010"
    slug = "launch-overhead-bound"
    title = "Launch-overhead-bound granularity"
    requires = ()  # granularity facts, or else trace metrics: checked in check()
    scope = EXPERIMENT  # the granularity probe's variants; a bare trace's verdicts are configuration
    topic = "granularity"
    defaults = {
        # extra step time over the coarser variant below which there is nothing to explain: the
        # spread of a median of a few steps is a few percent, and GC001's band is +20..35%
        "min_extra_pct": 10.0,
        # "dominated by overhead": the overhead estimate explains at least half the extra time
        "min_explained_share": 0.5,
        # "device idle much of the step": Nsight Systems flags GPU utilisation < 50%; a lower bar,
        # since only the extra time (not the whole step) has to be overhead (docs/references.md s5)
        "min_idle_share": 0.3,
        # "kernels shorter than their launches": HTA's short kernel (shorter than its own launch
        # call); at least half of the step's kernels (docs/references.md s5)
        "min_short_kernel_share": 0.5,
        # fallback when a trace has no launch joins: TraceLens counts kernels < 10 us as short
        "short_kernel_us": 10.0,
        # trace-only path: idle mostly waiting on the host (HTA's host-wait class)
        "min_host_wait_share": 0.5,
        # trace-only path: ops (their dispatch and launch calls) cover at least half the host window
        # -> the launches are the cost; below it the host spends most of its time between ops
        # (Python, autograd bookkeeping such as checkpoint regions)
        "min_op_coverage": 0.5,
        # bare trace: device idle while the host dispatches or runs Python inside checkpointed regions,
        # share of the steady-state step (as GC021's line for the whole step)
        "min_region_idle_share": 0.2,
        # bare trace: a region's launch overhead is seen against the kernels it launches; a checkpointed
        # decoder layer launches tens (forward and recompute), so under ten kernels in the judged
        # window there is no region to judge, only a few stray events
        "min_region_kernels": 10,
        # the best trade-off named in the verdicts (and by GC011): see rules/_granularity.py
        **TRADEOFF_DEFAULTS,
        # "saves no memory": below 2% of the activations of the variant without checkpointing,
        # within allocator rounding and transients; a real checkpoint saving is tens of percent
        "min_saving_pct": 2.0,
        # CUDA graphs remove most launch cost when a replayed op costs at most half a launch
        "graph_gain_ratio": 0.5,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        g = facts.granularity
        if g is None or not g.groups:
            if facts.trace:
                return self._trace_only(facts, t)
            return [self.inconclusive(facts.missing_reason("granularity"))]
        out: list[Verdict] = []
        for group in g.groups:
            out += self._group(facts, group, g.launch, t)
        return _one_finding_per_kind(out)

    # -- granularity facts -------------------------------------------------------------------
    def _group(self, facts: Facts, group: GranularityGroup, lc: LaunchCost | None,
               t: dict[str, float]) -> list[Verdict]:
        out: list[Verdict] = []
        for v in group.variants:
            if v.variant == "none" or not v.fits:
                continue
            verdict = self._variant(facts, group, v, lc, t)
            if verdict is not None:
                out.append(verdict)
        if not any(x.status == "fired" and x.severity == "warning" for x in out):
            best = best_tradeoff(group, t)
            best_text = (f"; best trade-off: {best.variant} (saves {_mib(best.memory_saved_bytes)} MiB of activations, "
                         f"{best.time_added_pct:+.0f}% step time)" if best is not None else "")
            out.append(self.passed(
                f"{group.name}: no checkpointing variant is overhead-bound{best_text}",
                _launch_evidence(lc), subject=group.name))
        return out

    def _variant(self, facts: Facts, group: GranularityGroup, v: GranularityVariant, lc: LaunchCost | None,
                 t: dict[str, float]) -> Verdict | None:
        """Against the coarser variant it refines first, then against no checkpointing: a variant
        whose regions add only overhead over `none` (per-Linear regions) is judged there."""
        subject = f"{group.name}/{v.variant}"
        no_saving = v.memory_saved_pct is not None and v.memory_saved_pct < t["min_saving_pct"]
        no_recompute = (v.recomputed_ops_per_step == 0 if v.recomputed_ops_per_step is not None
                        else (v.recompute_share is not None and v.recompute_share <= 0.0))
        memory_note = _memory_note(v, no_saving, no_recompute)
        none = group.get("none")
        candidates = [group.get(v.baseline_variant or "none")]
        if candidates[0] is not none:
            candidates.append(none)
        refs = [r for r in candidates if r is not None and r.fits]
        inconclusive: Verdict | None = None
        ev: list[Evidence] = []
        for base in refs:
            verdict, ev_base = self._compare(facts, group, v, base, lc, memory_note, no_saving, t)
            ev = ev or ev_base
            if verdict is not None and verdict.status == "fired":
                return verdict
            inconclusive = inconclusive or verdict
        if memory_note:
            what = " and ".join(w for w, on in (("saves no activation memory", no_saving),
                                                 ("recomputes nothing", no_recompute)) if on)
            cost = f" ({v.time_added_pct:+.0f}% step time vs none)" if v.time_added_pct is not None else ""
            return self.fired("info", f"{subject} {what}{cost}", ev, memory_note + " " + _region_cost_text(v, lc),
                              _instead(group, v, refs[0] if refs else v, no_saving, t), subject=subject,
                              line=f"{v.variant} checkpointing ({v.description.split(',')[0]}) saves nothing "
                                   "here" if no_saving else "")
        return inconclusive

    def _compare(self, facts: Facts, group: GranularityGroup, v: GranularityVariant, base: GranularityVariant,
                 lc: LaunchCost | None, memory_note: str, no_saving: bool,
                 t: dict[str, float]) -> tuple[Verdict | None, list[Evidence]]:
        """(a warning or an inconclusive verdict or None, the evidence) of `v` against `base`."""
        subject = f"{group.name}/{v.variant}"
        v_ms, base_ms = v.step_ms, base.step_ms
        assert v_ms is not None and base_ms is not None  # both fit
        dt_ms = v_ms - base_ms
        dt_pct = 100.0 * dt_ms / base_ms
        launch_ms = region_ms = None
        d_kernels = d_regions = None
        if lc is not None and lc.launch_us is not None and v.kernels_per_step is not None \
                and base.kernels_per_step is not None:
            d_kernels = v.kernels_per_step - base.kernels_per_step
            launch_ms = max(d_kernels, 0.0) * lc.launch_us / 1e3
        host_v, host_b = region_host_ms(v, lc), region_host_ms(base, lc)
        if host_v is not None and host_b is not None and v.regions_per_step is not None \
                and base.regions_per_step is not None:
            d_regions = v.regions_per_step - base.regions_per_step
            region_ms = max(host_v - host_b, 0.0)
        ev = [Evidence(f"step, {v.variant}", v.step_ms, "ms"), Evidence(f"step, {base.variant}", base.step_ms, "ms"),
              Evidence(f"extra time over {base.variant}", dt_pct, "%")]
        ev += _counts(v, base, d_kernels, d_regions)
        if dt_pct < t["min_extra_pct"] or dt_ms <= 0:
            return None, ev
        if launch_ms is None and region_ms is None:
            return self.inconclusive(
                f"{subject} adds {dt_pct:.0f}% over {base.variant}, but neither kernel counts nor the per-region "
                f"cost were measured ({facts.missing_reason('granularity.kernels_per_step')})", subject=subject), ev
        assert lc is not None  # an estimate needs the measured costs
        shares = {CAUSE_LAUNCH: (launch_ms or 0.0) / dt_ms, CAUSE_HOST: (region_ms or 0.0) / dt_ms}
        cause = max(shares, key=lambda k: shares[k])
        explained = shares[CAUSE_LAUNCH] + shares[CAUSE_HOST]
        ev += [Evidence("launch overhead estimate (extra kernels x launch cost)", launch_ms, "ms"),
               Evidence("host overhead estimate (extra regions x measured region cost)", region_ms, "ms"),
               Evidence("overhead estimate / extra time (above 1: the estimate exceeds what was added)",
                        explained, "x")]
        ev += _launch_evidence(lc) + _device_evidence(v)
        if explained < t["min_explained_share"]:
            return None, ev
        contradiction = self._device_contradicts(v, lc, cause, t)
        if contradiction is not None:
            ev.append(Evidence("not overhead-bound because", contradiction))
            return None, ev
        return self._fire(facts, group, v, base, lc, cause, shares, dt_ms, dt_pct, launch_ms, d_kernels, d_regions,
                          ev, memory_note, no_saving, t), ev

    def _device_contradicts(self, v: GranularityVariant, lc: LaunchCost | None, cause: str,
                            t: dict[str, float]) -> str | None:
        """Where the variant was profiled, the device must agree: idle much of the step, and for
        launches, kernels shorter than their launches. None: no contradiction (or nothing measured)."""
        if v.device_idle_share is not None and v.device_idle_share < t["min_idle_share"]:
            return (f"the device was busy {100 * (1 - v.device_idle_share):.0f}% of the step (idle below "
                    f"{100 * t['min_idle_share']:.0f}%): the host kept ahead, the overhead is hidden")
        if cause == CAUSE_LAUNCH:
            short = _short_kernels(v.short_kernel_share, v.kernel_median_us, lc.launch_us if lc else None, t)
            if short is False:
                return "most kernels run longer than their launch calls: launches overlap with device work"
        return None

    def _fire(self, facts: Facts, group: GranularityGroup, v: GranularityVariant, base: GranularityVariant,
              lc: LaunchCost, cause: str, shares: dict[str, float], dt_ms: float, dt_pct: float,
              launch_ms: float | None, d_kernels: float | None, d_regions: int | None, ev: list[Evidence],
              memory_note: str, no_saving: bool, t: dict[str, float]) -> Verdict:
        subject = f"{group.name}/{v.variant}"
        share = shares[cause]
        if share <= 1.0:
            tail = f"{100 * share:.0f}% of it {cause}"
        else:  # an estimate above the time added is not a share: say what the number is
            tail = f"{cause} alone estimated at {share * dt_ms:.1f} ms, more than the {dt_ms:.1f} ms added"
        headline = f"{subject}: {dt_pct:+.0f}% step time over {base.variant}, {tail}"
        if cause == CAUSE_LAUNCH:
            line = f"kernel launches cost {lc.launch_us:.1f} us here: small checkpoint regions turn launch-bound"
        else:
            line = f"each checkpoint region costs ~{lc.region_fixed_us:,.0f} us of host time here: avoid small ones"
        if v.device_idle_share is None:
            device = ("The device side was not measured here (" + facts.missing_reason("granularity.kernels_per_step")
                      + "), so the verdict rests on the measured costs alone.")
        else:
            device = (f"The device was idle {100 * v.device_idle_share:.0f}% of the step"
                      + (f", {100 * v.host_wait_idle_share:.0f}% of that waiting on the host"
                         if v.host_wait_idle_share is not None else "") + ".")
        if cause == CAUSE_LAUNCH:
            why = (f"{v.variant} runs {d_kernels:+,.0f} kernels per step over {base.variant}; at the measured "
                   f"{lc.launch_us:.2f} us per launch that is {launch_ms:.1f} ms of the {dt_ms:.1f} ms added. ")
        else:
            why = (f"{v.variant} has {d_regions:+d} checkpoint regions per step over "
                   f"{base.variant}; at the measured {lc.region_fixed_us:.0f} us per region plus "
                   f"{lc.region_per_op_us:.0f} us per op inside it, their Python and autograd bookkeeping is "
                   f"{shares[cause] * dt_ms:.1f} ms of the {dt_ms:.1f} ms added. ")
        return self.fired("warning", headline, ev, why + device + (" " + memory_note if memory_note else ""),
                          _instead(group, v, base, no_saving, t) + " " + _graphs_text(cause, lc, d_kernels, launch_ms, facts, t),
                          subject=subject, line=line)

    # -- a bare trace -----------------------------------------------------------------------
    def _trace_only(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        """Granularity alone: the device idle while the host dispatches or runs Python inside the
        checkpointed regions of the steady steps. Host causes elsewhere are GC021-GC025's."""
        runs = [k for k in map(TraceKey.parse, facts.trace) if k.window == "all"]
        if any(r.run is None for r in runs):
            runs = [TraceKey(None, "all")]
        if not runs:
            return [self.inconclusive("no whole-trace window in the trace metrics", scope=CONFIGURATION, topic="trace")]
        return [self._trace_run(facts, run, t) for run in runs]

    def _trace_run(self, facts: Facts, run: TraceKey, t: dict[str, float]) -> Verdict:
        jw = judged_window(facts.trace, run)
        subject = f"trace:{run}"
        name = "Trace" if run.run is None else run.run
        h, m = jw.idle, jw.metrics
        if h is None or m is None or not h.window_us:
            return self.inconclusive(f"{name}: {jw.why or 'no device idle split'}", subject=subject,
                                     scope=CONFIGURATION, topic="trace")
        windows = [trace_window(facts.trace, run, w) for w in ("ckpt-forward", "recompute")]
        regions = [r.host_idle for r in windows if r is not None and r.host_idle is not None]
        if not regions:
            return self.inconclusive(f"{name}: no checkpointed regions found (no gcdoctor/ckpt-forward or "
                                     "gcdoctor/recompute ranges, no recompute found): checkpoint granularity cannot "
                                     "be judged; the host causes of idle are GC021-GC025's", subject=subject,
                                     scope=CONFIGURATION, topic="trace")
        dispatch = sum(r.dispatch_us for r in regions)
        python = sum(r.python_us for r in regions)
        region_us = sum(r.window_us for r in regions)
        share = (dispatch + python) / h.window_us
        kernels = m.kernel_count or 0
        if kernels < t["min_region_kernels"] and share >= t["min_region_idle_share"]:  # too little to fire on
            return self.inconclusive(f"{name}: too few events to judge checkpoint granularity: {kernels} kernel(s) "
                                     f"in the judged window (at least {t['min_region_kernels']:g} needed)",
                                     subject=subject, scope=CONFIGURATION, topic="trace")
        if share > 1:  # the regions' idle lies outside the judged steps: no share of them to give
            return self.inconclusive(f"{name}: the checkpointed regions lie outside the judged steps (their idle is "
                                     f"{100 * share:.0f}% of the steps' window): nothing to judge", subject=subject,
                                     scope=CONFIGURATION, topic="trace")
        steps = jw.steps or 1
        unit = "ms/step" if jw.steps else "ms in the trace"
        ev = [Evidence("device idle inside checkpointed regions, host dispatching", dispatch / steps / 1e3, unit),
              Evidence("device idle inside checkpointed regions, host in Python", python / steps / 1e3, unit),
              Evidence("that idle, share of the steady-state window", 100 * share, "%"),
              Evidence("checkpointed regions, share of the window", 100 * region_us / h.window_us, "%"),
              Evidence("median kernel", m.kernel_median_us, "us"),
              Evidence("short kernels (shorter than their launch call)",
                       None if m.short_kernel_share is None else 100 * m.short_kernel_share, "%")]
        if share >= t["min_region_idle_share"]:
            cause = CAUSE_LAUNCH if dispatch >= python else "host-side work per checkpoint region"
            return self.fired(
                "warning", f"{name}: checkpointed regions idle the device {100 * share:.0f}% of the step, the host "
                f"{'dispatching their ops' if cause == CAUSE_LAUNCH else 'running their Python bookkeeping'}: "
                f"launch-overhead-bound granularity ({cause})", ev,
                "Inside the checkpointed regions (their forward and their recomputation) the device waits for the "
                "host: the regions are so small that issuing their ops, or checkpoint's per-region bookkeeping, "
                "costs more than their math.",
                "Checkpoint coarser regions (whole decoder layers) or fewer of them (every N-th layer); torch.compile "
                "the model to remove per-region Python work, CUDA graphs to remove launches. Run `gcdoctor diagnose "
                "--probes granularity` to measure this device's launch and region costs.",
                subject=subject, scope=CONFIGURATION, topic="trace")
        return self.passed(f"{name}: checkpointed regions are not launch-overhead-bound (the device idles "
                           f"{100 * share:.0f}% of the step waiting on the host inside them)", ev, subject=subject,
                           scope=CONFIGURATION, topic="trace")


# -- helpers -------------------------------------------------------------------------------

def _one_finding_per_kind(out: list[Verdict]) -> list[Verdict]:
    """Device findings (Verdict.line) are lessons about the device, not about one variant: keep the line
    of the most severe verdict of each kind (launches, region cost, no saving) and drop the others."""
    seen: set[str] = set()
    for v in sorted(out, key=lambda v: (severity_rank(v.severity), not v.subject.startswith("model/"))):
        if not v.line:
            continue
        kind = "saving" if v.severity == "info" else v.line.split(" ")[0]  # "kernel" | "each"
        if kind in seen:
            v.line = ""
        seen.add(kind)
    return out


def region_host_ms(v: GranularityVariant, lc: LaunchCost | None) -> float | None:
    """Host time per step of a variant's checkpoint regions: regions x fixed cost + ops inside
    regions x per-op cost, both measured by the launch-cost microbenchmark."""
    if lc is None or lc.region_fixed_us is None or lc.region_per_op_us is None or v.regions_per_step is None:
        return None
    ops = v.checkpointed_ops_per_step or 0
    return (v.regions_per_step * lc.region_fixed_us + ops * lc.region_per_op_us) / 1e3


def _short_kernels(share: float | None, median_us: float | None, launch_us: float | None,
                   t: dict[str, float]) -> bool | None:
    """Are kernels shorter than their launches? HTA's per-kernel test where the trace joined
    kernels to launches, else the median kernel against the launch cost (or TraceLens' 10 us)."""
    if share is not None:
        return share >= t["min_short_kernel_share"]
    if median_us is not None:
        return median_us < (launch_us if launch_us is not None else t["short_kernel_us"])
    return None


def _mib(n: int | float | None) -> str:
    return "?" if n is None else f"{n / MIB:,.1f}"


def _counts(v: GranularityVariant, base: GranularityVariant, d_kernels: float | None,
            d_regions: int | None) -> list[Evidence]:
    ev = [Evidence(f"checkpoint regions per step, {v.variant} / {base.variant}",
                   f"{_n(v.regions_per_step)} / {_n(base.regions_per_step)}"),
          Evidence(f"kernels per step, {v.variant} / {base.variant}",
                   f"{_n(v.kernels_per_step)} / {_n(base.kernels_per_step)}"),
          Evidence("ops recomputed per step", v.recomputed_ops_per_step),
          Evidence("activation memory saved vs none", None if v.memory_saved_bytes is None else v.memory_saved_bytes / MIB, "MiB"),
          Evidence("activation memory saved vs none (share)", v.memory_saved_pct, "%")]
    return ev


def _n(x: float | int | None) -> str:
    return "?" if x is None else f"{x:,.0f}"


def _launch_evidence(lc: LaunchCost | None) -> list[Evidence]:
    if lc is None:
        return [Evidence("measured launch cost", None)]
    return [Evidence("measured launch cost", lc.launch_us, "us"),
            Evidence("measured graph replay per op", lc.graph_replay_us_per_op, "us"),
            Evidence("measured host cost per checkpoint region (fixed)", lc.region_fixed_us, "us"),
            Evidence("measured host cost per op inside a region", lc.region_per_op_us, "us")]


def _device_evidence(v: GranularityVariant) -> list[Evidence]:
    return [Evidence("device idle share", None if v.device_idle_share is None else 100 * v.device_idle_share, "%"),
            Evidence("short kernels", None if v.short_kernel_share is None else 100 * v.short_kernel_share, "%"),
            Evidence("median kernel", v.kernel_median_us, "us")]


def _memory_note(v: GranularityVariant, no_saving: bool, no_recompute: bool) -> str:
    if no_saving and no_recompute:
        return (f"{v.variant} saves no activation memory and recomputes nothing: non-reentrant checkpointing "
                "stops recomputing once the tensors backward needs exist, and what these regions save for "
                "backward is their inputs, which are kept anyway. The regions are pure bookkeeping.")
    if no_saving:
        return (f"{v.variant} saves no activation memory ({v.memory_saved_pct:.1f}% of the activations without "
                "checkpointing): what its regions drop is kept by the ops around them.")
    if no_recompute:
        return (f"{v.variant} recomputes nothing: every tensor backward needs is already saved, so its checkpoint "
                "regions only add bookkeeping.")
    return ""


def _region_cost_text(v: GranularityVariant, lc: LaunchCost | None) -> str:
    ms = region_host_ms(v, lc)
    if ms is None or lc is None:
        return ""
    return (f"Its {v.regions_per_step} regions per step cost about {ms:.1f} ms of host time at the measured "
            f"{lc.region_fixed_us:.0f} us per region plus {lc.region_per_op_us:.0f} us per op inside one.")


def _instead(group: GranularityGroup, v: GranularityVariant, base: GranularityVariant, no_saving: bool,
             t: dict[str, float]) -> str:
    """Which granularity to use instead, and what it costs in memory."""
    parts = []
    if no_saving:
        parts.append(f"Remove these checkpoint regions ({v.description}): without them the step keeps the same "
                     "activation memory and skips their bookkeeping.")
    if base.variant == "none" and not no_saving:
        parts.append(f"Use no checkpointing here if the memory allows: it costs {_mib(v.memory_saved_bytes)} MiB "
                     f"more activation memory than {v.variant}.")
    elif base.variant != "none" and base is not v:
        assert base.step_ms is not None and v.step_ms is not None  # both fit
        extra = (None if v.saved_activation_bytes is None or base.saved_activation_bytes is None
                 else base.saved_activation_bytes - v.saved_activation_bytes)
        parts.append(("To save memory, use " if no_saving else "Use ") + f"{base.variant} instead ({base.description}): "
                     + ("activation memory not measured" if extra is None else
                        f"{_mib(extra)} MiB more activation memory kept for backward" if extra > 0 else
                        f"{_mib(-extra)} MiB less activation memory kept for backward" if extra < 0 else
                        "the same activation memory")
                     + f", {100 * (base.step_ms / v.step_ms - 1):+.0f}% step time.")
    best = best_tradeoff(group, t)
    if best is not None and best.variant not in (v.variant, base.variant):
        parts.append(f"Best trade-off measured in {group.name}: {best.variant} ({_mib(best.memory_saved_bytes)} MiB "
                     f"saved, {best.time_added_pct:+.0f}% step time).")
    return " ".join(parts)


def _graphs_text(cause: str, lc: LaunchCost | None, d_kernels: float | None, launch_ms: float | None,
                 facts: Facts, t: dict[str, float]) -> str:
    """Would CUDA graphs or torch.compile remove the overhead? From the measured replay cost."""
    if cause == CAUSE_HOST:
        return ("CUDA graphs replay kernels, not Python: the per-region bookkeeping stays unless the whole step is "
                "captured; torch.compile traces checkpoint regions into the compiled graph and removes it.")
    if lc is None or lc.graph_replay_us_per_op is None:
        return ("Device graphs could not be measured here (" + facts.missing_reason("granularity.launch.graph_replay_us_per_op")
                + "); torch.compile fuses small kernels and so launches fewer of them.")
    with_graphs = max(d_kernels or 0.0, 0.0) * lc.graph_replay_us_per_op / 1e3
    ratio = lc.graph_replay_us_per_op / lc.launch_us if lc.launch_us else None
    verdict = ("would remove most of it" if ratio is not None and ratio <= t["graph_gain_ratio"]
               else "would remove little of it")
    return (f"CUDA graphs {verdict}: a replayed op costs {lc.graph_replay_us_per_op:.2f} us against "
            f"{lc.launch_us:.2f} us per launch, so the extra kernels would cost about {with_graphs:.1f} ms instead of "
            f"{launch_ms:.1f} ms (torch.compile(mode='reduce-overhead') captures graphs and also fuses kernels).")
