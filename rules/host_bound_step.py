"""GC021 host-bound-step."""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.offload import summary_value
from gcdoctor.facts.trace import TraceMetrics
from gcdoctor.facts.trace import JudgedWindow
from gcdoctor.rules._host import PHASE_WORDS, HostCauseRule, idle_of, metrics_of, where
from gcdoctor.rules._scope import probe_of, scope_of
from gcdoctor.rules._offload import PHASES, CpuLoad, cpu_load, measurement_for, ms, pct, run_keys, steps_in, window

WHERE = {
    "optimizer": "the optimizer step (a CPU optimizer such as DeepSpeed's CPU Adam, or a per-parameter Python loop)",
    "forward": "Python and launch work inside the forward (see GC010 for launch-bound granularity)",
    "loss": "Python and launch work inside the loss",
    "ckpt-forward": "Python and launch work inside checkpointed regions (see GC010)",
    "backward": "autograd and launch work inside the backward",
    "recompute": "Python and launch work inside the recomputation (see GC010)",
    "outside": "work outside the labelled phases: between steps (data loading, logging, synchronisation)",
}


SHORT = {"optimizer": "the optimizer step", "forward": "the forward", "loss": "the loss",
         "ckpt-forward": "checkpointed forwards", "backward": "the backward", "recompute": "the recomputation",
         "outside": "work outside the labelled phases"}


@dataclass
class HostReading:
    subject: str
    host_wait_share: float  # device idle waiting for the host, of the device window
    idle_share: float | None
    host_wait_ms: float | None  # per step where the trace has step windows
    per_step: bool
    cpu: CpuLoad | None  # telemetry over the measured steps
    trace_host_busy_share: float | None  # host time inside CPU ops (sync calls excluded) / host wall
    util_mean_pct: float | None = None
    util_min_pct: float | None = None
    step_ms: float | None = None
    where: str | None = None  # phase with the most host time the device did not match, or "outside"
    where_share: float | None = None  # that host time, of the host-wait idle


