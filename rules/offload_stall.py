"""GC020 offload-stall."""
from __future__ import annotations

from dataclasses import dataclass, field

from gcdoctor.units import cost_words
from gcdoctor.types import CONFIGURATION, EXPERIMENT, Evidence, Rule, Verdict, severity_rank
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import OffloadFacts, OffloadVariant, read_copies, stall_shares
from gcdoctor.rules._offload import CpuLoad, link_peak, ms, pct, steps_in

CAUSE_PAGEABLE = "pageable copies"
CAUSE_LINK = "a saturated link"
CAUSE_OPTIMIZER = "a host-bound optimizer step"
CAUSE_EXPOSED = "copies not overlapped with compute"
CAUSE_WAIT = "the device waiting on the host"

FIXES = {
    CAUSE_PAGEABLE: "pin the host memory: save_on_cpu(pin_memory=True), DeepSpeed offload_optimizer/offload_param "
                    "pin_memory: true, DataLoader(pin_memory=True); check `ulimit -l` allows it",
    CAUSE_LINK: "move fewer bytes: offload less (the optimizer only, not parameters; keep the last layers' "
                "checkpoints on the device), use larger DeepSpeed buckets (reduce_bucket_size) so copies stream, "
                "overlap them with compute (overlap_comm: true, non_blocking copies on a side stream), or raise "
                "the batch so each byte moved pays for more compute",
    CAUSE_OPTIMIZER: "give the host optimizer more CPU (more cores/threads for DeepSpeed's CPU Adam, OMP_NUM_THREADS, "
                     "no other load on those cores) or offload fewer states (keep the optimizer on the device "
                     "where memory allows, or offload only part of it: ZeRO-Offload++ ratio, ZenFlow)",
    CAUSE_WAIT: "find what the host does while the device waits (GC021; blocking copies, .item()/.cpu() "
                "synchronisations, a CPU optimizer without enough cores) and move it off the critical path",
    CAUSE_EXPOSED: "overlap the copies with compute (pinned memory, non_blocking copies on a side stream, "
                   "prefetch the next layer's checkpoint during the current layer's backward), or offload less",
}


@dataclass
class StallReading:
    """What GC020 judges for one subject: a variant of the offload probe, or a bare trace."""

    subject: str
    stall_share: float
    exposed_copy_share: float
    host_wait_share: float
    reference_stall_share: float | None = None  # the "gc" variant, without offload
    per_step: bool = True  # False: totals over the whole trace (no step windows)
    copy_ms: float | None = None
    exposed_copy_ms: float | None = None
    h2d_bytes: float | None = None
    d2h_bytes: float | None = None
    pageable_share: float | None = None
    h2d_copy_gbs: float | None = None
    d2h_copy_gbs: float | None = None
    peak_gbs: float | None = None
    tx_max_gbs: float | None = None
    rx_max_gbs: float | None = None
    tx_mean_gbs: float | None = None
    rx_mean_gbs: float | None = None
    util_mean_pct: float | None = None
    util_min_pct: float | None = None
    optimizer_share: float | None = None
    optimizer_share_source: str = ""
    optimizer_device_busy_share: float | None = None
    cpu: CpuLoad | None = None
    step_ms: float | None = None
    slowdown_pct: float | None = None
    telemetry: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def judged_share(self) -> float:
        """The stall the offload adds: over the reference where there is one."""
        if self.reference_stall_share is None:
            return self.stall_share
        return max(self.stall_share - self.reference_stall_share, 0.0)