class HostBoundStepRule(HostCauseRule):
    """What it checks:
    Over the steady-state steps of every profiled training step (the batch sweep's and the offload
    probe's variants, a watched job) or a bare trace, the device idle time while the host was busy
    dispatching: inside ops (aten dispatch, autograd) or launch calls, or in the launch latency of
    the op that ends the gap. Many short ops issued one by one with short gaps between them: the
    host, not the device, sets the pace (dispatch/launch-bound). Idle inside checkpointed regions is
    checkpoint granularity and GC010's; synchronisations, setup calls, data loading and Python
    between ops have their own rules (GC022-GC025). Where the run sampled telemetry it adds the host
    CPU load as evidence. Facts recorded before gcdoctor split idle by host cause are judged as
    before: host-wait idle with the CPU saturated.

    Why it matters:
    Checkpointing trades device memory for device compute. When the host sets the pace, extra
    compute is free and saved memory buys nothing: the step is as slow as dispatching its ops. The
    fix is fewer, larger ops or less dispatch per op, not checkpointing.

    Evidence:
    Dispatch idle per step and as a share of the steady-state window; idle gaps the host caused per
    step, their median length and how many are shorter than the short-gap threshold; the median
    kernel; ops per step; the labelled phase holding most of it; telemetry of the host CPU.

    A dispatch verdict needs many launch-scale gaps (at least `min_host_gaps`, median at most
    `max_launch_gap_us`); otherwise the host is doing work inside ops (a CPU optimizer, CPU tensors),
    not launching, and the verdict says so without CUDA-graph advice. One gap holding most of the
    idle is a one-off (a first allocation, a first launch, autotuning) and passes. A blocking copy the host sits in is GC022's (sync),
    and a step that already replays graphs (cudaGraphLaunch/hipGraphLaunch) is never told to use them.

    How to fix:
    CUDA graphs (torch.compile(mode="reduce-overhead"), torch.cuda.CUDAGraph) to replay the step's
    launches (not for a step that already replays them: capture the rest); torch.compile to fuse small ops; fused/foreach optimizers (fused=True); larger batches
    or sequences so each kernel runs longer; fewer, larger checkpoint regions (GC010).
    """

    code = "GC021"
    slug = "host-bound-step"
    title = "Host-bound step (dispatch/launch-bound)"
    cause = "dispatch"
    what = "waits on the host dispatching ops"
    defaults = {
        # a fifth of the step idle while the host dispatches: beyond the launch gaps of a healthy step
        # (a few percent) and half of Nsight Systems' "GPU utilisation < 50%" line (docs/references.md s5)
        "min_share": 0.2,
        "critical_share": 0.5,
        # facts without the host-cause split (recorded before it): host-wait idle share, and the CPU
        # saturation lines as GC041 (a core above 95% is one Python thread holding the GIL; the
        # process at 95% of a core; the host at 90%); trace alone: ops cover 90% of the host time
        "min_host_wait_share": 0.2,
        "core_busy_pct": 95.0,
        "proc_busy_pct": 95.0,
        "host_busy_pct": 90.0,
        "trace_host_busy_share": 0.9,
        # dispatch overhead is many launch-scale gaps: fewer host-caused gaps than this in the
        # judged window is a one-off (first allocation, first launch, autotuning), and a median
        # gap longer than this is host work inside ops, not launching (a launch costs 2-20 us;
        # 100 us leaves room for a slow host and a short Python gap between ops)
        "min_host_gaps": 20,
        "max_launch_gap_us": 100.0,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        # facts with the host-cause split (every trace analysed by this gcdoctor); older facts as before
        if any(m.host_idle is not None or m.setup_only for m in facts.trace.values()):
            return super().check(facts, t)
        return self._legacy_check(facts, t)

    ckpt_is_gc010 = True

    def judge(self, facts: Facts, jw: JudgedWindow, t: dict[str, float]) -> Verdict:
        h, m = idle_of(jw), metrics_of(jw)
        us, share, subject, ev = self.start(facts, jw)
        steps = jw.steps or 1
        unit = "per step" if jw.steps else "in the trace"
        ev += [Evidence("idle gaps the host caused", h.host_gap_count / steps, unit),
               Evidence("their median length", h.host_gap_median_us, "us"),
               Evidence(f"of them shorter than {m.short_gap_threshold_us:g} us",
                        100 * h.short_host_gap_count / h.host_gap_count if h.host_gap_count else None, "%"),
               Evidence("median kernel", m.kernel_median_us, "us"),
               Evidence("host ops", None if m.cpu_op_count is None else m.cpu_op_count / steps, unit)]
        phase, phase_us = where(facts, jw.run, ("dispatch",))
        if phase is not None and us > 0:
            ev.append(Evidence(f"of it in {PHASE_WORDS.get(phase, phase)}", 100 * min(phase_us / us, 1.0), "%"))
        meas = measurement_for(facts, jw.run.run) if jw.run.run else None
        cpu = cpu_load(meas.telemetry) if meas is not None and meas.telemetry else None
        if cpu is not None and cpu.known:
            ev += [Evidence("host CPU mean", cpu.cpu_pct, "%"), Evidence("busiest core mean", cpu.max_core_pct, "%"),
                   Evidence("process CPU mean (100 = one core)", cpu.proc_pct, "%")]
        ev.append(Evidence("CUDA/HIP graph replays", h.graph_launch_count / steps, unit))
        severity = self.grade(share, t)
        if severity is None:
            return self.passed(f"{subject}: dispatching ops idles the device {100 * share:.0f}% of the steady-state "
                               "time", ev, subject=subject)
        if cpu is not None and cpu.known and not cpu.saturated(t):
            return self.passed(f"{subject}: the host was inside ops {100 * share:.0f}% of the step while the device "
                               "idled, but its CPU is not saturated (blocked inside ops: I/O, a lock, another "
                               "process)", ev, subject=subject)
        in_phase = phase is not None and phase_us >= 0.5 * us
        mostly = f", mostly in {PHASE_WORDS.get(phase, phase)}" if in_phase else ""
        offload = (" This variant offloads to the host: see GC020 for the copies." if subject.startswith("offload/")
                   else "")
        launch_scale = (h.host_gap_count >= t["min_host_gaps"] and h.host_gap_median_us is not None
                        and h.host_gap_median_us <= t["max_launch_gap_us"])
        if not launch_scale:
            return self.fired(
                severity, f"{subject}: the device waits on host work inside ops {100 * share:.0f}% of the step"
                + mostly, ev,
                f"The host was inside ops while the device had nothing to run, in {h.host_gap_count} gap(s) with a "
                f"median of {h.host_gap_median_us or 0:,.0f} us: too few or too long to be launch overhead (a launch "
                "takes microseconds). The ops do host-side work: a CPU optimizer, CPU tensors, a host-side library "
                "call, a wait inside an op." + offload,
                f"Find the ops (the largest gap: {h.largest_gap_what}; profile with_stack=True); move their work to "
                "the device or out of the step (a worker, a background thread), or make it asynchronous; for a CPU "
                "optimizer, give it more threads or fewer offloaded states.", subject=subject)
        graphs = h.graph_launch_count > 0
        return self.fired(
            severity, f"{subject}: the device waits on the host dispatching ops {100 * share:.0f}% of the step"
            + mostly, ev,
            "The host was inside ops and launch calls, issuing work one op at a time, while the device had "
            "nothing to run: its kernels finish faster than the host issues them. Checkpointing cannot help here "
            "and its recompute is nearly free." + offload,
            ("The step already replays graphs: capture the ops still launched one by one between the replays "
             "into the graph (or torch.compile them), " if graphs else
             "Replay the step's launches with CUDA graphs (torch.compile(mode='reduce-overhead')) or fuse small ops "
             "with torch.compile; ")
            + "use fused optimizers (fused=True / foreach); raise the batch or sequence length "
            "so each kernel runs longer; make sure no other process competes for the host's cores.",
            subject=subject)

    # -- facts recorded before the host-cause split ---------------------------------------------
    def _legacy_check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        keys = run_keys(facts)
        if not keys:
            return [self.inconclusive("no profiled training step in the facts (the batch sweep and offload probes "
                                      "profile theirs; or analyze a trace)")]
        readings, why_not = [], []
        for key in keys:
            tm = facts.trace[key]
            if tm.device_unavailable or not tm.device_window_us or tm.idle_host_wait_us is None:
                why_not.append(f"{key}: {tm.device_unavailable or 'no device activity'}")
                continue
            readings.append(self._reading(facts, key, tm))
        if not readings and facts.environment.device_kind == "cpu":
            return [self.inconclusive("CPU run: the traces have no device, so there is no device to starve")]
        if not readings:
            return [self.inconclusive("the traces have no device activity, so there is no device to starve ("
                                      + "; ".join(why_not[:3]) + ("; ..." if len(why_not) > 3 else "") + ")")]
        out, passed, undecided = [], [], []
        for r in readings:
            v = self._judge(r, facts, t)
            if v is not None:
                key = r.subject if r.subject != "trace" else "all"
                v.scope, v.topic = scope_of(key), probe_of(key)
            if v is None:
                undecided.append(r.subject)
            elif v.status == "fired":
                out.append(v)
            else:
                passed.append(v)
        if out:
            return out
        if len(readings) == 1 and passed:
            return passed
        worst = max(readings, key=lambda r: r.host_wait_share)
        ev = [Evidence(f"largest host-wait idle ({worst.subject})", pct(worst.host_wait_share), "% of the device window"),
              Evidence("profiled windows judged", len(readings) - len(undecided))]
        if len(undecided) == len(readings):
            return [self.inconclusive("host-wait idle is material but the host CPU load is unknown (no telemetry, "
                                      "no host ops in the trace): " + ", ".join(undecided))]
        return [self.passed(f"The device does not starve on the host: host-wait idle at most "
                            f"{pct(worst.host_wait_share):.0f}% of the device window, or the host is not saturated",
                            ev)]

    def _reading(self, facts: Facts, key: str, tm: TraceMetrics) -> HostReading:
        steps = steps_in(facts, key)
        w, wait = tm.device_window_us, tm.idle_host_wait_us
        assert w is not None and wait is not None  # only windows with device activity are read
        m = measurement_for(facts, key) if key != "all" else None
        tel = m.telemetry if m is not None else {}
        cpu = cpu_load(tel) if tel else None
        dk = facts.offload.device_key if facts.offload is not None else "gpu0"
        busy = None
        if tm.cpu_busy_us is not None and tm.wall_us:
            busy = max(tm.cpu_busy_us - (tm.sync_call_us or 0.0), 0.0) / tm.wall_us
        r = HostReading(subject=key if key != "all" else "trace", host_wait_share=wait / w,
                        idle_share=None if tm.idle_us is None else tm.idle_us / w,
                        host_wait_ms=ms(wait, steps), per_step=steps is not None, cpu=cpu,
                        trace_host_busy_share=busy, util_mean_pct=summary_value(tel, f"{dk}.util_pct", "mean"),
                        util_min_pct=summary_value(tel, f"{dk}.util_pct", "min"),
                        step_ms=m.step_ms_median if m is not None else None)
        r.where, r.where_share = _where(facts, key, tm)
        return r

    def _judge(self, r: HostReading, facts: Facts, t: dict[str, float]) -> Verdict | None:
        """Fired or passed; None when the host-wait idle is material but the CPU load is unknown."""
        ev = [Evidence("host-wait idle", pct(r.host_wait_share), "% of the device window"),
              Evidence("host-wait idle", r.host_wait_ms, "ms/step" if r.per_step else "ms in the trace"),
              Evidence("device idle, all", pct(r.idle_share), "% of the device window")]
        if r.step_ms is not None:
            ev.append(Evidence("step", r.step_ms, "ms"))
        if r.where is not None:
            ev.append(Evidence(f"where the host spent it: {r.where} (host time the device did not match, share of "
                               "the host-wait idle)", pct(r.where_share), "%"))
        cpu = r.cpu if r.cpu is not None and r.cpu.known else None
        telemetry = cpu is not None
        if cpu is not None:
            ev += [Evidence("host CPU mean", cpu.cpu_pct, "%"), Evidence("busiest core mean", cpu.max_core_pct, "%"),
                   Evidence("process CPU mean (100 = one core)", cpu.proc_pct, "%"),
                   Evidence("device utilisation mean", r.util_mean_pct, "%"),
                   Evidence("device utilisation min", r.util_min_pct, "%")]
        else:
            reason = ("a bare trace" if r.subject == "trace"
                      else facts.missing_reason("telemetry") if facts.telemetry is None else "no samples for this window")
            ev += [Evidence("telemetry", f"unavailable ({reason}): judged on the trace alone"),
                   Evidence("host time inside CPU ops (sync calls excluded)", pct(r.trace_host_busy_share), "%")]
        if r.host_wait_share < t["min_host_wait_share"]:
            return self.passed(f"{r.subject}: host-wait idle {pct(r.host_wait_share):.0f}% of the device window",
                               ev, subject=r.subject)
        if cpu is not None:
            saturated = cpu.saturated(t)
        elif r.trace_host_busy_share is not None:
            saturated = r.trace_host_busy_share >= t["trace_host_busy_share"]
        else:
            return None
        if not saturated:
            return self.passed(f"{r.subject}: the device waits on the host {pct(r.host_wait_share):.0f}% of the "
                               "time, but the host is not saturated (waiting on something else: I/O, a lock, "
                               "another process)", ev, subject=r.subject)
        where = WHERE.get(r.where or "", "the host")
        return self.fired(
            "warning", f"{r.subject}: the device waits on a saturated host {pct(r.host_wait_share):.0f}% of the "
            f"step" + (f", mostly in {SHORT[r.where]}" if r.where else ""), ev,
            f"The device sat idle with its next operation not yet issued for {pct(r.host_wait_share):.0f}% of the "
            f"device window while the host was saturated: the host sets the pace, most of it in {where}. "
            "Checkpointing cannot help here and its recompute is nearly free."
            + (" Telemetry unavailable: judged on the trace alone." if not telemetry else "")
            + (" This variant offloads to the host: see GC020 for the stall it causes." if r.subject.startswith(
                "offload/") else ""),
            "Data loading: DataLoader workers (num_workers, pin_memory, prefetch_factor), pre-tokenised data. CPU "
            "optimizer: more threads for it (OMP_NUM_THREADS, free cores), fewer offloaded states, or a fused "
            "optimizer on the device. Python/launch overhead: fewer, larger checkpoint regions, CUDA graphs or "
            "torch.compile. Make sure no other process competes for the cores.", subject=r.subject)


def _where(facts: Facts, key: str, tm: TraceMetrics) -> tuple[str | None, float | None]:
    """Where the host spent the time the device waited: the labelled phase with the most host time not
    matched by device work (its host time minus its device busy time), or "outside" the labelled
    phases when those explain less than half of the host-wait idle. None without phase windows."""
    wait = tm.idle_host_wait_us or 0.0
    excess = {}
    for phase in PHASES:
        pw = window(facts, key, phase)
        if pw is not None and pw.wall_us is not None:
            excess[phase] = max(pw.wall_us - (pw.busy_us or 0.0), 0.0)
    if not excess or wait <= 0:
        return None, None
    phase = max(excess, key=lambda p: excess[p])
    if excess[phase] < 0.5 * wait:
        return "outside", None
    return phase, min(excess[phase] / wait, 1.0)