class OffloadStallRule(Rule):
    """What it checks:
    For each offload variant of the offload probe (activations offloaded with save_on_cpu, pinned
    or pageable; DeepSpeed cpu_checkpointing; DeepSpeed ZeRO-2 with the optimizer on the host),
    the share of the step in which the device makes no progress because of the host: host-device
    copies with no kernel running beside them, plus device idle time waiting for the host to issue
    work. The share added over layer checkpointing without offload (the "gc" variant) is judged.
    It then names the cause: pageable copies, a saturated PCIe link, or a host-bound optimizer
    step; otherwise copies that are simply not overlapped. On a bare trace (`gcdoctor analyze
    trace.json`) it judges the trace alone, when the trace has host-device copies.

    Why it matters:
    Offloading frees device memory by moving bytes over PCIe every step: recomputation then needs
    its inputs back, ZeRO-Offload sends gradients down and parameters up and runs Adam on the CPU.
    When the copies are not hidden behind compute the device waits: one Llama-3-8B layer with
    every activation offloaded took 75 ms instead of 11 ms on an H200, and ZeRO-Offload has been
    seen to turn a 0.5 s step into 7 s with the GPU idle more than 60% of the time (docs/references.md
    section 3). A stall of a third of the step costs as much as full recomputation itself.

    Evidence:
    From the trace of the profiled steps: exposed copy time and host-wait idle per step and as a
    share of the device window, bytes by direction, the pageable share, the bandwidth the copies
    reached; the same for the reference. From telemetry over the measured steps: PCIe TX/RX (mean
    and maximum) against the link's peak, device utilisation (mean and minimum), CPU load. From
    the step clock: the optimizer phase's share of the step and the slowdown against "gc".

    How to fix:
    Pageable copies: pin the host memory. Saturated link: offload less, larger buckets, overlap the
    copies with compute. Host-bound optimizer: more CPU threads for the host optimizer, fewer
    offloaded states. Copies merely not overlapped: move them to a side stream with pinned memory
    and prefetch. When nothing helps, recomputing (checkpointing without offload) is cheaper than
    moving the bytes.
    """

    code = "GC020"
    slug = "offload-stall"
    title = "Offload stall"
    requires = ()  # offload facts, or else a bare trace: checked in check()
    scope = EXPERIMENT  # the offload probe's variants; a bare trace's verdict is configuration
    topic = "offload"
    defaults = {
        # "material": a tenth of the step. Below it the stall is within the run-to-run spread of a
        # median of a few steps and below what a recompute policy change moves (selective recompute
        # costs +2-7%, docs/references.md section 3); above it the offload costs a real share of the step
        "min_stall_share": 0.10,
        # a third of the step: as much as full recomputation (one extra forward, <= +33% of the
        # FLOPs): recomputing instead of offloading would be faster
        "critical_stall_share": 0.33,
        # most copied bytes staged through pageable memory: the driver's bounce buffer serialises them
        # with the host (Nsight Systems' "pageable async memcpy" rule, docs/references.md section 5)
        "pageable_share": 0.5,
        # copies reach about 80-90% of the encoded link peak (TLP headers, flow control); at 80% the
        # link is as busy as it gets (the same line as GC040)
        "link_busy_pct": 80.0,
        # the optimizer phase is at least 40% of the step: on a device, AdamW over the probe's model is
        # a few percent of the step, so a phase this long is the host's Adam setting the pace
        "host_optimizer_share": 0.4,
        # CPU saturation lines, as GC041: a core above 95% is a thread that never pauses; the process
        # at 95% of one core; the whole host at 90%
        "core_busy_pct": 95.0,
        "proc_busy_pct": 95.0,
        "host_busy_pct": 90.0,
        # bare trace: host-device copies below 1% of the device window are not offload traffic
        "min_copy_share": 0.01,
        # bare trace: a stall is a copy that holds compute back, so it needs compute around it (two
        # kernels) and an offload's round trip (a copy out and one back: two copies); one stray memcpy
        # beside nothing is "100 % stalled" whatever the offload does
        "min_kernels": 2,
        "min_copies": 2,
        # no telemetry: the device is busy less than half of the optimizer phase's host time, so the
        # host spends the phase on work the device does not see (the Adam step on the CPU)
        "max_optimizer_device_busy_share": 0.5,
        # cpu_checkpointing took effect: at least 90% of the checkpoints' bytes left the device per step
        # (DeepSpeed keeps nothing else on that path; the rest is the last checkpoints it may keep)
        "min_offloaded_ratio": 0.9,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        o = facts.offload
        if o is not None and o.variants:
            return self._variants(facts, o, t)
        if "all" in facts.trace:
            out = self._bare_trace(facts, t)
            for v in out:
                v.scope, v.topic = CONFIGURATION, "trace"
            return out
        watched = [k for k in facts.trace if k.startswith("watch/") and "|" not in k]
        if watched:  # the user's own job: its profiled steps, copies alone (like a bare trace)
            out = [v for k in sorted(watched) for v in self._bare_trace(facts, t, k)]
            for v in out:
                v.scope, v.topic = CONFIGURATION, "watch"
            return out
        return [self.inconclusive(facts.missing_reason("offload"))]

    # -- the offload probe -------------------------------------------------------------------
    def _variants(self, facts: Facts, o: OffloadFacts, t: dict[str, float]) -> list[Verdict]:
        return self._stalls(facts, o, t) + [v for v in (self._offloaded(facts, x, t) for x in o.variants)
                                            if v is not None]

    def _offloaded(self, facts: Facts, v: OffloadVariant, t: dict[str, float]) -> Verdict | None:
        """Did a variant that should put the checkpoints on the host (DeepSpeed cpu_checkpointing) do so?
        The probe records three readings; this judges them: the bytes that went device-to-host per step
        (the trace's, else DeepSpeed's own counters) against the checkpoints it should have moved."""
        ck = v.ckpt_check
        if ck is None:
            return None
        subject = f"{v.variant}: checkpoints on the host"
        expected = ck.expected_offload_bytes_per_step
        got, how = ((ck.trace_d2h_bytes_per_step, "the trace's device-to-host copies")
                    if ck.trace_d2h_bytes_per_step is not None else
                    (ck.ds_offloaded_bytes_per_step, "DeepSpeed's offload counters"))
        if not expected or got is None:
            return self.inconclusive(f"{v.variant}: whether the checkpoints went to the host could not be checked ("
                                     + (ck.detail or "no trace and no DeepSpeed counters") + ")", subject=subject)
        mib = 2**20
        ev = [Evidence("expected to the host per step", expected / mib, "MiB"),
              Evidence(f"moved per step ({how})", got / mib, "MiB"), Evidence("ratio", got / expected, "x"),
              Evidence("checkpoints per step", ck.n_checkpoints), Evidence("kept on the device", ck.kept_on_device),
              Evidence("device memory held after forward", None if ck.saved_after_forward_bytes is None
                       else ck.saved_after_forward_bytes / mib, "MiB"),
              Evidence("the same with checkpoints on the device (gc)", None if ck.saved_after_forward_gc_bytes is None
                       else ck.saved_after_forward_gc_bytes / mib, "MiB")]
        if got >= t["min_offloaded_ratio"] * expected:
            return self.passed(f"{v.variant}: the checkpoints went to the host ({got / mib:,.1f} of "
                               f"{expected / mib:,.1f} MiB per step)", ev, subject=subject)
        return self.fired(
            "warning", f"{v.variant}: the checkpoints stayed on the device: {got / mib:,.1f} MiB per step went to the "
            f"host of {expected / mib:,.1f} MiB expected", ev,
            "DeepSpeed's cpu_checkpointing was asked to keep the layer checkpoints in host memory, but fewer bytes "
            "left the device than the checkpoints hold: the configuration did not take effect (partition_activations "
            "off, checkpointing configured after the model was wrapped, or DeepSpeed's checkpoint function not the one "
            "the model calls).",
            "Configure deepspeed.checkpointing (partition_activations=True, cpu_checkpointing=True) before the model "
            "runs and make the model call deepspeed.checkpointing.checkpoint; check the device memory held after the "
            "forward falls.", subject=subject,
            line=f"DeepSpeed cpu_checkpointing did not move the checkpoints to the host here ({got / expected:.0%})")

    def _stalls(self, facts: Facts, o: OffloadFacts, t: dict[str, float]) -> list[Verdict]:
        ref = o.get(o.reference)
        ref_stall = ref.stall_share if ref is not None and ref.ran else None
        readings, why_not = [], []
        for v in o.variants:
            if not v.offloads:
                continue
            if not v.ran:
                why_not.append(f"{v.variant}: {v.skipped or facts.missing_reason(f'offload.{v.variant}')}")
                continue
            if v.stall_share is None:
                why_not.append(f"{v.variant}: {_no_device_reason(facts, v)}")
                continue
            readings.append(_from_row(facts, o, v, ref_stall))
        if not readings:
            if facts.environment.device_kind == "cpu":
                return [self.inconclusive("CPU run: host and device are the same memory and the traces have no "
                                          "device metrics; run on a GPU")]
            return [self.inconclusive("no offload variant has device trace metrics: " + "; ".join(why_not))]
        out = [self._judge(r, t) for r in readings]
        fired = [v for v in out if v.status == "fired"]
        _device_finding(fired, readings)
        if not fired:
            ev = [Evidence(f"added stall, {r.subject}", pct(r.judged_share), "%") for r in readings]
            return [self.passed("No offload variant stalls the device for a material share of the step "
                                f"(below {pct(t['min_stall_share']):.0f}%)", ev)]
        return fired

    # -- a bare trace --------------------------------------------------------------------------
    def _bare_trace(self, facts: Facts, t: dict[str, float], key: str = "all") -> list[Verdict]:
        """A bare trace ("all"), or the profiled steps of a watched run ("watch/<trace>")."""
        tm = facts.trace[key]
        subject = "trace" if key == "all" else key
        if tm.setup_only:
            return [self.inconclusive(f"the trace holds only one-time setup ({tm.setup_reason})",
                                      subject=subject if key != "all" else "")]
        st, window_us = stall_shares(tm), tm.device_window_us
        if st is None or window_us is None:
            return [self.inconclusive(f"the trace has no device metrics ({tm.device_unavailable or 'no device ops'})",
                                      subject=subject if key != "all" else "")]
        c = read_copies(tm)
        steps = steps_in(facts, key)
        copy_share = c.time_us / window_us
        if copy_share < t["min_copy_share"]:
            return [self.passed(f"No host-device copy traffic to stall on: copies take {100 * copy_share:.1f}% of "
                                "the device time", [Evidence("host-device copy time", ms(c.time_us, steps),
                                                             "ms/step" if steps else "ms in the trace")],
                                subject=subject if key != "all" else "")]
        kernels = tm.kernel_count or 0
        n_copies = sum(s.count for s in tm.memcpy.values())
        if kernels < t["min_kernels"] or n_copies < t["min_copies"]:
            return [self.inconclusive(f"too few events to judge an offload stall: {kernels} kernel(s) and "
                                      f"{n_copies} cop{'y' if n_copies == 1 else 'ies'} (at least "
                                      f"{t['min_kernels']:g} and {t['min_copies']:g} needed)",
                                      subject=subject if key != "all" else "")]
        # the stall is the copies alone; idle waiting on the host is the host rules' (GC021-GC025)
        r = StallReading(subject=subject, stall_share=st.exposed_copy_share, exposed_copy_share=st.exposed_copy_share,
                         host_wait_share=0.0, per_step=steps is not None,
                         copy_ms=ms(c.time_us, steps), exposed_copy_ms=ms(c.exposed_us, steps),
                         h2d_bytes=c.h2d_bytes / (steps or 1), d2h_bytes=c.d2h_bytes / (steps or 1),
                         pageable_share=c.pageable_share, h2d_copy_gbs=c.bandwidth_gbs("HtoD"),
                         d2h_copy_gbs=c.bandwidth_gbs("DtoH"), peak_gbs=link_peak(facts), telemetry=False)
        r.notes.append(("Telemetry unavailable (a bare trace): judged on the trace alone." if key == "all" else
                        "Judged on the watched run's profiled steps (their trace).")
                       + " Device idle waiting on the host is not an offload stall: GC021-GC025 judge it by its cause.")
        return [self._judge(r, t)]

    # -- judgement -----------------------------------------------------------------------------
    def _judge(self, r: StallReading, t: dict[str, float]) -> Verdict:
        ev = _evidence(r)
        share = r.judged_share
        if share < t["min_stall_share"]:
            return self.passed(f"{r.subject}: the offload stalls the device {pct(share):.0f}% of the step, below "
                               f"{pct(t['min_stall_share']):.0f}%", ev, subject=r.subject)
        causes = _causes(r, t)
        severity = "critical" if share >= t["critical_stall_share"] else "warning"
        unit = "the step" if r.per_step else "the traced time"
        over = " more than without offload" if r.reference_stall_share is not None else ""
        headline = (f"{r.subject}: the device stalls on the offload {pct(share):.0f}% of {unit}{over} "
                    f"({', '.join(causes)})")
        parts = [f"Exposed host-device copies take {pct(r.exposed_copy_share):.0f}% of the device window"
                 + (f" and the device waits for the host another {pct(r.host_wait_share):.0f}%." if r.host_wait_share
                    else ".")]
        if r.reference_stall_share is not None:
            parts.append(f"Layer checkpointing without offload stalls {pct(r.reference_stall_share):.0f}%.")
        parts += [_explain(c, r) for c in causes]
        parts += r.notes
        recommendation = "; ".join(f"{c}: {FIXES[c]}" for c in causes) + (
            ". If the memory allows, checkpointing without offload is cheaper than moving the bytes.")
        return self.fired(severity, headline, ev, " ".join(parts), recommendation, subject=r.subject)


def _device_finding(fired: list[Verdict], readings: list[StallReading]) -> None:
    """One line for the bottom line: what CPU offload costs on this device at best (the cheapest
    variant that stalls, against layer checkpointing without offload), and any variant cheap enough
    not to stall. It goes on the most severe verdict."""
    costs = {r.subject: r.slowdown_pct for r in readings if r.slowdown_pct is not None}
    stalled = {v.subject for v in fired if costs.get(v.subject) is not None}
    if not stalled:
        return
    best = min(stalled, key=lambda s: costs[s])
    cheap = sorted((s for s in costs if s not in stalled), key=lambda s: costs[s])
    line = (f"CPU offload {cost_words(costs[best])} step time or more here ({best}): avoid it unless memory "
            "forces it")
    if cheap:
        line += f"; {cheap[0]} {cost_words(costs[cheap[0]])}"
    min(fired, key=lambda v: severity_rank(v.severity)).line = line


def _explain(cause: str, r: StallReading) -> str:
    if cause == CAUSE_PAGEABLE:
        return (f"{pct(r.pageable_share):.0f}% of the copied bytes go through pageable host memory: the driver stages "
                "them through a bounce buffer, slower and never overlapped.")
    if cause == CAUSE_LINK:
        return ("The copies run near the PCIe link's peak: the bus itself is the limit, so only fewer bytes or better "
                "overlap help.")
    if cause == CAUSE_OPTIMIZER:
        busy = ("the host CPU is saturated" if r.cpu is not None and r.cpu.known
                else f"the device is busy only {pct(r.optimizer_device_busy_share):.0f}% of it")
        return (f"The optimizer phase is {pct(r.optimizer_share):.0f}% of the step and {busy}: the device waits for "
                "the host's optimizer step.")
    if cause == CAUSE_WAIT:
        return ("Most of the stall is the device idle with its next operation not yet issued, and the host is not "
                "saturated: it is blocked or busy elsewhere, not computing for the device.")
    return ("The copies are neither pageable nor at the link's peak: they are simply issued where no compute runs "
            "beside them (on the compute stream, or waited for at once).")


def _causes(r: StallReading, t: dict[str, float]) -> list[str]:
    causes = []
    if r.pageable_share is not None and r.pageable_share >= t["pageable_share"]:
        causes.append(CAUSE_PAGEABLE)
    if r.peak_gbs:
        line = t["link_busy_pct"] / 100.0 * r.peak_gbs
        rates = [x for x in (r.tx_max_gbs, r.rx_max_gbs, r.h2d_copy_gbs, r.d2h_copy_gbs) if x is not None]
        if rates and max(rates) >= line:
            causes.append(CAUSE_LINK)
    if r.optimizer_share is not None and r.optimizer_share >= t["host_optimizer_share"]:
        if r.cpu is not None and r.cpu.known:
            host_bound = r.cpu.saturated(t)
        else:  # trace alone: the device idle for most of the optimizer's host time
            host_bound = (r.optimizer_device_busy_share is not None
                          and r.optimizer_device_busy_share < t["max_optimizer_device_busy_share"])
        if host_bound:
            causes.append(CAUSE_OPTIMIZER)
    if not causes:
        causes.append(CAUSE_WAIT if r.host_wait_share > r.exposed_copy_share else CAUSE_EXPOSED)
    return causes


def _from_row(facts: Facts, o: OffloadFacts, v: OffloadVariant, ref_stall: float | None) -> StallReading:
    cpu = CpuLoad(v.cpu_pct_mean, v.cpu_max_core_pct_mean, v.proc_cpu_pct_mean)
    r = StallReading(
        subject=v.variant, stall_share=v.stall_share or 0.0, exposed_copy_share=v.exposed_copy_share or 0.0,
        host_wait_share=v.host_wait_share or 0.0, reference_stall_share=ref_stall, copy_ms=v.copy_ms,
        exposed_copy_ms=v.exposed_copy_ms, h2d_bytes=v.h2d_bytes, d2h_bytes=v.d2h_bytes, pageable_share=v.pageable_share,
        h2d_copy_gbs=v.h2d_copy_gbs, d2h_copy_gbs=v.d2h_copy_gbs,
        peak_gbs=link_peak(facts, o.device_key) or v.pcie_peak_gbs,
        tx_max_gbs=v.pcie_tx_gbs_max, rx_max_gbs=v.pcie_rx_gbs_max, tx_mean_gbs=v.pcie_tx_gbs_mean,
        rx_mean_gbs=v.pcie_rx_gbs_mean, util_mean_pct=v.util_pct_mean, util_min_pct=v.util_pct_min,
        optimizer_share=v.optimizer_share, optimizer_share_source="optimizer phase / step (device events)",
        optimizer_device_busy_share=v.optimizer_device_busy_share, cpu=cpu, step_ms=v.step_ms,
        slowdown_pct=v.slowdown_pct,
        telemetry=cpu.known or v.pcie_tx_gbs_mean is not None or v.util_pct_mean is not None)
    if not r.telemetry:
        r.notes.append(f"Telemetry unavailable ({facts.missing_reason('telemetry')}): judged on the trace alone.")
    return r


def _no_device_reason(facts: Facts, v: OffloadVariant) -> str:
    if v.trace_key is None:
        return facts.unavailable.get(f"trace.offload/{v.variant}") or "not profiled (--no-profile?)"
    tm = facts.trace.get(v.trace_key)
    return f"no device metrics in its trace ({tm.device_unavailable if tm is not None else 'trace missing'})"


def _evidence(r: StallReading) -> list[Evidence]:
    per = "/step" if r.per_step else " in the trace"
    mib = 2**20
    ev = [Evidence("stall share (exposed copies + host-wait idle)", pct(r.stall_share), "% of the device window"),
          Evidence("exposed host-device copies", r.exposed_copy_ms, f"ms{per}"),
          Evidence("host-device copies, all", r.copy_ms, f"ms{per}"),
          Evidence("host-wait idle", pct(r.host_wait_share), "% of the device window")]
    if r.reference_stall_share is not None:
        ev.append(Evidence("stall share of gc (no offload)", pct(r.reference_stall_share), "%"))
    if r.step_ms is not None:
        ev.append(Evidence("step", r.step_ms, "ms"))
    if r.slowdown_pct is not None:
        ev.append(Evidence("step time vs gc", r.slowdown_pct, "%"))
    ev += [Evidence("host-to-device bytes", None if r.h2d_bytes is None else r.h2d_bytes / mib, f"MiB{per}"),
           Evidence("device-to-host bytes", None if r.d2h_bytes is None else r.d2h_bytes / mib, f"MiB{per}"),
           Evidence("pageable share of copied bytes", pct(r.pageable_share), "%"),
           Evidence("copy bandwidth HtoD / DtoH", _pair(r.h2d_copy_gbs, r.d2h_copy_gbs), "GB/s")]
    ev.append(Evidence("PCIe link peak (per direction)", r.peak_gbs, "GB/s"))
    if r.telemetry:
        ev += [Evidence("PCIe RX (host to device) mean / max", _pair(r.rx_mean_gbs, r.rx_max_gbs), "GB/s"),
               Evidence("PCIe TX (device to host) mean / max", _pair(r.tx_mean_gbs, r.tx_max_gbs), "GB/s"),
               Evidence("device utilisation mean / min", _pair(r.util_mean_pct, r.util_min_pct), "%")]
        if r.cpu is not None:
            ev += [Evidence("host CPU mean", r.cpu.cpu_pct, "%"), Evidence("busiest core mean", r.cpu.max_core_pct, "%"),
                   Evidence("process CPU mean (100 = one core)", r.cpu.proc_pct, "%")]
    else:
        ev.append(Evidence("telemetry", "unavailable: judged on the trace alone"))
    if r.optimizer_share is not None:
        ev.append(Evidence(f"optimizer share ({r.optimizer_share_source})", pct(r.optimizer_share), "%"))
    return ev


def _pair(a: float | None, b: float | None) -> str | None:
    if a is None and b is None:
        return None
    f = (lambda x: "n/a" if x is None else f"{x:.1f}")
    return f"{f(a)} / {f(b)}"
